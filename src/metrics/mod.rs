//! Metric sources: the Prometheus HTTP API (docs/providers.md#prometheus-provider) and the external
//! decision server (docs/providers.md#custom-provider-decision-server).
//!
//! Both sources share one [`MetricsClient`] (a single `reqwest` connection pool using rustls with
//! the process-wide aws-lc-rs crypto provider). Every request carries its own bounded timeout and
//! no lock is held around requests, so one slow or hanging server delays only the scaler that
//! points at it.
//!
//! Nothing here ever reads a metric that could not be measured as zero: an empty result, several
//! series, NaN, ±Inf, a non-200 reply or an undecodable body all come back as a [`MetricError`],
//! whose `Display` text is written for a Kubernetes condition message and an Event, and whose
//! [`MetricError::kind`] is a short label for Prometheus metrics of the operator itself.
//!
//! Header values (`serverHeaders`) carry tokens: they are marked sensitive on every request, never
//! logged, and redacted in every `Debug` output of this module.

mod decision;
pub mod egress;
mod error;
pub mod per_pod;
mod prometheus;
mod source;

use std::collections::BTreeMap;
use std::fmt;
use std::time::Duration;

use llmscaler_api::OperatorPolicy;
use reqwest::Url;
use reqwest::header::{HeaderMap, HeaderName, HeaderValue};

pub use decision::{
    DECISION_API_VERSION, DEFAULT_DECISION_PATH, DecisionSource, decode_decision_body,
};
pub use error::{MetricError, Subject, media_type};
pub(crate) use prometheus::QUERY_PATH;
pub use prometheus::{
    MAX_POD_SERIES, PrometheusSource, decode_instant_body, decode_per_pod_body,
    decode_pod_samples_body,
};
pub use source::{MetricSource, Readings, secret_headers};

/// Default per-request timeout for metric requests: 5 seconds
/// (docs/providers.md#prometheus-provider).
pub(crate) const DEFAULT_TIMEOUT: Duration = Duration::from_secs(5);

/// Largest reply body accepted from a metric server, in bytes (1 MiB; `docs/security.md#memory`).
/// A larger body is reported as [`MetricError::Decode`] rather than buffered: reading stops at
/// the first chunk past the limit.
pub const MAX_BODY_BYTES: usize = 1024 * 1024;

/// Most metric requests in flight in the whole process (`docs/security.md#memory`): with
/// [`MAX_BODY_BYTES`] this bounds the reply bodies held at once to 32 MiB. A request waits for
/// a free slot within its own timeout.
pub(crate) const MAX_IN_FLIGHT: usize = 32;

/// Installs rustls' aws-lc-rs crypto provider as the process default unless one is installed.
///
/// The binary installs it first thing in `main`; this makes library users and tests safe too.
/// Calling it several times, from several threads, is fine.
pub fn ensure_crypto_provider() {
    crate::process::install_crypto_provider();
}

/// The HTTP client shared by every metric source of the process.
///
/// Cloning is cheap (the connection pool is reference-counted); build one per process and hand
/// clones to each source. The client itself has no overall timeout: each request sets its own
/// (see [`Endpoint::timeout`]).
#[derive(Clone, Debug)]
pub struct MetricsClient {
    http: reqwest::Client,
    slots: std::sync::Arc<tokio::sync::Semaphore>,
    policy: std::sync::Arc<OperatorPolicy>,
}

impl MetricsClient {
    /// [`MetricsClient::with_policy`] under [`OperatorPolicy::default`] (no allow-list; cloud
    /// metadata, link-local and tenancy headers refused): for the commands that have no
    /// operator policy flags (`probe`, tests).
    ///
    /// # Errors
    /// As [`MetricsClient::with_policy`].
    pub fn new() -> Result<Self, MetricError> {
        Self::with_policy(OperatorPolicy::default())
    }

