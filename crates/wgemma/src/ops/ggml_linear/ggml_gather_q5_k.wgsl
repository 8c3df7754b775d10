// ggml_gather_q5_k: the embedding gather (ggml_gather.wgsli) over a Q5_K table.
#include "ggml_gather.wgsli"
#include "q5_k_format.wgsli"
