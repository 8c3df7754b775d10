#![no_main]
//! libFuzzer target: see `fuzz/http_targets.rs` for what it exercises.

#[path = "../http_targets.rs"]
mod http_targets;
#[path = "../../crates/wgemma-cli/src/serve_api.rs"]
#[allow(dead_code)]
mod serve_api;
#[path = "../../crates/wgemma-cli/src/serve_fields.rs"]
#[allow(dead_code)]
mod serve_fields;
#[path = "../../crates/wgemma-cli/src/serve_guard.rs"]
#[allow(dead_code)]
mod serve_guard;
#[path = "../../crates/wgemma-cli/src/serve_metrics.rs"]
#[allow(dead_code)]
mod serve_metrics;
#[path = "../../crates/wgemma-cli/src/serve_response.rs"]
#[allow(dead_code)]
mod serve_response;
#[path = "../../crates/wgemma-cli/src/serve_structured.rs"]
#[allow(dead_code)]
mod serve_structured;
#[path = "../../crates/wgemma-cli/src/serve_tools.rs"]
#[allow(dead_code)]
mod serve_tools;

libfuzzer_sys::fuzz_target!(|data: &[u8]| http_targets::http_request(data));