    /// Builds the shared client: rustls with the aws-lc-rs provider and the platform verifier,
    /// a 5-second connect timeout, `HTTP(S)_PROXY` / `NO_PROXY` from the environment honoured,
    /// redirects never followed, and every address a name resolves to checked against the
    /// egress part of `policy` ([`egress::PolicyResolver`], `docs/security.md#egress`); hosts
    /// and `serverHeaders` are checked against it before each request.
    ///
    /// Installs the crypto provider if none is installed yet ([`ensure_crypto_provider`]).
    ///
    /// # Errors
    /// [`MetricError::Client`] when the TLS configuration cannot be built (for example no usable
    /// root certificate store on the machine).
    pub fn with_policy(policy: OperatorPolicy) -> Result<Self, MetricError> {
        ensure_crypto_provider();
        let http = reqwest::Client::builder()
            .user_agent(concat!("llmscaler/", env!("CARGO_PKG_VERSION")))
            .connect_timeout(DEFAULT_TIMEOUT)
            .pool_idle_timeout(Duration::from_secs(90))
            .redirect(reqwest::redirect::Policy::none())
            .dns_resolver(egress::PolicyResolver::new(policy.egress.clone()))
            .build()
            .map_err(|source| MetricError::Client { source })?;
        Ok(Self {
            http,
            slots: std::sync::Arc::new(tokio::sync::Semaphore::new(MAX_IN_FLIGHT)),
            policy: std::sync::Arc::new(policy),
        })
    }

    /// The operator policy every request of this client is held to.
    pub fn policy(&self) -> &OperatorPolicy {
        &self.policy
    }

    /// The underlying `reqwest` client.
    pub fn http(&self) -> &reqwest::Client {
        &self.http
    }
}

/// Where a source sends its requests: base URL, extra headers and per-request timeout.
///
/// `Debug` prints the header names only; values are shown as `<redacted>`.
#[derive(Clone)]
pub struct Endpoint {
    base: Url,
    headers: HeaderMap,
    timeout: Duration,
}

impl Endpoint {
    /// Parses `server_address` (docs/resource.md#spec `serverAddress`, an `http` or `https` base
    /// URL) and
    /// `server_headers` (docs/resource.md#spec `serverHeaders`, used verbatim on every request),
    /// with the
    /// default timeout of 5 seconds.
    ///
    /// A trailing `/` on the address is ignored.
    ///
    /// # Errors
    /// [`MetricError::InvalidAddress`] when the address is not an absolute `http`/`https` URL or
    /// holds user info (`user:password@`);
    /// [`MetricError::InvalidHeader`] when a header name or value is not valid HTTP, or `policy`
    /// refuses the name (the message names the header, never its value).
    pub fn new(
        server_address: &str,
        server_headers: &BTreeMap<String, String>,
        policy: &OperatorPolicy,
    ) -> Result<Self, MetricError> {
        let base = parse_base(server_address)?;
        let mut headers = HeaderMap::with_capacity(server_headers.len());
        for (name, value) in server_headers {
            if let Some(reason) = policy.header_refusal(name) {
                return Err(MetricError::InvalidHeader {
                    name: name.clone(),
                    reason,
                });
            }
            let header_name = HeaderName::from_bytes(name.as_bytes()).map_err(|_| {
                MetricError::InvalidHeader {
                    name: name.clone(),
                    reason: "not a valid HTTP header name",
                }
            })?;
            let mut header_value =
                HeaderValue::from_str(value).map_err(|_| MetricError::InvalidHeader {
                    name: name.clone(),
                    reason: "value holds characters not allowed in an HTTP header",
                })?;
            header_value.set_sensitive(true);
            headers.insert(header_name, header_value);
        }
        Ok(Self {
            base,
            headers,
            timeout: DEFAULT_TIMEOUT,
        })
    }

    /// Sets the per-request timeout (whole request: connect, send, wait, read body).
    #[must_use]
    pub fn with_timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// The per-request timeout (default 5 seconds).
    pub fn timeout(&self) -> Duration {
        self.timeout
    }

    /// The base URL as shown in logs and messages: no credentials, no trailing `/`.
    pub(crate) fn shown_base(&self) -> String {
        shown_url(&self.base).trim_end_matches('/').to_owned()
    }

    /// The base URL, without a trailing `/` (may hold credentials: never log it).
    pub fn base(&self) -> &str {
        self.base.as_str().trim_end_matches('/')
    }

    /// Builds `{base}{path}` with exactly one `/` between the two, then appends `query` pairs
    /// (URL-encoded).
    pub(crate) fn url(&self, path: &str, query: &[(&str, &str)]) -> Result<Url, MetricError> {
        let joined = join_path(self.base(), path);
        let mut url = Url::parse(&joined).map_err(|e| MetricError::InvalidAddress {
            address: joined.clone(),
            reason: e.to_string(),
        })?;
        if !query.is_empty() {
            let mut pairs = url.query_pairs_mut();
            for (k, v) in query {
                pairs.append_pair(k, v);
            }
        }
        Ok(url)
    }

