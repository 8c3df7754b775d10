// ggml_matvec_q8_0_int8: the ggml integer-dot matvec (ggml_matvec_int8.wgsli) over Q8_0
// weights, the activations quantised one thread per block and the partial sums added in
// workgroup memory (portable).
#include "ggml_matvec_int8.wgsli"
#include "../linear/int8_stage.wgsli"
#include "../linear/q4_matvec_q8_quantize_wg.wgsli"
#include "ggml_matvec_int8_finish_wg.wgsli"
#include "q8_0_format.wgsli"
