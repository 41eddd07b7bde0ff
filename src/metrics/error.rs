//! The one error type of the metric sources.

use std::fmt;

/// What a failed request was about: a PromQL query (docs/providers.md#prometheus-provider) or a
/// decision-server serviceId (docs/providers.md#custom-provider-decision-server). Displayed as
/// ``query `…` `` or ``serviceId `…` ``.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Subject {
    /// A PromQL query sent to Prometheus.
    Query(String),
    /// A runtime signal read per pod (docs/signals.md), e.g. `vllm waiting`; the query built
    /// for it names the target's pods and goes to the debug log only.
    Signal(String),
    /// A decision-server request for this serviceId, optionally restricted to a namespace.
    Service {
        /// `customProvider.serviceId`.
        service_id: String,
        /// `customProvider.namespace`, when configured.
        namespace: Option<String>,
    },
}

impl Subject {
    fn source_name(&self) -> &'static str {
        match self {
            Subject::Query(_) | Subject::Signal(_) => "Prometheus",
            Subject::Service { .. } => "decision server",
        }
    }
}

impl fmt::Display for Subject {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Subject::Query(q) => write!(f, "query `{q}`"),
            Subject::Signal(s) => write!(f, "signal `{s}`"),
            Subject::Service {
                service_id,
                namespace: None,
            } => write!(f, "serviceId `{service_id}`"),
            Subject::Service {
                service_id,
                namespace: Some(ns),
            } => write!(f, "serviceId `{service_id}` in namespace `{ns}`"),
        }
    }
}

/// Why a metric could not be read. Every variant means "not measurable this time": the caller
/// skips the metric (Prometheus) or holds the fleet (decision server); nothing is read as zero.
///
/// `Display` names what happened and the query or serviceId it happened to, in one line fit for a
/// Kubernetes condition message or Event. Header values never appear in any message.
#[derive(Debug, thiserror::Error)]
pub enum MetricError {
    /// The shared HTTP client could not be built.
    #[error("cannot build the metrics HTTP client: {source}")]
    Client {
        /// reqwest's builder error.
        #[source]
        source: reqwest::Error,
    },

    /// `serverAddress` is not an absolute http(s) URL.
    #[error("serverAddress `{address}` is not a usable http(s) base URL: {reason}")]
    InvalidAddress {
        /// The address as configured.
        address: String,
        /// What is wrong with it.
        reason: String,
    },

    /// A `serverHeaders` entry is not valid HTTP. Only the header name is kept.
    #[error("serverHeaders entry `{name}` is invalid: {reason}")]
    InvalidHeader {
        /// The header name as configured.
        name: String,
        /// What is wrong (never the value).
        reason: &'static str,
    },