    /// GETs `url` and returns `(status, content type, body)`, enforcing the egress policy,
    /// the process-wide request slots ([`MAX_IN_FLIGHT`]), the timeout over the whole exchange
    /// (waiting for a slot included) and the body size limit ([`MAX_BODY_BYTES`]).
    pub(crate) async fn get(
        &self,
        client: &MetricsClient,
        url: Url,
        subject: &Subject,
    ) -> Result<Reply, MetricError> {
        let server = shown_url(&url);
        let server = server.as_str();
        if let Some(host) = url.host_str()
            && let Err(reason) = client.policy.egress.check_host(host)
        {
            return Err(MetricError::Egress {
                subject: subject.clone(),
                server: server.to_owned(),
                reason,
            });
        }
        let exchange = async {
            let Ok(_slot) = client.slots.acquire().await else {
                return Err(MetricError::Busy {
                    subject: subject.clone(),
                    seconds: self.timeout.as_secs_f64(),
                });
            };
            let mut response = client
                .http()
                .get(url)
                .headers(self.headers.clone())
                .timeout(self.timeout)
                .send()
                .await
                .map_err(|e| transport_error(e, subject, server, self.timeout))?;
            let status = response.status();
            let content_type = error::media_type(
                response
                    .headers()
                    .get(reqwest::header::CONTENT_TYPE)
                    .and_then(|v| v.to_str().ok())
                    .unwrap_or(""),
            );
            let mut body = Vec::new();
            while let Some(chunk) = response
                .chunk()
                .await
                .map_err(|e| transport_error(e, subject, server, self.timeout))?
            {
                if body.len() + chunk.len() > MAX_BODY_BYTES {
                    return Err(MetricError::Decode {
                        subject: subject.clone(),
                        status: status.as_u16(),
                        content_type,
                        length: body.len() + chunk.len(),
                        reason: format!(
                            "reply larger than {MAX_BODY_BYTES} bytes; reading stopped"
                        ),
                    });
                }
                body.extend_from_slice(&chunk);
            }
            Ok(Reply {
                server: server.to_owned(),
                status: status.as_u16(),
                content_type,
                body,
            })
        };
        // reqwest's own timeout covers the exchange; this outer bound is a belt-and-braces guard
        // so that nothing (DNS, a stalled body, waiting for a slot) can outlive the timeout.
        match tokio::time::timeout(self.timeout + Duration::from_millis(100), exchange).await {
            Ok(result) => result,
            Err(_) => Err(MetricError::Timeout {
                subject: subject.clone(),
                server: server.to_owned(),
                seconds: self.timeout.as_secs_f64(),
            }),
        }
    }
}

impl fmt::Debug for Endpoint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let headers: BTreeMap<&str, &str> = self
            .headers
            .keys()
            .map(|k| (k.as_str(), "<redacted>"))
            .collect();
        f.debug_struct("Endpoint")
            .field("base", &shown_url(&self.base))
            .field("headers", &headers)
            .field("timeout", &self.timeout)
            .finish()
    }
}

/// A raw HTTP reply, before the source-specific decoding.
pub(crate) struct Reply {
    /// The URL asked, without query string or credentials ([`shown_url`]).
    pub(crate) server: String,
    pub(crate) status: u16,
    pub(crate) content_type: String,
    pub(crate) body: Vec<u8>,
}

impl Reply {
    /// Logs a short excerpt of the body at debug level, for the operator's own diagnosis; the
    /// excerpt never goes to a condition or an Event (`docs/security.md#messages`).
    pub(crate) fn log_excerpt(&self, why: &str) {
        if tracing::enabled!(tracing::Level::DEBUG) {
            let text = String::from_utf8_lossy(&self.body[..self.body.len().min(512)]);
            let excerpt: String = text
                .chars()
                .map(|c| if c.is_control() { ' ' } else { c })
                .take(200)
                .collect();
            tracing::debug!(server = %self.server, status = self.status, why, excerpt, "metric reply body");
        }
    }

    /// The error for a reply whose body is not what the API promises: status, content type,
    /// length and a fixed `reason`; the body is logged at debug level only.
    pub(crate) fn decode_error(&self, subject: &Subject, reason: String) -> MetricError {
        self.log_excerpt(&reason);
        MetricError::Decode {
            subject: subject.clone(),
            status: self.status,
            content_type: self.content_type.clone(),
            length: self.body.len(),
            reason,
        }
    }

    /// The error for a non-200 reply: status, content type and length; the body is logged at
    /// debug level only.
    pub(crate) fn status_error(&self, subject: &Subject) -> MetricError {
        self.log_excerpt("non-200 reply");
        MetricError::HttpStatus {
            subject: subject.clone(),
            server: self.server.clone(),
            status: self.status,
            content_type: self.content_type.clone(),
            length: self.body.len(),
        }
    }
}

