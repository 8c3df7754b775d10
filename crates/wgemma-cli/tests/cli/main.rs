//! The `wgemma` binary's integration tests, as one test binary (one link of wgpu, naga and
//! tokenizers rather than one per theme): each module a theme, shared helpers in
//! [`common`]. `cargo test -p wgemma-cli --test cli bad_inputs` runs one theme.

mod artifact;
mod bad_inputs;
mod bench;
mod chat;
mod common;
mod demo;
mod flags;
mod hostile_files;
mod newcomer;
