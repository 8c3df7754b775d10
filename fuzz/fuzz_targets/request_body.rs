#![no_main]
//! libFuzzer target: see `crates/wgemma-server/src/fuzzing.rs` (`request_body`) for what it
//! exercises.

libfuzzer_sys::fuzz_target!(|data: &[u8]| wgemma_server::fuzzing::request_body(data));
