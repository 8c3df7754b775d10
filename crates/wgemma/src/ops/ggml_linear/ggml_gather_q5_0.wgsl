// ggml_gather_q5_0: the embedding gather (ggml_gather.wgsli) over a Q5_0 table.
#include "ggml_gather.wgsli"
#include "q5_0_format.wgsli"
