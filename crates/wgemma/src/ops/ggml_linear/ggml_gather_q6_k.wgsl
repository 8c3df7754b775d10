// ggml_gather_q6_k: the embedding gather (ggml_gather.wgsli) over a Q6_K table.
#include "ggml_gather.wgsli"
#include "q6_k_format.wgsli"
