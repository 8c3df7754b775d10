// ggml_matvec_q6_k: the ggml matvec (ggml_matvec.wgsli) over Q6_K weights.
#include "ggml_matvec.wgsli"
#include "q6_k_format.wgsli"
