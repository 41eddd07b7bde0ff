//! The one error type of the metric sources.

use std::fmt;

/// What a failed request was about: a PromQL query (spec §3) or a decision-server serviceId
/// (spec §4). Displayed as ``query `…` `` or ``serviceId `…` ``.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Subject {
    /// A PromQL query sent to Prometheus.
    Query(String),
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
            Subject::Query(_) => "Prometheus",
            Subject::Service { .. } => "decision server",
        }
    }
}

impl fmt::Display for Subject {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Subject::Query(q) => write!(f, "query `{q}`"),
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

    /// The server answered with an HTTP status other than 200.
    #[error(
        "{} at {server} answered HTTP {status} for {subject}{}",
        subject.source_name(),
        detail_suffix(detail)
    )]
    HttpStatus {
        /// What the request was about.
        subject: Subject,
        /// The URL asked, without query string or credentials.
        server: String,
        /// The HTTP status code.
        status: u16,
        /// Prometheus' own `error` text when the body carried one, else a short body excerpt.
        detail: String,
    },

    /// Prometheus answered `status: "error"` (for example a PromQL syntax error).
    #[error("Prometheus rejected {subject} (HTTP {status}, {error_type}): {message}")]
    QueryFailed {
        /// The query.
        subject: Subject,
        /// The HTTP status code of the reply.
        status: u16,
        /// Prometheus' `errorType` (e.g. `bad_data`, `timeout`, `execution`).
        error_type: String,
        /// Prometheus' `error` text.
        message: String,
    },

    /// The body is not the JSON the API promises.
    #[error(
        "{} reply for {subject} cannot be decoded (HTTP {status}): {reason}",
        subject.source_name()
    )]
    Decode {
        /// What the request was about.
        subject: Subject,
        /// The HTTP status code of the reply.
        status: u16,
        /// What was wrong with the body.
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

    /// Prometheus returned more than one series where exactly one is required.
    #[error(
        "Prometheus {subject} returned {count} series, expected exactly one: {first} and {second}; \
         aggregate it, e.g. wrap it in avg(...) or sum(...)"
    )]
    MultipleSeries {
        /// The query.
        subject: Subject,
        /// How many series came back.
        count: usize,
        /// The first series' label set, as `{a="b", …}`.
        first: String,
        /// The second series' label set.
        second: String,
    },

    /// The sample is NaN or ±Inf.
    #[error(
        "Prometheus {subject} returned {value}{}, which is not measurable",
        series_suffix(series)
    )]
    NotMeasurable {
        /// The query.
        subject: Subject,
        /// The raw value (`NaN`, `+Inf`, `-Inf`).
        value: String,
        /// The series' label set, when the value belongs to one series among several.
        series: Option<String>,
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
        "decision server returned no decision for {subject} (it answered for {others}); \
         the fleet is held"
    )]
    NoDecision {
        /// The serviceId asked for.
        subject: Subject,
        /// The serviceIds it did answer for, as a short list, or `nothing`.
        others: String,
    },

    /// Several decisions match the serviceId (and namespace).
    #[error(
        "decision server returned {count} decisions for {subject}, expected exactly one{}; \
         the fleet is held",
        hint
    )]
    AmbiguousDecision {
        /// The serviceId asked for.
        subject: Subject,
        /// How many decisions matched.
        count: usize,
        /// A hint, e.g. to set `customProvider.namespace`.
        hint: String,
    },

    /// `replicas.active` is missing, negative, fractional or over int32.
    #[error("decision server reply for {subject} has an unusable replicas.active: {reason}")]
    BadReplicas {
        /// The serviceId asked for.
        subject: Subject,
        /// What is wrong with the number.
        reason: String,
    },
}

fn detail_suffix(detail: &str) -> String {
    if detail.is_empty() {
        String::new()
    } else {
        format!(": {detail}")
    }
}

fn series_suffix(series: &Option<String>) -> String {
    match series {
        Some(s) => format!(" for series {s}"),
        None => String::new(),
    }
}

impl MetricError {
    /// A short, stable label for the error's kind, for metrics and logs: `client`,
    /// `invalid_config`, `timeout`, `transport`, `http_status`, `query_error`, `decode`,
    /// `no_data`, `multiple_series`, `not_measurable`, `bad_reply`, `no_decision`,
    /// `ambiguous_decision`, `bad_replicas`.
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
        }
    }

    /// Same as [`MetricError::kind`], under the name kube-rs' controller examples use.
    pub fn metric_label(&self) -> &'static str {
        self.kind()
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
        }
    }
}
