// ggml_matvec_q8_0_sg: the ggml matvec (ggml_matvec.wgsli) over Q8_0 weights, the partial
// sums added with subgroupAdd (32-lane subgroups: the host checks).
#include "ggml_matvec.wgsli"
#include "ggml_matvec_finish_sg.wgsli"
#include "q8_0_format.wgsli"
