// ggml_gather_q4_k: the embedding gather (ggml_gather.wgsli) over a Q4_K table.
#include "ggml_gather.wgsli"
#include "q4_k_format.wgsli"
