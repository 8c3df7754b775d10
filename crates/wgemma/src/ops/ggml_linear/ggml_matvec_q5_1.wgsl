// ggml_matvec_q5_1: the ggml matvec (ggml_matvec.wgsli) over Q5_1 weights, the partial
// sums added in workgroup memory (portable).
#include "ggml_matvec.wgsli"
#include "ggml_matvec_finish_wg.wgsli"
#include "q5_1_format.wgsli"
#include "ggml_quad_units.wgsli"