    /// No complete reply within the per-request timeout.
    #[error(
        "{} at {server} did not answer {subject} within {seconds}s (timeout)",
        subject.source_name()
    )]
    Timeout {
        /// What the request was about.
        subject: Subject,
        /// The URL asked, without query string or credentials.
        server: String,
        /// The timeout that expired, in seconds.
        seconds: f64,
    },

    /// The server could not be reached or the connection broke.
    #[error("cannot reach {} at {server} for {subject}: {reason}", subject.source_name())]
    Transport {
        /// What the request was about.
        subject: Subject,
        /// The URL asked, without query string or credentials.
        server: String,
        /// The connection error chain.
        reason: String,
    },

    /// The server answered with an HTTP status other than 200. Nothing of the body is kept
    /// (`docs/security.md#messages`): its content type and length only. A 3xx is reported
    /// here too: redirects are never followed.
    #[error(
        "{} at {server} answered HTTP {status} for {subject} ({}){}",
        subject.source_name(),
        Shape(content_type, *length),
        redirect_note(*status)
    )]
    HttpStatus {
        /// What the request was about.
        subject: Subject,
        /// The URL asked, without query string or credentials.
        server: String,
        /// The HTTP status code.
        status: u16,
        /// The reply's media type, reduced to `type/subtype` token characters ([`media_type`]).
        content_type: String,
        /// The body length read, in bytes.
        length: usize,
    },

    /// Prometheus answered `status: "error"` (for example a PromQL syntax error). Its error
    /// text goes to the operator's debug log only: a real Prometheus quotes label values in it.
    #[error(
        "Prometheus rejected {subject} (HTTP {status}, {error_type}); its error text is in the \
         operator's debug log"
    )]
    QueryFailed {
        /// The query.
        subject: Subject,
        /// The HTTP status code of the reply.
        status: u16,
        /// Prometheus' `errorType` when it is one of the documented ones (`bad_data`,
        /// `timeout`, `canceled`, `execution`, `internal`, `unavailable`, `not_found`,
        /// `not_acceptable`), else `unknown`.
        error_type: &'static str,
    },

    /// The body is not the JSON the API promises.
    #[error(
        "{} reply for {subject} cannot be decoded (HTTP {status}, {}): {reason}",
        subject.source_name(),
        Shape(content_type, *length)
    )]
    Decode {
        /// What the request was about.
        subject: Subject,
        /// The HTTP status code of the reply.
        status: u16,
        /// The reply's media type ([`media_type`]).
        content_type: String,
        /// The body length read, in bytes (for an oversized body: the bytes read before
        /// stopping).
        length: usize,
        /// What was wrong with the body: a fixed text, with a line and column at most.
        reason: String,
    },

    /// Prometheus returned an empty vector.
    #[error(
        "Prometheus {subject} returned no data (empty result); the metric is skipped, not read as 0"
    )]
    NoData {
        /// The query.
        subject: Subject,
    },

    /// Prometheus returned more than one series where exactly one is required. Only the count
    /// and the label *names* whose values differ are kept, never a value.
    #[error(
        "Prometheus {subject} returned {count} series, expected exactly one; {}",
        aggregate_hint(differing)
    )]
    MultipleSeries {
        /// The query.
        subject: Subject,
        /// How many series came back.
        count: usize,
        /// Label names whose values differ between the series, sorted, at most
        /// [`MAX_LABEL_NAMES`].
        differing: Vec<String>,
    },

    /// The sample is NaN or ±Inf.
    #[error("Prometheus {subject} returned {value}, which is not measurable")]
    NotMeasurable {
        /// The query.
        subject: Subject,
        /// `NaN`, `+Inf` or `-Inf`.
        value: &'static str,
    },

    /// The reply decoded but breaks the protocol: wrong result type (a matrix), a sample without
    /// a `pod` label for a per-pod query, a wrong decision `apiVersion`, a missing field, etc.
    #[error("{} reply for {subject} is unusable: {reason}", subject.source_name())]
    BadReply {
        /// What the request was about.
        subject: Subject,
        /// What is wrong.
        reason: String,
    },

    /// The decision server's reply holds no decision for the serviceId (and namespace).
    #[error(
        "decision server returned no decision for {subject} ({others} other decision(s) in the \
         reply); the fleet is held"
    )]
    NoDecision {
        /// The serviceId asked for.
        subject: Subject,
        /// How many decisions the reply held (for other serviceIds or namespaces).
        others: usize,
    },

    /// Several decisions match the serviceId (and namespace).
    #[error(
        "decision server returned {count} decisions for {subject}, expected exactly one{}; \
         the fleet is held",
        if *namespaced { "" } else { "; set customProvider.namespace to pick one" }
    )]
    AmbiguousDecision {
        /// The serviceId asked for.
        subject: Subject,
        /// How many decisions matched.
        count: usize,
        /// Whether `customProvider.namespace` was set (else the message suggests it).
        namespaced: bool,
    },

    /// `replicas.active` is missing, negative, fractional or over int32.
    #[error("decision server reply for {subject} has an unusable replicas.active: {reason}")]
    BadReplicas {
        /// The serviceId asked for.
        subject: Subject,
        /// What is wrong with the number (a fixed text, never the number).
        reason: &'static str,
    },

    /// The server is not allowed by the operator's egress policy
    /// (`--allowed-server-addresses`, `docs/security.md#egress`).
    #[error("{} at {server} refused by the operator's egress policy: {reason}", subject.source_name())]
    Egress {
        /// What the request was about.
        subject: Subject,
        /// The URL asked, without query string or credentials.
        server: String,
        /// Which rule refused it.
        reason: String,
    },

    /// A `serverHeadersFrom` Secret key could not be read (`docs/security.md#credentials`).
    /// Names the header, the Secret and the key; never the value.
    #[error(
        "serverHeadersFrom `{header}`: key `{key}` of Secret `{secret}` cannot be read: {reason}"
    )]
    SecretHeader {
        /// The header name.
        header: String,
        /// The Secret's name (in the scaler's namespace).
        secret: String,
        /// The key.
        key: String,
        /// Why: not found, forbidden, no such key, not a valid header value.
        reason: String,
    },

    /// Fewer than `coverage` of the target's Ready pods report a fresh sample of a per-pod
    /// metric (docs/signals.md#coverage). Names the first missing pods (the target's own).
    #[error(
        "{subject}: {reporting} of {ready} Ready pods report a fresh sample, below coverage \
         {coverage}; missing: {}; the metric is skipped, not read as 0",
        missing_list(missing, *more)
    )]
    LowCoverage {
        /// The query or signal.
        subject: Subject,
        /// Ready pods with a fresh sample.
        reporting: usize,
        /// Ready pods of the target.
        ready: usize,
        /// The required share, 0..1.
        coverage: f64,
        /// The first missing pods, sorted, at most [`MAX_MISSING_PODS`].
        missing: Vec<String>,
        /// How many more pods are missing besides those named.
        more: usize,
    },

    /// The target has no Ready pod, so a per-pod metric has nothing to average.
    #[error("{subject}: the target has no Ready pod; the metric is skipped, not read as 0")]
    NoReadyPods {
        /// The query or signal.
        subject: Subject,
    },

    /// The target's pods cannot be selected: its kind has no `spec.selector.matchLabels`
    /// (docs/signals.md#the-query), or the pod cache is not available.
    #[error("{subject}: {reason}")]
    NoPodSelector {
        /// The query or signal.
        subject: Subject,
        /// Why.
        reason: String,
    },

    /// Too many metric requests in flight in the whole process (`docs/security.md#memory`):
    /// the request waited for a slot until its timeout.
    #[error("{} request for {subject} found no free request slot within {seconds}s", subject.source_name())]
    Busy {
        /// What the request was about.
        subject: Subject,
        /// The timeout that expired, in seconds.
        seconds: f64,
    },
}

