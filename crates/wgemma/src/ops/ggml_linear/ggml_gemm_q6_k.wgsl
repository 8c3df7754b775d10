// ggml_gemm_q6_k: the ggml prefill GEMM (ggml_gemm.wgsli) over Q6_K weights.
#include "ggml_gemm.wgsli"
#include "q6_k_format.wgsli"
