// ggml_matvec_q5_k: the ggml matvec (ggml_matvec.wgsli) over Q5_K weights, the partial
// sums added in workgroup memory (portable).
#include "ggml_matvec.wgsli"
#include "ggml_matvec_finish_wg.wgsli"
#include "q5_k_format.wgsli"