/// Most pod names listed in a [`MetricError::LowCoverage`] message.
pub(crate) const MAX_MISSING_PODS: usize = 5;

fn missing_list(missing: &[String], more: usize) -> String {
    let names = missing.join(", ");
    match (names.is_empty(), more) {
        (true, _) => "none named".to_owned(),
        (false, 0) => names,
        (false, more) => format!("{names} and {more} more"),
    }
}

/// Most label names listed in a [`MetricError::MultipleSeries`] message.
pub(crate) const MAX_LABEL_NAMES: usize = 8;

/// Content type and length of a reply, as shown in messages.
struct Shape<'a>(&'a str, usize);

impl fmt::Display for Shape<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let kind = if self.0.is_empty() { "none" } else { self.0 };
        write!(f, "content-type `{kind}`, {} bytes; body not shown", self.1)
    }
}

fn redirect_note(status: u16) -> &'static str {
    if (300..400).contains(&status) {
        "; redirects are not followed: point serverAddress at the final address"
    } else {
        ""
    }
}

fn aggregate_hint(differing: &[String]) -> String {
    if differing.is_empty() {
        "aggregate it, e.g. wrap it in avg(...) or sum(...)".to_owned()
    } else {
        let names = differing
            .iter()
            .map(|n| format!("`{n}`"))
            .collect::<Vec<_>>()
            .join(", ");
        format!(
            "they differ in {names}: aggregate over it, e.g. sum without ({}) (...) or avg(...)",
            differing.join(", ")
        )
    }
}

/// The media type of a `Content-Type` header as shown in messages: the part before `;`,
/// lower-cased, only RFC 9110 token characters and `/`, at most 64 bytes; empty when nothing
/// is left. The server chooses this text, so nothing else of it is kept.
pub fn media_type(raw: &str) -> String {
    raw.split(';')
        .next()
        .unwrap_or("")
        .trim()
        .chars()
        .filter(|c| c.is_ascii_alphanumeric() || "!#$%&'*+-.^_`|~/".contains(*c))
        .take(64)
        .collect::<String>()
        .to_ascii_lowercase()
}

