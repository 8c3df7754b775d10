// ggml_matvec_q8_0_int8_sg: the ggml integer-dot matvec (ggml_matvec_int8.wgsli) over Q8_0
// weights, the activations quantised 8 lanes per block and the partial sums added with
// subgroup shuffles (32-lane subgroups: the host checks).
#include "ggml_matvec_int8.wgsli"
#include "../linear/int8_stage.wgsli"
#include "../linear/q4_matvec_q8_quantize_sg.wgsli"
#include "ggml_matvec_int8_finish_sg.wgsli"
#include "q8_0_format.wgsli"
