// ggml_gemm_q5_1: the ggml prefill GEMM (ggml_gemm.wgsli) over Q5_1 weights.
#include "ggml_gemm.wgsli"
#include "q5_1_format.wgsli"