/// Where a JSON decoding error happened, without serde's own text (which quotes the input).
pub(crate) fn json_position(error: &serde_json::Error) -> String {
    let what = match error.classify() {
        serde_json::error::Category::Io => "read error",
        serde_json::error::Category::Syntax => "not JSON",
        serde_json::error::Category::Data => "unexpected JSON shape",
        serde_json::error::Category::Eof => "JSON cut short",
    };
    format!("{what} at line {} column {}", error.line(), error.column())
}

fn parse_base(server_address: &str) -> Result<Url, MetricError> {
    let trimmed = server_address.trim();
    let invalid = |reason: String| MetricError::InvalidAddress {
        address: server_address.to_owned(),
        reason,
    };
    let url = Url::parse(trimmed).map_err(|e| invalid(e.to_string()))?;
    match url.scheme() {
        "http" | "https" => {}
        other => return Err(invalid(format!("scheme `{other}` is not http or https"))),
    }
    if url.host_str().is_none_or(str::is_empty) {
        return Err(invalid("no host".to_owned()));
    }
    if !url.username().is_empty() || url.password().is_some() {
        // The credentials are never echoed: the address is shown without them.
        return Err(MetricError::InvalidAddress {
            address: shown_url(&url),
            reason: "user info (`user:password@`) is refused; send credentials in serverHeaders"
                .to_owned(),
        });
    }
    if url.query().is_some() || url.fragment().is_some() {
        return Err(invalid(
            "a base address takes no query string or fragment".to_owned(),
        ));
    }
    Ok(url)
}

/// Joins `base` (no trailing `/`) and `path` with exactly one `/`; repeated slashes inside
/// `path` are collapsed too.
fn join_path(base: &str, path: &str) -> String {
    let segments: Vec<&str> = path.split('/').filter(|s| !s.is_empty()).collect();
    let base = base.trim_end_matches('/');
    if segments.is_empty() {
        format!("{base}/")
    } else {
        format!("{base}/{}", segments.join("/"))
    }
}

fn transport_error(
    error: reqwest::Error,
    subject: &Subject,
    server: &str,
    timeout: Duration,
) -> MetricError {
    if error.is_timeout() {
        MetricError::Timeout {
            subject: subject.clone(),
            server: server.to_owned(),
            seconds: timeout.as_secs_f64(),
        }
    } else {
        tracing::debug!(server, error = %error_chain(&error), "metric request failed");
        MetricError::Transport {
            subject: subject.clone(),
            server: server.to_owned(),
            reason: transport_reason(&error),
        }
    }
}

/// A fixed description of a transport failure: its class and, when the failure comes from the
/// local system (refused, reset, DNS), the OS error kind. Text the peer chose (a certificate's
/// names, a malformed status line) never appears; the whole chain goes to the debug log.
fn transport_reason(error: &reqwest::Error) -> String {
    let mut io_kind = None;
    let mut egress = None;
    let mut source: Option<&dyn std::error::Error> = Some(error);
    while let Some(inner) = source {
        if let Some(io) = inner.downcast_ref::<std::io::Error>() {
            io_kind.get_or_insert(io.kind());
        }
        if let Some(refused) = inner.downcast_ref::<egress::Refused>() {
            egress.get_or_insert(refused.to_string());
        }
        if let Some(unresolved) = inner.downcast_ref::<egress::Unresolved>() {
            egress.get_or_insert(unresolved.to_string());
        }
        source = inner.source();
    }
    if let Some(refused) = egress {
        return refused;
    }
    let class = if error.is_connect() {
        "connection failed"
    } else if error.is_body() {
        "the reply body broke off"
    } else if error.is_request() {
        "the request failed"
    } else if error.is_decode() {
        "the reply could not be read"
    } else {
        "the exchange failed"
    };
    match io_kind {
        Some(kind) => format!("{class} ({kind})"),
        None => class.to_owned(),
    }
}

/// `url` as shown in messages: scheme, host, port and path; no credentials, query or fragment
/// (a query string is already named by the error's subject).
pub(crate) fn shown_url(url: &Url) -> String {
    let mut shown = url.clone();
    let _ = shown.set_username("");
    let _ = shown.set_password(None);
    shown.set_query(None);
    shown.set_fragment(None);
    shown.to_string()
}

