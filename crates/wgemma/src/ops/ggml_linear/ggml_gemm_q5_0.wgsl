// ggml_gemm_q5_0: the ggml prefill GEMM (ggml_gemm.wgsli) over Q5_0 weights.
#include "ggml_gemm.wgsli"
#include "q5_0_format.wgsli"
