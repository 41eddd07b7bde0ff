//! The HTTPS server: an axum router on rustls (TLS 1.2 and 1.3, ALPN `h2` and `http/1.1`)
//! whose certificate comes from a [`CertResolver`] that can be swapped at any time. A swap
//! affects only handshakes that start after it: open connections keep their session, so no
//! request fails.

use std::future::Future;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use arc_swap::ArcSwapOption;
use axum::Router;
use axum::body::Body;
use axum::extract::{DefaultBodyLimit, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use rustls::crypto::CryptoProvider;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;
use rustls::{ServerConfig, version};

use llmscaler_api::OperatorPolicy;

use crate::Error;
use crate::access::TargetAccess;
use crate::review::{self, Endpoint, MAX_BODY_BYTES, Reply};

/// Path of the validating endpoint.
pub const VALIDATE_PATH: &str = "/validate";
/// Path of the mutating endpoint.
pub const MUTATE_PATH: &str = "/mutate";
/// Path of the health endpoint (`200 ok` once serving).
pub(crate) const HEALTHZ_PATH: &str = "/healthz";
/// How long the drain after a shutdown request lasts at most, by default: 100 s, longer than
/// kube-apiserver keeps an idle webhook connection
/// ([`crate::listener::APISERVER_IDLE_CONN_TIMEOUT`], 90 s), so that every connection it had
/// open at the request is closed by the API server itself or after an answer with
/// `Connection: close` ([`crate::drain`]). The drain ends earlier once no connection is open.
pub const DEFAULT_DRAIN: Duration = Duration::from_secs(100);

// Every connection idle at the shutdown request is closed by the API server within the drain.
const _: () =
    assert!(DEFAULT_DRAIN.as_secs() > crate::listener::APISERVER_IDLE_CONN_TIMEOUT.as_secs());

/// The serving certificate, swappable while serving: a rustls [`ResolvesServerCert`] that
/// hands every new handshake the [`CertifiedKey`] set last. Cheap to read (an atomic load), so
/// it sits on the handshake path. Share it as `Arc<CertResolver>` between the server and
/// whoever renews the certificate (the file poller of [`watch_files`], or
/// `llmscaler_certs::maintain`'s callback).
#[derive(Debug, Default)]
pub struct CertResolver {
    current: ArcSwapOption<CertifiedKey>,
}

impl CertResolver {
    /// A resolver with no certificate yet: handshakes fail until [`CertResolver::set_pem`] or
    /// [`CertResolver::set`] is called.
    pub fn new() -> Arc<Self> {
        Arc::new(Self::default())
    }

    /// A resolver serving the certificate chain and key in these PEM texts.
    ///
    /// # Errors
    /// As [`certified_key_from_pem`].
    pub fn from_pem(cert_chain_pem: &[u8], key_pem: &[u8]) -> Result<Arc<Self>, Error> {
        let resolver = Self::new();
        resolver.set_pem(cert_chain_pem, key_pem)?;
        Ok(resolver)
    }

    /// Replaces the certificate with the chain (leaf first) and private key in these PEM texts.
    /// On error the certificate in use stays.
    ///
    /// # Errors
    /// As [`certified_key_from_pem`].
    pub fn set_pem(&self, cert_chain_pem: &[u8], key_pem: &[u8]) -> Result<(), Error> {
        let key = certified_key_from_pem(cert_chain_pem, key_pem, "PEM")?;
        self.set(Arc::new(key));
        Ok(())
    }

    /// Replaces the certificate; the next handshake uses it.
    pub fn set(&self, key: Arc<CertifiedKey>) {
        self.current.store(Some(key));
    }

    /// The certificate in use, if any.
    pub fn current(&self) -> Option<Arc<CertifiedKey>> {
        self.current.load_full()
    }
}

impl ResolvesServerCert for CertResolver {
    fn resolve(&self, _client_hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        self.current.load_full()
    }
}

/// Builds a rustls [`CertifiedKey`] from a PEM certificate chain (leaf first) and a PEM private
/// key (PKCS#8, PKCS#1 or SEC1), checking that the key belongs to the leaf. Uses the
/// process-default crypto provider, or aws-lc-rs when none is installed.
///
/// # Errors
/// [`Error::Certificate`] when the chain holds no certificate, [`Error::PrivateKey`] when there
/// is no key, rustls cannot load it, or it does not match the leaf; `what` names the source in
/// the message.
pub fn certified_key_from_pem(
    cert_chain_pem: &[u8],
    key_pem: &[u8],
    what: &str,
) -> Result<CertifiedKey, Error> {
    let chain = CertificateDer::pem_slice_iter(cert_chain_pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|err| Error::Certificate {
            what: what.to_string(),
            reason: err.to_string(),
        })?;
    if chain.is_empty() {
        return Err(Error::Certificate {
            what: what.to_string(),
            reason: "no CERTIFICATE block".to_string(),
        });
    }
    let key = PrivateKeyDer::from_pem_slice(key_pem).map_err(|err| Error::PrivateKey {
        what: what.to_string(),
        reason: err.to_string(),
    })?;
    let provider = provider();
    CertifiedKey::from_der(chain, key, &provider).map_err(|err| Error::PrivateKey {
        what: what.to_string(),
        reason: err.to_string(),
    })
}

fn provider() -> Arc<CryptoProvider> {
    CryptoProvider::get_default()
        .cloned()
        .unwrap_or_else(|| Arc::new(rustls::crypto::aws_lc_rs::default_provider()))
}

/// The rustls server configuration: TLS 1.3 and 1.2, no client authentication, ALPN `h2` and
/// `http/1.1`, certificates from `resolver`.
///
/// # Errors
/// [`Error::Tls`] when the crypto provider supports neither protocol version.
pub fn tls_config(resolver: Arc<CertResolver>) -> Result<ServerConfig, Error> {
    let mut config = ServerConfig::builder_with_provider(provider())
        .with_protocol_versions(&[&version::TLS13, &version::TLS12])
        .map_err(Error::Tls)?
        .with_no_client_auth()
        .with_cert_resolver(resolver);
    config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    Ok(config)
}

/// What the routes of one webhook server share besides the request.
#[derive(Clone)]
pub struct WebhookContext {
    /// The operator-wide policy specs are checked against (`docs/security.md`): the flags of
    /// `llmscaler run` or `llmscaler webhook`.
    pub policy: OperatorPolicy,
    /// The target-access check of [`crate::access`] on `POST /validate`: the operator's
    /// managed webhook sets it; the standalone `llmscaler webhook` has no cluster to ask.
    pub(crate) access: Option<TargetAccess>,
}

impl WebhookContext {
    /// A context checking against `policy`, without the target-access check.
    pub fn new(policy: OperatorPolicy) -> Self {
        Self {
            policy,
            access: None,
        }
    }
}

/// The routes: `POST /validate`, `POST /mutate`, `GET /healthz`, answering under `context`.
/// Bodies are read up to [`MAX_BODY_BYTES`] (413 beyond, after draining up to
/// [`MAX_DRAIN_BYTES`]); every error is a JSON `Status` (see [`crate::review`]).
pub fn router(context: WebhookContext) -> Router {
    Router::new()
        .route(VALIDATE_PATH, post(validate))
        .route(MUTATE_PATH, post(mutate))
        .route(HEALTHZ_PATH, get(|| async { "ok" }))
        .layer(DefaultBodyLimit::disable())
        .with_state(Arc::new(context))
}

async fn validate(
    State(context): State<Arc<WebhookContext>>,
    headers: HeaderMap,
    body: Body,
) -> Response {
    admit(Endpoint::Validate, &context, &headers, body).await
}

async fn mutate(
    State(context): State<Arc<WebhookContext>>,
    headers: HeaderMap,
    body: Body,
) -> Response {
    admit(Endpoint::Mutate, &context, &headers, body).await
}

async fn admit(
    endpoint: Endpoint,
    context: &WebhookContext,
    headers: &HeaderMap,
    body: Body,
) -> Response {
    let content_type = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok());
    let declared = headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    if declared.is_some_and(|len| len > MAX_DRAIN_BYTES as u64) {
        // Too large to be worth reading: answer and close the connection.
        let mut response = into_response(review::too_large());
        response
            .headers_mut()
            .insert(header::CONNECTION, HeaderValue::from_static("close"));
        return response;
    }
    let reply = match read_limited(body).await {
        BodyRead::Complete(bytes) => {
            let reply = review::handle(endpoint, &context.policy, content_type, &bytes);
            match (endpoint, &context.access) {
                (Endpoint::Validate, Some(access)) => access.check(&bytes, reply).await,
                (Endpoint::Validate | Endpoint::Mutate, _) => reply,
            }
        }
        BodyRead::TooLarge { drained: true } => review::too_large(),
        BodyRead::TooLarge { drained: false } | BodyRead::Broken => {
            let mut response = into_response(review::too_large());
            response
                .headers_mut()
                .insert(header::CONNECTION, HeaderValue::from_static("close"));
            return response;
        }
    };
    into_response(reply)
}