/// Renders an error and its sources as `a: b: c`.
fn error_chain(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(inner) = source {
        let inner_text = inner.to_string();
        if !text.contains(&inner_text) {
            text.push_str(": ");
            text.push_str(&inner_text);
        }
        source = inner.source();
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn join_path_normalises_slashes() {
        assert_eq!(
            join_path("http://h:1", "/decisions"),
            "http://h:1/decisions"
        );
        assert_eq!(
            join_path("http://h:1/", "decisions"),
            "http://h:1/decisions"
        );
        assert_eq!(
            join_path("http://h:1/", "//decisions/"),
            "http://h:1/decisions"
        );
        assert_eq!(join_path("http://h:1/p/", "/a//b"), "http://h:1/p/a/b");
        assert_eq!(join_path("http://h:1", ""), "http://h:1/");
    }

    #[test]
    fn endpoint_builds_urls_with_encoded_query() {
        let ep = Endpoint::new(
            "http://127.0.0.1:9090/",
            &BTreeMap::new(),
            &OperatorPolicy::default(),
        )
        .expect("endpoint");
        let url = ep
            .url("/api/v1/query", &[("query", "avg(x{a=\"b c\"}) + 1")])
            .expect("url");
        assert_eq!(
            url.as_str(),
            "http://127.0.0.1:9090/api/v1/query?query=avg%28x%7Ba%3D%22b+c%22%7D%29+%2B+1"
        );
        let ep = Endpoint::new(
            "http://prom.example:9090/prefix/",
            &BTreeMap::new(),
            &OperatorPolicy::default(),
        )
        .expect("ep");
        assert_eq!(
            ep.url("api/v1/query", &[]).expect("url").as_str(),
            "http://prom.example:9090/prefix/api/v1/query"
        );
    }

    #[test]
    fn endpoint_refuses_bad_addresses() {
        for bad in [
            "",
            "prometheus:9090",
            "ftp://h/",
            "http://h:1/?x=1",
            "not a url",
        ] {
            let err =
                Endpoint::new(bad, &BTreeMap::new(), &OperatorPolicy::default()).expect_err(bad);
            assert_eq!(err.kind(), "invalid_config", "{bad}: {err}");
        }
    }

    #[test]
    fn debug_redacts_header_values() {
        let headers = BTreeMap::from([
            ("Authorization".to_owned(), "Bearer s3cr3t-token".to_owned()),
            ("X-Api-Key".to_owned(), "tenant-42".to_owned()),
        ]);
        let ep =
            Endpoint::new("http://h:1", &headers, &OperatorPolicy::default()).expect("endpoint");
        let debug = format!("{ep:?}");
        assert!(!debug.contains("s3cr3t"), "{debug}");
        assert!(!debug.contains("tenant-42"), "{debug}");
        assert!(debug.contains("authorization"), "{debug}");
        assert!(debug.contains("<redacted>"), "{debug}");
    }

    #[test]
    fn invalid_header_error_never_shows_the_value() {
        let headers = BTreeMap::from([("Authorization".to_owned(), "Bearer a\nb".to_owned())]);
        let err = Endpoint::new("http://h:1", &headers, &OperatorPolicy::default())
            .expect_err("newline in value");
        let text = err.to_string();
        assert!(text.contains("Authorization"), "{text}");
        assert!(!text.contains("Bearer"), "{text}");
        let headers = BTreeMap::from([("Bad Name".to_owned(), "v".to_owned())]);
        assert_eq!(
            Endpoint::new("http://h:1", &headers, &OperatorPolicy::default())
                .expect_err("space in name")
                .kind(),
            "invalid_config"
        );
    }

    #[test]
    fn shown_url_drops_credentials_and_query() {
        let url =
            Url::parse("https://user:pw@prom.example:9090/api/v1/query?query=up#x").expect("url");
        assert_eq!(shown_url(&url), "https://prom.example:9090/api/v1/query");
    }

    #[test]
    fn user_info_and_refused_headers_are_refused() {
        let err = Endpoint::new(
            "http://u:p@h:1",
            &BTreeMap::new(),
            &OperatorPolicy::default(),
        )
        .expect_err("userinfo");
        assert!(!err.to_string().contains("u:p"), "{err}");
        for name in [
            "Host",
            "Range",
            "X-Forwarded-For",
            "X-Scope-OrgID",
            "Metadata-Flavor",
        ] {
            let headers = BTreeMap::from([(name.to_owned(), "v".to_owned())]);
            let err =
                Endpoint::new("http://h:1", &headers, &OperatorPolicy::default()).expect_err(name);
            assert_eq!(err.kind(), "invalid_config", "{name}");
        }
    }
}
