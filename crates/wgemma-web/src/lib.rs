//! wgemma in the browser: a wasm32 + WebGPU front end over the same library the native CLI
//! uses (every kernel, the model and speculative decoding are shared).
//!
//! - [`engine`]: loading from bytes and generation with a streaming callback; no JS in it,
//!   so native tests drive it too.
//! - [`web`]: the JS API (`Session`), packaged by `wasm-bindgen --target web` as an ES module
//!   with TypeScript types; see `tools/browser/build.sh` and `web/index.html`.

pub mod engine;
pub mod web;
