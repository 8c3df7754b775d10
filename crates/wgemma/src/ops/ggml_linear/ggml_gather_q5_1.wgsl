// ggml_gather_q5_1: the embedding gather (ggml_gather.wgsli) over a Q5_1 table.
#include "ggml_gather.wgsli"
#include "q5_1_format.wgsli"
