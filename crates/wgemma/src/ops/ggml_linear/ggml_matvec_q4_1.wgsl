// ggml_matvec_q4_1: the ggml matvec (ggml_matvec.wgsli) over Q4_1 weights.
#include "ggml_matvec.wgsli"
#include "q4_1_format.wgsli"
