// ggml_matvec_q8_0: the ggml matvec (ggml_matvec.wgsli) over Q8_0 weights, the partial
// sums added in workgroup memory (portable).
#include "ggml_matvec.wgsli"
#include "ggml_matvec_finish_wg.wgsli"
#include "q8_0_format.wgsli"
