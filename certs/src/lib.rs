//! `llmscaler-certs`: the webhook's certificates without cert-manager (docs/admission.md, issue 5).
//!
//! The operator makes its own CA and a serving certificate for the webhook Service, keeps both
//! in a Secret in its namespace, renews them before they expire, and writes the CA bundle into
//! the `caBundle` of the webhook configurations with server-side apply under its own field
//! manager ([`CA_BUNDLE_FIELD_MANAGER`]), so Helm upgrades and GitOps syncs, which render the
//! configurations without `caBundle`, never touch it.
//!
//! - [`pki`]: pure functions with an injected clock: [`pki::new_state`] (a fresh CA and serving
//!   certificate), [`pki::renew`] (what rotation is due, if any), [`pki::inspect`].
//! - [`store`]: the Kubernetes side: [`store::sync_secret`] (race-safe create or update of the
//!   Secret), [`store::inject_ca_bundle`], and the loop the operator runs, [`store::maintain`].
//!
//! # Life cycle
//! - Serving certificate: valid for [`CertConfig::serving_validity`] (never past its CA);
//!   reissued when a third of its life is left, when its names differ from
//!   [`CertConfig::subject_alt_names`], or when it is not signed by the active CA.
//! - CA: valid for [`CertConfig::ca_validity`]. When a third of its life is left a next CA is
//!   made and published in the bundle beside it (the serving certificate stays signed by the
//!   old one). After a sixth of the CA validity the next CA becomes the active one, the serving
//!   certificate is reissued from it, and the old CA stays in the bundle as `previous` until it
//!   expires, so replicas still serving the old certificate keep working.
//!
//! # Wiring (what `llmscaler run` does)
//! ```text
//! let resolver = llmscaler_webhooks::server::CertResolver::new();
//! let first = llmscaler_certs::ensure(&client, &cfg).await?;          // Secret + caBundle
//! resolver.set_pem(first.cert_chain_pem.as_bytes(), first.key_pem.as_bytes())?;
//! let feed = resolver.clone();
//! tokio::spawn(llmscaler_certs::maintain(client.clone(), cfg, move |p| {
//!     if let Err(e) = feed.set_pem(p.cert_chain_pem.as_bytes(), p.key_pem.as_bytes()) {
//!         tracing::warn!(error = %e, "new serving certificate not loaded");
//!     }
//! }));
//! let context = llmscaler_webhooks::server::WebhookContext::new(policy);
//! llmscaler_webhooks::server::serve(listener, resolver, shutdown, context, drain).await?;
//! ```
//!
//! # Permissions
//! `get`, `create`, `update` on Secrets in the operator's namespace (the one named
//! [`CertConfig::secret_name`]); `get` and `patch` on the two webhook configurations
//! (cluster-scoped, `admissionregistration.k8s.io`).
//!
//! # Secret layout (`Opaque`)
//! [`CA_CERT`], [`CA_KEY`], [`TLS_CERT`], [`TLS_KEY`], [`CA_BUNDLE`] always; [`NEXT_CA_CERT`] and
//! [`NEXT_CA_KEY`] during a CA switch; [`PREVIOUS_CA_CERT`] after it. All PEM.

#![warn(missing_docs)]

pub mod pki;
pub mod store;

use std::time::Duration;

pub use pki::{CertState, ServingPems};
pub use store::{HeldSecret, ensure, inject_ca_bundle, maintain, sync_secret, sync_secret_from};

/// Field manager of the server-side apply that writes `caBundle` into the webhook
/// configurations.
pub(crate) const CA_BUNDLE_FIELD_MANAGER: &str = "llmscaler-cabundle";
/// Field manager of the Secret's create and update.
pub(crate) const SECRET_FIELD_MANAGER: &str = "llmscaler-certs";
/// Label put on the Secret.
pub(crate) const MANAGED_BY_LABEL: &str = "app.kubernetes.io/managed-by";
/// Value of [`MANAGED_BY_LABEL`].
pub(crate) const MANAGED_BY: &str = "llmscaler";
/// Secret key of the active CA certificate (PEM).
pub const CA_CERT: &str = "ca.crt";
/// Secret key of the active CA private key (PEM, PKCS#8).
pub(crate) const CA_KEY: &str = "ca.key";
/// Secret key of the CA being introduced (PEM), present during a CA switch.
pub(crate) const NEXT_CA_CERT: &str = "next-ca.crt";
/// Secret key of the private key of the CA being introduced.
pub(crate) const NEXT_CA_KEY: &str = "next-ca.key";
/// Secret key of the CA replaced by the last switch, kept in the bundle until it expires.
pub(crate) const PREVIOUS_CA_CERT: &str = "previous-ca.crt";
/// Secret key of the serving certificate (PEM, leaf only).
pub(crate) const TLS_CERT: &str = "tls.crt";
/// Secret key of the serving certificate's private key (PEM, PKCS#8).
pub const TLS_KEY: &str = "tls.key";
/// Secret key of the bundle the API server must trust: previous, active and next CA (PEM).
pub const CA_BUNDLE: &str = "ca-bundle.crt";