/// Largest body read to its end (and discarded) before answering 413, in bytes (16 MiB), so a
/// client that sends an oversized body still reads the answer and keeps its connection.
/// Beyond it the connection is closed.
pub(crate) const MAX_DRAIN_BYTES: usize = 16 * 1024 * 1024;

enum BodyRead {
    Complete(Vec<u8>),
    TooLarge { drained: bool },
    Broken,
}

/// Reads up to [`MAX_BODY_BYTES`]; past that, keeps reading without storing up to
/// [`MAX_DRAIN_BYTES`].
async fn read_limited(mut body: Body) -> BodyRead {
    use http_body_util::BodyExt;
    let mut bytes = Vec::new();
    let mut seen = 0usize;
    while let Some(frame) = body.frame().await {
        let Ok(frame) = frame else {
            return BodyRead::Broken;
        };
        let Ok(data) = frame.into_data() else {
            continue;
        };
        seen = seen.saturating_add(data.len());
        if seen > MAX_DRAIN_BYTES {
            return BodyRead::TooLarge { drained: false };
        }
        if seen <= MAX_BODY_BYTES {
            bytes.extend_from_slice(&data);
        }
    }
    if seen > MAX_BODY_BYTES {
        BodyRead::TooLarge { drained: true }
    } else {
        BodyRead::Complete(bytes)
    }
}

