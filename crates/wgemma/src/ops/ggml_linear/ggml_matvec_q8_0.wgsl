// ggml_matvec_q8_0: the ggml matvec (ggml_matvec.wgsli) over Q8_0 weights.
#include "ggml_matvec.wgsli"
#include "q8_0_format.wgsli"
