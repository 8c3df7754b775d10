// ggml_matvec_q6_k: the ggml matvec (ggml_matvec.wgsli) over Q6_K weights, the partial
// sums added in workgroup memory (portable).
#include "ggml_matvec.wgsli"
#include "ggml_matvec_finish_wg.wgsli"
#include "q6_k_format.wgsli"
