// ggml_matvec_q5_0: the ggml matvec (ggml_matvec.wgsli) over Q5_0 weights, the partial
// sums added in workgroup memory (portable).
#include "ggml_matvec.wgsli"
#include "ggml_matvec_finish_wg.wgsli"
#include "q5_0_format.wgsli"
#include "ggml_quad_units.wgsli"
