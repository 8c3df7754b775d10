// ggml_gemm_q4_1: the ggml prefill GEMM (ggml_gemm.wgsli) over Q4_1 weights.
#include "ggml_gemm.wgsli"
#include "q4_1_format.wgsli"
