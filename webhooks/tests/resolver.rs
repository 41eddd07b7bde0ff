//! The swappable certificate: what loads, what is refused, and that a refused swap keeps the
//! certificate in use.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // a test: a failed expectation fails it

use llmscaler_certs::{CertConfig, CertState, pki};
use llmscaler_webhooks::Error;
use llmscaler_webhooks::server::{CertResolver, certified_key_from_pem};

fn certs() -> CertState {
    let mut cfg = CertConfig::new("ns", "secret", "svc");
    cfg.extra_sans = vec!["127.0.0.1".to_string()];
    pki::new_state(&cfg, time::OffsetDateTime::now_utc()).expect("certificates")
}

fn leaf_der(resolver: &CertResolver) -> Vec<u8> {
    let key = resolver.current().expect("a certificate");
    key.cert[0].as_ref().to_vec()
}

#[test]
fn loads_a_matching_pair() {
    let _ = rustls::crypto::aws_lc_rs::default_provider().install_default();
    let a = certs();
    let resolver =
        CertResolver::from_pem(a.tls_cert_pem.as_bytes(), a.tls_key_pem.as_bytes()).expect("loads");
    assert_eq!(resolver.current().expect("set").cert.len(), 1);
}

#[test]
fn refuses_a_key_from_another_certificate_and_keeps_the_old_one() {
    let _ = rustls::crypto::aws_lc_rs::default_provider().install_default();
    let (a, b) = (certs(), certs());
    let resolver =
        CertResolver::from_pem(a.tls_cert_pem.as_bytes(), a.tls_key_pem.as_bytes()).expect("loads");
    let before = leaf_der(&resolver);
    let err = resolver
        .set_pem(b.tls_cert_pem.as_bytes(), a.tls_key_pem.as_bytes())
        .expect_err("mismatched pair");
    assert!(matches!(err, Error::PrivateKey { .. }), "{err}");
    assert_eq!(leaf_der(&resolver), before);
    resolver
        .set_pem(b.tls_cert_pem.as_bytes(), b.tls_key_pem.as_bytes())
        .expect("matching pair");
    assert_ne!(leaf_der(&resolver), before);
}

#[test]
fn refuses_garbage_with_what_is_wrong() {
    let _ = rustls::crypto::aws_lc_rs::default_provider().install_default();
    let a = certs();
    for (cert, key, want_cert_error) in [
        ("", a.tls_key_pem.as_str(), true),
        ("not pem", a.tls_key_pem.as_str(), true),
        (a.tls_cert_pem.as_str(), "", false),
        (a.tls_cert_pem.as_str(), a.tls_cert_pem.as_str(), false),
    ] {
        let err = certified_key_from_pem(cert.as_bytes(), key.as_bytes(), "test.pem")
            .expect_err("garbage refused");
        assert_eq!(
            matches!(err, Error::Certificate { .. }),
            want_cert_error,
            "{err}"
        );
        assert!(err.to_string().contains("test.pem"), "{err}");
    }
    assert!(CertResolver::new().current().is_none());
}
