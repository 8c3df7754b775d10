// ggml_gemm_q4_k: the ggml prefill GEMM (ggml_gemm.wgsli) over Q4_K weights.
#include "ggml_gemm.wgsli"
#include "q4_k_format.wgsli"
