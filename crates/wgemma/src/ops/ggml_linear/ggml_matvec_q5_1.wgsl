// ggml_matvec_q5_1: the ggml matvec (ggml_matvec.wgsli) over Q5_1 weights.
#include "ggml_matvec.wgsli"
#include "q5_1_format.wgsli"
