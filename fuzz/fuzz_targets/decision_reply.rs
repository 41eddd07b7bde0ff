//! Decision-server reply decoding: any body decodes to a replica count or an error, never a
//! panic.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(n) = llmscaler::metrics::decode_decision_body("svc", None, data) {
        assert!(n >= 0);
    }
    let _ = llmscaler::metrics::decode_decision_body("svc", Some("ns"), data);
});