/// Default lifetime of a CA: 365 days.
pub(crate) const DEFAULT_CA_VALIDITY: Duration = Duration::from_secs(365 * 24 * 3600);
/// Default lifetime of a serving certificate: 30 days.
pub(crate) const DEFAULT_SERVING_VALIDITY: Duration = Duration::from_secs(30 * 24 * 3600);
/// Default time between two checks of the Secret and the webhook configurations: 10 s, so a
/// deleted Secret is recreated and re-injected well within 30 s.
pub(crate) const DEFAULT_CHECK_INTERVAL: Duration = Duration::from_secs(10);

/// Where the certificates live and what they are for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CertConfig {
    /// The operator's namespace: where the Secret is, and the Service's namespace.
    pub namespace: String,
    /// Name of the Secret holding the CA and the serving certificate.
    pub secret_name: String,
    /// Name of the webhook Service; the serving certificate is valid for `<svc>`,
    /// `<svc>.<ns>`, `<svc>.<ns>.svc` and `<svc>.<ns>.svc.cluster.local`.
    pub service_name: String,
    /// More names for the serving certificate: DNS names, or IP addresses (`127.0.0.1` when
    /// the API server reaches the webhook by `clientConfig.url`).
    pub extra_sans: Vec<String>,
    /// The ValidatingWebhookConfiguration whose webhooks get the `caBundle`; `None` to skip.
    pub validating_webhook_configuration: Option<String>,
    /// The MutatingWebhookConfiguration whose webhooks get the `caBundle`; `None` to skip.
    pub mutating_webhook_configuration: Option<String>,
    /// Lifetime of a CA.
    pub ca_validity: Duration,
    /// Lifetime of a serving certificate (cut to its CA's).
    pub serving_validity: Duration,
    /// Time between two checks in [`maintain`].
    pub check_interval: Duration,
}

impl CertConfig {
    /// A configuration with the default lifetimes and interval, no extra names and no webhook
    /// configurations.
    pub fn new(
        namespace: impl Into<String>,
        secret_name: impl Into<String>,
        service_name: impl Into<String>,
    ) -> Self {
        Self {
            namespace: namespace.into(),
            secret_name: secret_name.into(),
            service_name: service_name.into(),
            extra_sans: Vec::new(),
            validating_webhook_configuration: None,
            mutating_webhook_configuration: None,
            ca_validity: DEFAULT_CA_VALIDITY,
            serving_validity: DEFAULT_SERVING_VALIDITY,
            check_interval: DEFAULT_CHECK_INTERVAL,
        }
    }

    /// Every name the serving certificate must hold: the four Service DNS names, then
    /// [`CertConfig::extra_sans`], without duplicates, in that order.
    pub fn subject_alt_names(&self) -> Vec<String> {
        let (svc, ns) = (&self.service_name, &self.namespace);
        let mut names = vec![
            svc.clone(),
            format!("{svc}.{ns}"),
            format!("{svc}.{ns}.svc"),
            format!("{svc}.{ns}.svc.cluster.local"),
        ];
        for extra in &self.extra_sans {
            if !names.contains(extra) {
                names.push(extra.clone());
            }
        }
        names
    }
}

/// Everything that can go wrong in this crate.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// rcgen could not make a key or a certificate (an invalid DNS name in the SANs, for one).
    #[error("generating {what}: {source}")]
    Generate {
        /// What was being made.
        what: &'static str,
        /// rcgen's error.
        #[source]
        source: rcgen::Error,
    },
    /// A stored certificate or key could not be read.
    #[error("reading {what}: {reason}")]
    Parse {
        /// Which entry (e.g. the Secret key `ca.crt`).
        what: String,
        /// What was wrong.
        reason: String,
    },
    /// A Kubernetes API call failed.
    #[error("{action}: {source}")]
    Kube {
        /// What was being done, with the object's name.
        action: String,
        /// kube's error.
        #[source]
        source: kube::Error,
    },
    /// Other writers kept changing the Secret between our read and our write.
    #[error("Secret {namespace}/{name} changed under us {attempts} times in a row; will retry")]
    Contended {
        /// Namespace of the Secret.
        namespace: String,
        /// Name of the Secret.
        name: String,
        /// How many writes conflicted.
        attempts: u32,
    },
}
