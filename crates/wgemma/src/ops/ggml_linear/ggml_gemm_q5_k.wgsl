// ggml_gemm_q5_k: the ggml prefill GEMM (ggml_gemm.wgsli) over Q5_K weights.
#include "ggml_gemm.wgsli"
#include "q5_k_format.wgsli"
