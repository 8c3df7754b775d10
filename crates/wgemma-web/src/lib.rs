//! wgemma in the browser: a wasm32 + WebGPU front end over the same library the native CLI
//! uses (every kernel, the model, speculative decoding and the `wgemma::session` front door
//! are shared).
//!
//! - [`web`]: the JS API (`Session`), packaged by `wasm-bindgen --target web` as an ES module
//!   with TypeScript types over `wgemma::session::Session`; see `tools/browser/build.sh` and
//!   `web/index.html`.
//! - [`bench`]: `runBench`, `wgemma bench`'s tests on the host's WebGPU (a browser, or Dawn
//!   under Node: `tools/browser/dawn/`).

pub mod bench;
pub mod web;
