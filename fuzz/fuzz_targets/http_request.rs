#![no_main]
//! libFuzzer target: see `crates/wgemma-server/src/fuzzing.rs` for what it exercises.

libfuzzer_sys::fuzz_target!(|data: &[u8]| wgemma_server::fuzzing::http_request(data));
