// ggml_gemm_q8_0: the ggml prefill GEMM (ggml_gemm.wgsli) over Q8_0 weights.
#include "ggml_gemm.wgsli"
#include "q8_0_format.wgsli"
