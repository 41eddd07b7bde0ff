//! Prometheus `/api/v1/query` reply decoding (instant and per-pod): any body decodes to a value
//! or an error, never a panic, and no error message quotes the body.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let _ = llmscaler::metrics::decode_instant_body("q", data);
    let _ = llmscaler::metrics::decode_per_pod_body("q", data);
});
