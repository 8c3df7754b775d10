// ggml_matvec_q5_0: the ggml matvec (ggml_matvec.wgsli) over Q5_0 weights.
#include "ggml_matvec.wgsli"
#include "q5_0_format.wgsli"
