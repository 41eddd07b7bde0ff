//! AdmissionReview decoding and validation: any bytes posted to `/validate` or `/mutate` get
//! one well-formed reply, never a panic.
#![no_main]

use libfuzzer_sys::fuzz_target;
use llmscaler_webhooks::review::{Endpoint, handle};

fuzz_target!(|data: &[u8]| {
    let policy = llmscaler_api::OperatorPolicy::default();
    for endpoint in [Endpoint::Validate, Endpoint::Mutate] {
        let reply = handle(endpoint, &policy, Some("application/json"), data);
        assert!((200..600).contains(&reply.status));
        assert!(!reply.body.is_empty());
    }
});
