// ggml_matvec_q5_k: the ggml matvec (ggml_matvec.wgsli) over Q5_K weights.
#include "ggml_matvec.wgsli"
#include "q5_k_format.wgsli"
