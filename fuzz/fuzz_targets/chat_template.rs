#![no_main]
//! libFuzzer target: see `fuzz/targets.rs` for what it exercises.

#[path = "../targets.rs"]
#[allow(dead_code)]
mod targets;

libfuzzer_sys::fuzz_target!(|data: &[u8]| targets::chat_template(data));