/// A Prometheus label name as shown in messages: only when it is a valid label name
/// (`[a-zA-Z_][a-zA-Z0-9_]*`) of at most 64 bytes.
pub(crate) fn shown_label_name(name: &str) -> Option<&str> {
    let mut chars = name.chars();
    let first_ok = chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_');
    (first_ok && name.len() <= 64 && chars.all(|c| c.is_ascii_alphanumeric() || c == '_'))
        .then_some(name)
}

impl MetricError {
    /// A short, stable label for the error's kind, for metrics and logs: `client`,
    /// `invalid_config`, `timeout`, `transport`, `http_status`, `query_error`, `decode`,
    /// `no_data`, `multiple_series`, `not_measurable`, `bad_reply`, `no_decision`,
    /// `ambiguous_decision`, `bad_replicas`, `egress_refused`, `secret_header`, `busy`,
    /// `low_coverage`, `no_ready_pods`, `no_pod_selector`.
    pub fn kind(&self) -> &'static str {
        match self {
            MetricError::Client { .. } => "client",
            MetricError::InvalidAddress { .. } | MetricError::InvalidHeader { .. } => {
                "invalid_config"
            }
            MetricError::Timeout { .. } => "timeout",
            MetricError::Transport { .. } => "transport",
            MetricError::HttpStatus { .. } => "http_status",
            MetricError::QueryFailed { .. } => "query_error",
            MetricError::Decode { .. } => "decode",
            MetricError::NoData { .. } => "no_data",
            MetricError::MultipleSeries { .. } => "multiple_series",
            MetricError::NotMeasurable { .. } => "not_measurable",
            MetricError::BadReply { .. } => "bad_reply",
            MetricError::NoDecision { .. } => "no_decision",
            MetricError::AmbiguousDecision { .. } => "ambiguous_decision",
            MetricError::BadReplicas { .. } => "bad_replicas",
            MetricError::Egress { .. } => "egress_refused",
            MetricError::SecretHeader { .. } => "secret_header",
            MetricError::Busy { .. } => "busy",
            MetricError::LowCoverage { .. } => "low_coverage",
            MetricError::NoReadyPods { .. } => "no_ready_pods",
            MetricError::NoPodSelector { .. } => "no_pod_selector",
        }
    }

    /// A CamelCase reason for a Kubernetes condition or Event, e.g. `MetricNoData`.
    pub fn reason(&self) -> &'static str {
        match self {
            MetricError::Client { .. } => "MetricClientError",
            MetricError::InvalidAddress { .. } | MetricError::InvalidHeader { .. } => {
                "MetricSourceInvalid"
            }
            MetricError::Timeout { .. } => "MetricTimeout",
            MetricError::Transport { .. } => "MetricUnreachable",
            MetricError::HttpStatus { .. } => "MetricHTTPError",
            MetricError::QueryFailed { .. } => "MetricQueryError",
            MetricError::Decode { .. } => "MetricDecodeError",
            MetricError::NoData { .. } => "MetricNoData",
            MetricError::MultipleSeries { .. } => "MetricMultipleSeries",
            MetricError::NotMeasurable { .. } => "MetricNotMeasurable",
            MetricError::BadReply { .. } => "MetricBadReply",
            MetricError::NoDecision { .. } => "NoDecision",
            MetricError::AmbiguousDecision { .. } => "AmbiguousDecision",
            MetricError::BadReplicas { .. } => "BadDecisionReplicas",
            MetricError::Egress { .. } => "MetricEgressRefused",
            MetricError::SecretHeader { .. } => "MetricSecretUnreadable",
            MetricError::Busy { .. } => "MetricBusy",
            MetricError::LowCoverage { .. } => "MetricLowCoverage",
            MetricError::NoReadyPods { .. } => "MetricNoReadyPods",
            MetricError::NoPodSelector { .. } => "MetricNoPodSelector",
        }
    }
}
