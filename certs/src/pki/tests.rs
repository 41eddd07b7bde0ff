//! Rotation decisions over an injected clock: no sleeps, days pass by adding to `now`.

use super::*;
use pretty_assertions::assert_eq;

const DAY: time::Duration = time::Duration::days(1);

fn cfg() -> CertConfig {
    let mut cfg = CertConfig::new(
        "llmscaler-system",
        "llmscaler-webhook-certs",
        "llmscaler-webhook",
    );
    cfg.extra_sans = vec!["127.0.0.1".to_string(), "localhost".to_string()];
    cfg.ca_validity = Duration::from_secs(360 * 86_400);
    cfg.serving_validity = Duration::from_secs(30 * 86_400);
    cfg
}

fn t0() -> OffsetDateTime {
    OffsetDateTime::from_unix_timestamp(1_800_000_000).expect("valid time")
}

fn info(pem: &str) -> CertInfo {
    inspect(pem, "test").expect("parses")
}

#[test]
fn subject_alt_names_cover_the_service_and_extras() {
    assert_eq!(
        cfg().subject_alt_names(),
        vec![
            "llmscaler-webhook",
            "llmscaler-webhook.llmscaler-system",
            "llmscaler-webhook.llmscaler-system.svc",
            "llmscaler-webhook.llmscaler-system.svc.cluster.local",
            "127.0.0.1",
            "localhost",
        ]
    );
    let mut dup = cfg();
    dup.extra_sans = vec!["llmscaler-webhook".to_string()];
    assert_eq!(dup.subject_alt_names().len(), 4);
}

#[test]
fn new_state_has_a_ca_and_a_serving_certificate_it_signed() {
    let state = new_state(&cfg(), t0()).expect("generates");
    let ca = info(&state.ca_cert_pem);
    assert_eq!(ca.not_before, t0() - time::Duration::minutes(5));
    assert_eq!(ca.not_after, t0() + 360 * DAY);
    let leaf = info(&state.tls_cert_pem);
    assert_eq!(leaf.not_after, t0() + 30 * DAY);
    assert_eq!(leaf.sans, cfg().subject_alt_names().into_iter().collect());
    assert!(signed_by(&state.tls_cert_pem, &state.ca_cert_pem));
    assert!(!signed_by(&state.ca_cert_pem, &state.tls_cert_pem));
    assert_eq!(
        state.ca_bundle_pem(),
        format!("{}\n", state.ca_cert_pem.trim_end())
    );
    assert_eq!(renew(&state, &cfg(), t0()).expect("renew"), None);
}

#[test]
fn rustls_accepts_the_serving_certificate_for_every_name() {
    use rustls::client::danger::ServerCertVerifier;
    use rustls::pki_types::{CertificateDer, ServerName, UnixTime, pem::PemObject};
    let state = new_state(&cfg(), OffsetDateTime::now_utc()).expect("generates");
    let mut roots = rustls::RootCertStore::empty();
    roots
        .add(CertificateDer::from_pem_slice(state.ca_cert_pem.as_bytes()).expect("ca pem"))
        .expect("root added");
    let provider = std::sync::Arc::new(rustls::crypto::aws_lc_rs::default_provider());
    let verifier =
        rustls::client::WebPkiServerVerifier::builder_with_provider(roots.into(), provider)
            .build()
            .expect("verifier");
    let leaf = CertificateDer::from_pem_slice(state.tls_cert_pem.as_bytes()).expect("leaf pem");
    for name in cfg().subject_alt_names() {
        let server = ServerName::try_from(name.clone()).expect("name");
        verifier
            .verify_server_cert(&leaf, &[], &server, &[], UnixTime::now())
            .unwrap_or_else(|e| panic!("{name}: {e}"));
    }
    let other = ServerName::try_from("evil.example").expect("name");
    assert!(
        verifier
            .verify_server_cert(&leaf, &[], &other, &[], UnixTime::now())
            .is_err()
    );
}

#[test]
fn serving_certificate_is_renewed_when_a_third_of_its_life_is_left() {
    let state = new_state(&cfg(), t0()).expect("generates");
    assert_eq!(renew(&state, &cfg(), t0() + 19 * DAY).expect("renew"), None);
    let renewed = renew(&state, &cfg(), t0() + 20 * DAY)
        .expect("renew")
        .expect("due at 20 of 30 days");
    assert_eq!(renewed.ca_cert_pem, state.ca_cert_pem, "same CA");
    assert_ne!(renewed.tls_cert_pem, state.tls_cert_pem);
    assert_ne!(renewed.tls_key_pem, state.tls_key_pem);
    assert_eq!(info(&renewed.tls_cert_pem).not_after, t0() + 50 * DAY);
    assert!(signed_by(&renewed.tls_cert_pem, &renewed.ca_cert_pem));
}

