#![no_main]
//! libFuzzer target: see `crates/wgemma-server/src/fuzzing.rs` (`json_schema`) for what it
//! exercises.

libfuzzer_sys::fuzz_target!(|data: &[u8]| wgemma_server::fuzzing::json_schema(data));
