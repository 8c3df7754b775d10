// ggml_matvec_q5_1_sg: the ggml matvec (ggml_matvec.wgsli) over Q5_1 weights, the partial
// sums added with subgroupAdd (32-lane subgroups: the host checks).
#include "ggml_matvec.wgsli"
#include "ggml_matvec_finish_sg.wgsli"
#include "q5_1_format.wgsli"
#include "ggml_quad_units.wgsli"
