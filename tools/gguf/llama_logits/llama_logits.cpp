// llama_logits: llama.cpp's logits for exact token ids, at every position, in one batch.
//
//   llama_logits MODEL.gguf OUT.f32 ID[,ID...] [--threads N] [--kv f16|f32] [--flash-attn on|off|auto]
//
// Loads MODEL.gguf on the CPU (no GPU layers), decodes the ids as one sequence in one
// llama_decode call with logits requested for every token, and writes them to OUT.f32 as
// raw little-endian float32, n_tokens rows of n_vocab (row-major). Prints
// "n_tokens n_vocab" on stdout. Defaults are llama.cpp's own (KV cache f16, flash
// attention auto), as `llama-cli` runs a file; --kv f32 and --flash-attn off isolate the
// cache's and the attention kernel's share of the error. A measuring tool for
// tools/gguf/compare_llama_logits.py, not part of wgemma; build: see README.md here.

#include "llama.h"

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

namespace {

struct Args {
    std::string model;
    std::string out;
    std::vector<llama_token> tokens;
    int threads = 2;
    ggml_type kv = GGML_TYPE_F16;
    llama_flash_attn_type flash_attn = LLAMA_FLASH_ATTN_TYPE_AUTO;
};

[[noreturn]] void fail(const std::string & msg) {
    std::fprintf(stderr, "llama_logits: %s\n", msg.c_str());
    std::exit(1);
}

std::vector<llama_token> parse_ids(const std::string & list) {
    std::vector<llama_token> ids;
    size_t start = 0;
    while (start <= list.size()) {
        size_t end = list.find(',', start);
        if (end == std::string::npos) {
            end = list.size();
        }
        std::string item = list.substr(start, end - start);
        char * rest = nullptr;
        errno = 0;
        long v = std::strtol(item.c_str(), &rest, 10);
        if (item.empty() || *rest != '\0' || errno != 0 || v < 0 || v > INT32_MAX) {
            fail("expected token ids as non-negative integers separated by commas, found '" + item +
                 "' in '" + list + "'");
        }
        ids.push_back(static_cast<llama_token>(v));
        start = end + 1;
    }
    return ids;
}

Args parse_args(int argc, char ** argv) {
    Args a;
    std::vector<std::string> positional;
    for (int i = 1; i < argc; i++) {
        std::string arg = argv[i];
        auto value = [&]() -> std::string {
            if (i + 1 >= argc) {
                fail("expected a value after " + arg);
            }
            return argv[++i];
        };
        if (arg == "--threads") {
            std::string v = value();
            a.threads = std::atoi(v.c_str());
            if (a.threads < 1) {
                fail("expected --threads >= 1, found '" + v + "'");
            }
        } else if (arg == "--kv") {
            std::string v = value();
            if (v == "f16") {
                a.kv = GGML_TYPE_F16;
            } else if (v == "f32") {
                a.kv = GGML_TYPE_F32;
            } else {
                fail("expected --kv f16 or f32, found '" + v + "'");
            }
        } else if (arg == "--flash-attn") {
            std::string v = value();
            if (v == "on") {
                a.flash_attn = LLAMA_FLASH_ATTN_TYPE_ENABLED;
            } else if (v == "off") {
                a.flash_attn = LLAMA_FLASH_ATTN_TYPE_DISABLED;
            } else if (v == "auto") {
                a.flash_attn = LLAMA_FLASH_ATTN_TYPE_AUTO;
            } else {
                fail("expected --flash-attn on, off or auto, found '" + v + "'");
            }
        } else if (arg.rfind("--", 0) == 0) {
            fail("unknown option " + arg + " (expected --threads, --kv or --flash-attn)");
        } else {
            positional.push_back(arg);
        }
    }
    if (positional.size() != 3) {
        fail("usage: llama_logits MODEL.gguf OUT.f32 ID[,ID...] [--threads N] [--kv f16|f32] "
             "[--flash-attn on|off|auto]");
    }
    a.model = positional[0];
    a.out = positional[1];
    a.tokens = parse_ids(positional[2]);
    return a;
}

// llama.cpp's log, warnings and errors only (its info lines would bury the tool's own).
void log_warnings(ggml_log_level level, const char * text, void *) {
    if (level == GGML_LOG_LEVEL_WARN || level == GGML_LOG_LEVEL_ERROR) {
        std::fputs(text, stderr);
    }
}

// Logits of every position of `tokens`, decoded as one sequence in one batch.
std::vector<float> all_logits(llama_context * ctx, const std::vector<llama_token> & tokens, int n_vocab) {
    const int n = static_cast<int>(tokens.size());
    llama_batch batch = llama_batch_init(n, 0, 1);
    for (int i = 0; i < n; i++) {
        batch.token[i] = tokens[i];
        batch.pos[i] = i;
        batch.n_seq_id[i] = 1;
        batch.seq_id[i][0] = 0;
        batch.logits[i] = true;
    }
    batch.n_tokens = n;
    int32_t rc = llama_decode(ctx, batch);
    llama_batch_free(batch);
    if (rc != 0) {
        fail("llama_decode returned " + std::to_string(rc));
    }
    std::vector<float> out(static_cast<size_t>(n) * n_vocab);
    for (int i = 0; i < n; i++) {
        const float * row = llama_get_logits_ith(ctx, i);
        if (row == nullptr) {
            fail("no logits for position " + std::to_string(i));
        }
        std::memcpy(out.data() + static_cast<size_t>(i) * n_vocab, row, sizeof(float) * n_vocab);
    }
    return out;
}

// Writes `values` to `path` through a temporary file renamed into place, so a failed write
// leaves no partial OUT behind.
void write_whole(const std::string & path, const std::vector<float> & values) {
    const std::string tmp = path + ".partial";
    FILE * f = std::fopen(tmp.c_str(), "wb");
    if (f == nullptr) {
        fail("cannot write " + tmp + ": " + std::strerror(errno));
    }
    size_t written = std::fwrite(values.data(), sizeof(float), values.size(), f);
    if (std::fclose(f) != 0 || written != values.size()) {
        std::remove(tmp.c_str());
        fail("could not write all " + std::to_string(values.size()) + " logits to " + tmp);
    }
    if (std::rename(tmp.c_str(), path.c_str()) != 0) {
        std::remove(tmp.c_str());
        fail("cannot rename " + tmp + " to " + path + ": " + std::strerror(errno));
    }
}

}  // namespace

