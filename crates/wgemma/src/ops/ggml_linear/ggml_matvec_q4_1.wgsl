// ggml_matvec_q4_1: the ggml matvec (ggml_matvec.wgsli) over Q4_1 weights, the partial
// sums added in workgroup memory (portable).
#include "ggml_matvec.wgsli"
#include "ggml_matvec_finish_wg.wgsli"
#include "q4_1_format.wgsli"
#include "ggml_quad_units.wgsli"
