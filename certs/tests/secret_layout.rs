//! The Secret layout: a state survives the round trip through `data`, and an incomplete Secret
//! reads as absent.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // a test: a failed expectation fails it

use k8s_openapi::api::core::v1::Secret;
use llmscaler_certs::{CA_BUNDLE, CA_CERT, CertConfig, CertState, TLS_KEY, pki};

fn state() -> CertState {
    let cfg = CertConfig::new("ns", "secret", "svc");
    pki::new_state(&cfg, time::OffsetDateTime::now_utc()).expect("certificates")
}

#[test]
fn state_round_trips_through_secret_data() {
    let mut state = state();
    state.previous_ca_cert_pem = Some(state.ca_cert_pem.clone());
    let secret = Secret {
        data: Some(state.to_secret_data()),
        ..Secret::default()
    };
    assert_eq!(CertState::from_secret(&secret), Some(state.clone()));
    let bundle = secret
        .data
        .as_ref()
        .and_then(|d| d.get(CA_BUNDLE))
        .expect("bundle");
    assert_eq!(String::from_utf8_lossy(&bundle.0), state.ca_bundle_pem());
    assert_eq!(
        state.ca_bundle_pem().matches("BEGIN CERTIFICATE").count(),
        2
    );
}

#[test]
fn incomplete_secret_reads_as_absent() {
    let state = state();
    for missing in [CA_CERT, TLS_KEY] {
        let mut data = state.to_secret_data();
        data.remove(missing);
        let secret = Secret {
            data: Some(data),
            ..Secret::default()
        };
        assert_eq!(CertState::from_secret(&secret), None, "without {missing}");
    }
    assert_eq!(CertState::from_secret(&Secret::default()), None);
}