#[test]
fn serving_certificate_is_reissued_when_the_names_change() {
    let state = new_state(&cfg(), t0()).expect("generates");
    let mut more = cfg();
    more.extra_sans.push("10.0.0.7".to_string());
    let renewed = renew(&state, &more, t0())
        .expect("renew")
        .expect("names changed");
    assert!(info(&renewed.tls_cert_pem).sans.contains("10.0.0.7"));
    assert_eq!(renewed.ca_cert_pem, state.ca_cert_pem);
}

#[test]
fn serving_certificate_never_outlives_its_ca() {
    let mut short = cfg();
    short.ca_validity = Duration::from_secs(10 * 86_400);
    let state = new_state(&short, t0()).expect("generates");
    assert_eq!(
        info(&state.tls_cert_pem).not_after,
        info(&state.ca_cert_pem).not_after
    );
}

#[test]
fn ca_rotation_overlaps_old_and_new_in_the_bundle() {
    let cfg = cfg();
    let state = new_state(&cfg, t0()).expect("generates");
    let old_ca = state.ca_cert_pem.clone();
    // Keep the serving certificate fresh along the way so only the CA decides.
    let mut state = state;
    for day in (10..=230).step_by(10) {
        let now = t0() + day * DAY;
        if let Some(next) = renew(&state, &cfg, now).expect("renew") {
            state = next;
        }
        assert_eq!(state.ca_cert_pem, old_ca);
        assert_eq!(state.next_ca_cert_pem, None, "{now}");
    }
    // 240 of 360 days: a third left, the next CA appears beside the old one.
    let now = t0() + 240 * DAY;
    state = renew(&state, &cfg, now)
        .expect("renew")
        .expect("CA rotation starts");
    let next_ca = state.next_ca_cert_pem.clone().expect("next CA");
    assert_eq!(state.ca_cert_pem, old_ca, "old CA still signs");
    assert!(signed_by(&state.tls_cert_pem, &old_ca));
    assert_eq!(
        state.ca_bundle_pem(),
        format!("{}\n{}\n", old_ca.trim_end(), next_ca.trim_end())
    );
    // Before a sixth of the validity (60 days) the switch waits.
    let waiting = renew(&state, &cfg, now + 59 * DAY)
        .expect("renew")
        .unwrap_or(state.clone());
    assert_eq!(waiting.ca_cert_pem, old_ca);
    assert_eq!(waiting.next_ca_cert_pem.as_deref(), Some(next_ca.as_str()));
    // After it, the next CA signs and the old one stays trusted as previous.
    state = renew(&state, &cfg, now + 60 * DAY)
        .expect("renew")
        .expect("switch");
    assert_eq!(state.ca_cert_pem, next_ca);
    assert_eq!(state.previous_ca_cert_pem.as_deref(), Some(old_ca.as_str()));
    assert_eq!(state.next_ca_cert_pem, None);
    assert!(signed_by(&state.tls_cert_pem, &next_ca));
    assert_eq!(
        state.ca_bundle_pem(),
        format!("{}\n{}\n", old_ca.trim_end(), next_ca.trim_end())
    );
    // The previous CA leaves the bundle once it has expired (day 360).
    let later = renew(&state, &cfg, t0() + 361 * DAY)
        .expect("renew")
        .expect("drop previous");
    assert_eq!(later.previous_ca_cert_pem, None);
    assert_eq!(later.ca_cert_pem, next_ca);
}

#[test]
fn expired_or_garbage_ca_starts_over() {
    let state = new_state(&cfg(), t0()).expect("generates");
    let fresh = renew(&state, &cfg(), t0() + 400 * DAY)
        .expect("renew")
        .expect("expired");
    assert_ne!(fresh.ca_cert_pem, state.ca_cert_pem);
    assert!(signed_by(&fresh.tls_cert_pem, &fresh.ca_cert_pem));
    let mut garbage = state.clone();
    garbage.ca_cert_pem = "not a certificate".to_string();
    let fresh = renew(&garbage, &cfg(), t0())
        .expect("renew")
        .expect("garbage");
    assert!(signed_by(&fresh.tls_cert_pem, &fresh.ca_cert_pem));
}

#[test]
fn serving_certificate_from_another_ca_is_reissued() {
    let a = new_state(&cfg(), t0()).expect("generates");
    let b = new_state(&cfg(), t0()).expect("generates");
    let mut mixed = a.clone();
    mixed.tls_cert_pem = b.tls_cert_pem.clone();
    mixed.tls_key_pem = b.tls_key_pem.clone();
    let fixed = renew(&mixed, &cfg(), t0())
        .expect("renew")
        .expect("foreign leaf");
    assert_eq!(fixed.ca_cert_pem, a.ca_cert_pem);
    assert!(signed_by(&fixed.tls_cert_pem, &a.ca_cert_pem));
}

#[test]
fn invalid_san_is_an_error_not_a_panic() {
    let mut bad = cfg();
    bad.extra_sans = vec!["bücher.example".to_string()];
    assert!(matches!(new_state(&bad, t0()), Err(Error::Generate { .. })));
}
