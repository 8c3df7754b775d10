// ggml_matvec_q4_k: the ggml matvec (ggml_matvec.wgsli) over Q4_K weights.
#include "ggml_matvec.wgsli"
#include "q4_k_format.wgsli"
