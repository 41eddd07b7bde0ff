//! `llmscaler-webhooks`: the validating and mutating admission webhook for `LLMScaler`
//! (docs/admission.md, issue 5), and the HTTPS server that carries it.
//!
//! - [`admission`]: pure handlers, [`admission::validate`] and [`admission::mutate`], from an
//!   `AdmissionRequest` to an `AdmissionResponse`, over the shared rules of `llmscaler-api`
//!   ([`llmscaler_api::validation::parse_json_value`], [`llmscaler_api::validate_spec`],
//!   [`llmscaler_api::spec_warnings`], [`llmscaler_api::apply_defaults`]).
//! - [`access`]: the `SubjectAccessReview` that denies a scaler whose author may not scale its
//!   target (no confused deputy).
//! - [`review`]: one HTTP request body to one HTTP response (status code and JSON body): the
//!   `AdmissionReview` envelope checks (only `admission.k8s.io/v1`), size and content-type
//!   limits, and well-formed errors for garbage.
//! - [`server`]: the axum router (`POST /validate`, `POST /mutate`, `GET /healthz`), rustls
//!   (TLS 1.2 and 1.3) with a certificate that can be swapped while serving
//!   ([`server::CertResolver`]), and a poller that reloads it from files.
//! - [`listener`]: timeouts and connection/stream limits shared by the webhook and the
//!   operator's `/metrics` listener.
//! - [`drain`]: per-connection tracking: the request-head timeout, and the webhook's graceful
//!   drain on shutdown (`Connection: close`, `GOAWAY`, idle connections closed by their client).
//! - [`managed`]: the webhook as `llmscaler run` serves it, with certificates from
//!   `llmscaler-certs` kept in a Secret and swapped in as they rotate ([`managed::run`]).
//! - [`cli`]: `llmscaler webhook --listen ADDR --tls-cert-file F --tls-key-file F`, the server
//!   alone with no cluster.

pub mod access;
pub mod admission;
pub mod cli;
pub mod drain;
pub mod listener;
pub mod managed;
pub mod review;
pub mod server;

use std::path::PathBuf;

/// Everything that can go wrong in this crate outside the pure handlers (which never fail:
/// they answer with a denial instead).
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A certificate or key file could not be read.
    #[error("cannot read {path}: {source}")]
    ReadFile {
        /// The file that was being read.
        path: PathBuf,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
    /// The PEM text holds no certificate, or a certificate that cannot be decoded.
    #[error("no usable certificate in {what}: {reason}")]
    Certificate {
        /// Where the PEM came from (a path, or "PEM" when set directly).
        what: String,
        /// What was wrong.
        reason: String,
    },
    /// The PEM text holds no private key, or a key rustls cannot use, or a key that does not
    /// belong to the certificate.
    #[error("no usable private key in {what}: {reason}")]
    PrivateKey {
        /// Where the PEM came from (a path, or "PEM" when set directly).
        what: String,
        /// What was wrong.
        reason: String,
    },
    /// rustls refused the server configuration (no crypto provider installed, for one).
    #[error("TLS configuration: {0}")]
    Tls(#[source] rustls::Error),
    /// The certificates could not be read from or written to their Secret.
    #[error("webhook certificates: {0}")]
    Certs(#[source] llmscaler_certs::Error),
    /// The operator policy flags do not parse (`--allowed-server-addresses`, ...).
    #[error("operator policy: {0}")]
    Policy(String),
    /// Binding or serving the listen address failed.
    #[error("serving on {addr}: {source}")]
    Serve {
        /// The listen address.
        addr: String,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
}