int main(int argc, char ** argv) {
    Args a = parse_args(argc, argv);
    llama_log_set(log_warnings, nullptr);
    llama_backend_init();

    llama_model_params mp = llama_model_default_params();
    mp.n_gpu_layers = 0;
    llama_model * model = llama_model_load_from_file(a.model.c_str(), mp);
    if (model == nullptr) {
        fail("llama.cpp could not load " + a.model + " (its log above says why)");
    }
    const int n_vocab = llama_vocab_n_tokens(llama_model_get_vocab(model));
    const int n = static_cast<int>(a.tokens.size());
    for (llama_token t : a.tokens) {
        if (t >= n_vocab) {
            fail("token id " + std::to_string(t) + " is outside the model's vocabulary of " +
                 std::to_string(n_vocab));
        }
    }

    llama_context_params cp = llama_context_default_params();
    cp.n_ctx = static_cast<uint32_t>(n < 256 ? 256 : n);
    cp.n_batch = cp.n_ctx;
    cp.n_ubatch = cp.n_ctx;
    cp.n_seq_max = 1;
    cp.n_threads = a.threads;
    cp.n_threads_batch = a.threads;
    cp.type_k = a.kv;
    cp.type_v = a.kv;
    cp.flash_attn_type = a.flash_attn;
    llama_context * ctx = llama_init_from_model(model, cp);
    if (ctx == nullptr) {
        fail("llama.cpp could not create a context for " + a.model);
    }

    std::vector<float> logits = all_logits(ctx, a.tokens, n_vocab);
    write_whole(a.out, logits);
    std::printf("%d %d\n", n, n_vocab);

    llama_free(ctx);
    llama_model_free(model);
    llama_backend_free();
    return 0;
}
