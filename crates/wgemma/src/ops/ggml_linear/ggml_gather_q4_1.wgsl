// ggml_gather_q4_1: the embedding gather (ggml_gather.wgsli) over a Q4_1 table.
#include "ggml_gather.wgsli"
#include "q4_1_format.wgsli"
