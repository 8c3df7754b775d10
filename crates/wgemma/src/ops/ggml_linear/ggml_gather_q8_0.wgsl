// ggml_gather_q8_0: the embedding gather (ggml_gather.wgsli) over a Q8_0 table.
#include "ggml_gather.wgsli"
#include "q8_0_format.wgsli"
