//! The library's integration tests, as one test binary (one link of wgpu, naga, tokenizers
//! and the library rather than one per theme): each module a theme, the helpers they share
//! in [`common`]. `cargo test -p wgemma --test integration golden::` runs one theme; a
//! test's full name (`golden::moe_greedy_matches_hf`) runs one test.

mod artifact;
mod chat_template;
mod common;
mod fuzz_corpus;
mod gguf;
mod gguf_native;
mod golden;
mod head_dims;
mod load;
// Every op case over seeded random shapes needs the op cases, which only the harness
// feature compiles (`cargo test --workspace` has it through wgemma-cli; alone:
// `cargo test -p wgemma --features harness --test integration ops::`). A module rather
// than a second binary: the other themes still run without the feature, in one link.
#[cfg(feature = "harness")]
mod ops;
mod prefill_attention;
mod runtime;
mod session;
mod speculative;
mod stream_constraints;
mod trained;