fn into_response(reply: Reply) -> Response {
    let status = StatusCode::from_u16(reply.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    (
        status,
        [(header::CONTENT_TYPE, HeaderValue::from_static(review::JSON))],
        reply.body,
    )
        .into_response()
}

/// Serves [`router`] with `context` over TLS on `listener` until `shutdown` completes, then
/// drains for at most `drain`: the listener keeps accepting (the pod may still be an endpoint
/// somewhere), in-flight requests finish, every later HTTP/1 answer carries
/// `Connection: close`, HTTP/2 connections get `GOAWAY`, idle connections stay open until their
/// client closes them; serving stops when no connection is open or `drain` has passed
/// ([`crate::drain`], `docs/security.md#keep-alive-and-shutdown`; [`DEFAULT_DRAIN`] is the
/// operator's default). The listener is hardened with [`crate::listener::WEBHOOK_LIMITS`]
/// (`docs/security.md#listeners`).
///
/// # Errors
/// [`Error::Tls`] for a bad TLS configuration, [`Error::Serve`] when the listener fails.
pub async fn serve(
    listener: std::net::TcpListener,
    resolver: Arc<CertResolver>,
    shutdown: impl Future<Output = ()> + Send + 'static,
    context: WebhookContext,
    drain: Duration,
) -> Result<(), Error> {
    let addr = listener
        .local_addr()
        .map(|a| a.to_string())
        .unwrap_or_else(|_| "?".to_string());
    let serve_error = |source| Error::Serve {
        addr: addr.clone(),
        source,
    };
    listener.set_nonblocking(true).map_err(serve_error)?;
    let config =
        axum_server::tls_rustls::RustlsConfig::from_config(Arc::new(tls_config(resolver)?));
    let handle: axum_server::Handle<SocketAddr> = axum_server::Handle::new();
    let connections = crate::drain::Drain::new();
    tokio::spawn(drain_after(
        shutdown,
        connections.clone(),
        handle.clone(),
        drain,
    ));
    let limits = crate::listener::WEBHOOK_LIMITS;
    let server = axum_server::from_tcp_rustls(listener, config)
        .map_err(serve_error)?
        .map(|acceptor| {
            crate::drain::Guard::new(
                acceptor.handshake_timeout(limits.handshake),
                connections,
                limits.header_read,
            )
        });
    crate::listener::configure(server, &limits)
        .handle(handle)
        .serve(crate::listener::ConnectionLimit::new(
            crate::listener::with_body_timeout(router(context), &limits),
            &limits,
        ))
        .await
        .map_err(serve_error)
}

/// After `shutdown`: starts the drain of `connections`, waits until they are closed or `limit`
/// passed, then stops the server of `handle` (closing what is left).
async fn drain_after(
    shutdown: impl Future<Output = ()>,
    connections: crate::drain::Drain,
    handle: axum_server::Handle<SocketAddr>,
    limit: Duration,
) {
    shutdown.await;
    let open = connections.start();
    tracing::info!(
        open,
        limit_seconds = limit.as_secs(),
        "draining the admission webhook: answers carry Connection: close, idle connections are closed by their clients"
    );
    let left = connections.closed(limit).await;
    if left > 0 {
        tracing::warn!(
            left,
            "admission webhook drain time over; closing the connections left"
        );
    } else {
        tracing::info!("admission webhook drained: no connection open");
    }
    handle.shutdown();
}

/// Reloads `resolver` from a certificate file and a key file whenever their contents change,
/// checking every `interval`, forever (abort the task to stop). `loaded` is the (certificate,
/// key) pair the resolver already serves, if any, so it is not loaded twice. A pair that does
/// not load (a file half-written, a key from another certificate) is logged once and retried
/// at the next check, while the certificate in use stays. Suits Secret volumes, whose files
/// are swapped atomically by the kubelet.
pub(crate) async fn watch_files(
    resolver: Arc<CertResolver>,
    cert_file: PathBuf,
    key_file: PathBuf,
    interval: Duration,
    loaded: Option<(Vec<u8>, Vec<u8>)>,
) {
    let mut loaded = loaded;
    let mut failed: Option<(Vec<u8>, Vec<u8>)> = None;
    let mut ticker = tokio::time::interval(interval);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        ticker.tick().await;
        let pair = match read_pair(&cert_file, &key_file).await {
            Ok(pair) => pair,
            Err(err) => {
                tracing::warn!(error = %err, "cannot read the TLS files; keeping the certificate in use");
                continue;
            }
        };
        if loaded.as_ref() == Some(&pair) || failed.as_ref() == Some(&pair) {
            continue;
        }
        match certified_key_from_pem(&pair.0, &pair.1, &cert_file.display().to_string()) {
            Ok(key) => {
                resolver.set(Arc::new(key));
                tracing::info!(cert = %cert_file.display(), "serving certificate (re)loaded");
                loaded = Some(pair);
                failed = None;
            }
            Err(err) => {
                tracing::warn!(error = %err, "TLS files do not load; keeping the certificate in use");
                failed = Some(pair);
            }
        }
    }
}

/// Reads a certificate file and a key file.
///
/// # Errors
/// [`Error::ReadFile`] naming the file that could not be read.
pub(crate) async fn read_pair(
    cert_file: &Path,
    key_file: &Path,
) -> Result<(Vec<u8>, Vec<u8>), Error> {
    let read = |path: &Path| {
        let path = path.to_path_buf();
        async move {
            tokio::fs::read(&path)
                .await
                .map_err(|source| Error::ReadFile { path, source })
        }
    };
    Ok((read(cert_file).await?, read(key_file).await?))
}
