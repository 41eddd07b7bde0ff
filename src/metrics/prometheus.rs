//! Prometheus HTTP API client: instant queries (docs/providers.md#prometheus-provider) and the
//! per-pod deletion-cost query
//! (docs/scale-down.md).

use std::collections::{BTreeMap, BTreeSet};

use serde::Deserialize;
use serde::de::{DeserializeSeed, IgnoredAny, SeqAccess, Visitor};
use serde_json::value::RawValue;

use super::error::{MAX_LABEL_NAMES, shown_label_name};
use super::{Endpoint, MetricError, MetricsClient, Reply, Subject, json_position};

/// Path of the instant-query endpoint, relative to `serverAddress`.
pub(crate) const QUERY_PATH: &str = "/api/v1/query";

/// Reads PromQL instant queries from one Prometheus server (docs/providers.md#prometheus-provider).
///
/// Cheap to clone; clones share the [`MetricsClient`] connection pool. Requests run
/// concurrently; each is bounded by the endpoint's timeout (default 5 seconds).
#[derive(Clone, Debug)]
pub struct PrometheusSource {
    client: MetricsClient,
    endpoint: Endpoint,
}

impl PrometheusSource {
    /// A source querying `endpoint` (`serverAddress`, `serverHeaders`, timeout) over `client`.
    pub fn new(client: MetricsClient, endpoint: Endpoint) -> Self {
        Self { client, endpoint }
    }

    /// The endpoint this source queries.
    pub fn endpoint(&self) -> &Endpoint {
        &self.endpoint
    }

    /// Runs `query` as an instant query (`GET {serverAddress}/api/v1/query?query=…`) and returns
    /// its single value, following docs/providers.md#prometheus-provider.
    ///
    /// A one-sample instant vector or a scalar gives its value.
    ///
    /// # Errors
    /// - [`MetricError::Timeout`] after the endpoint's timeout (seconds),
    ///   [`MetricError::Transport`] when the server cannot be reached;
    /// - [`MetricError::QueryFailed`] when Prometheus answers `status: "error"` (its
    ///   `errorType` only; the text goes to the debug log); [`MetricError::HttpStatus`] for any
    ///   other non-200, a 3xx included; [`MetricError::Decode`] for a body that is not
    ///   Prometheus API JSON or is over [`super::MAX_BODY_BYTES`];
    /// - [`MetricError::NoData`] for an empty vector; [`MetricError::MultipleSeries`] for more
    ///   than one series (the count and the label names that differ);
    ///   [`MetricError::NotMeasurable`] for NaN or ±Inf; [`MetricError::BadReply`] for a matrix or string result.
    pub async fn query(&self, query: &str) -> Result<f64, MetricError> {
        let subject = Subject::Query(query.to_owned());
        let reply = self.fetch(query, &subject).await?;
        decode_single(&subject, &reply)
    }

    /// Runs the `deletionCostQuery` (docs/scale-down.md) and maps each sample's `pod` label to its
    /// value.
    ///
    /// # Errors
    /// The transport, HTTP and decoding errors of [`PrometheusSource::query`];
    /// [`MetricError::NoData`] for an empty vector; [`MetricError::BadReply`] for a scalar or
    /// matrix result, a sample without a `pod` label, or a pod appearing in two series;
    /// [`MetricError::NotMeasurable`] when a pod's value is NaN or ±Inf.
    pub async fn query_per_pod(&self, query: &str) -> Result<BTreeMap<String, f64>, MetricError> {
        let subject = Subject::Query(query.to_owned());
        let reply = self.fetch(query, &subject).await?;
        decode_per_pod(&subject, &reply)
    }

    /// Runs a per-pod query (a runtime signal's or a `perPod` one, docs/signals.md) and maps
    /// the `pod` label of each series to its value, keeping only the pods in `wanted` (the
    /// target's Ready pods): other pods' names are never kept or shown. NaN and ±Inf values are
    /// kept (a pod that served nothing in a `histogram_quantile` window reads NaN); an empty
    /// vector is an empty map (the coverage rule decides).
    ///
    /// # Errors
    /// The transport, HTTP and decoding errors of [`PrometheusSource::query`];
    /// [`MetricError::BadReply`] for a scalar or matrix result, a series without a `pod` label,
    /// a wanted pod in two series, a value that is not a number, or more than
    /// [`MAX_POD_SERIES`] series (decoding stops there).
    pub(crate) async fn query_pods(
        &self,
        subject: &Subject,
        query: &str,
        wanted: &BTreeSet<String>,
    ) -> Result<BTreeMap<String, f64>, MetricError> {
        let reply = self.fetch(query, subject).await?;
        decode_pod_samples(subject, &reply, wanted)
    }

    async fn fetch(&self, query: &str, subject: &Subject) -> Result<Reply, MetricError> {
        let url = self.endpoint.url(QUERY_PATH, &[("query", query)])?;
        tracing::debug!(server = %self.endpoint.shown_base(), query, "prometheus instant query");
        self.endpoint.get(&self.client, url, subject).await
    }
}

/// Decodes the body of a `/api/v1/query` reply (HTTP status 200 assumed) that must hold exactly
/// one finite value: the function `llmscaler probe`, the fuzz target and the memory test call.
/// Streams over the body: at most one sample and the label names that differ are kept,
/// whatever the number of series (`docs/security.md#memory`).
///
/// # Errors
/// As [`PrometheusSource::query`] for a 200 reply.
pub fn decode_instant_body(query: &str, body: &[u8]) -> Result<f64, MetricError> {
    let reply = Reply {
        server: String::new(),
        status: 200,
        content_type: "application/json".to_owned(),
        body: body.to_vec(),
    };
    decode_single(&Subject::Query(query.to_owned()), &reply)
}

/// Decodes the body of a per-pod (`deletionCostQuery`) reply into `pod -> value`, streaming.
///
/// # Errors
/// As [`PrometheusSource::query_per_pod`] for a 200 reply.
pub fn decode_per_pod_body(query: &str, body: &[u8]) -> Result<BTreeMap<String, f64>, MetricError> {
    let reply = Reply {
        server: String::new(),
        status: 200,
        content_type: "application/json".to_owned(),
        body: body.to_vec(),
    };
    decode_per_pod(&Subject::Query(query.to_owned()), &reply)
}

/// Most series a per-pod reply may hold, whatever the number of pods wanted
/// (`docs/security.md#memory`): decoding stops at the next one.
pub const MAX_POD_SERIES: usize = 4096;

/// Decodes the body of a per-pod reply into `pod -> value` for the pods in `wanted`,
/// streaming, as [`PrometheusSource::query_pods`] does.
///
/// # Errors
/// As [`PrometheusSource::query_pods`] for a 200 reply.
pub fn decode_pod_samples_body(
    subject: &Subject,
    body: &[u8],
    wanted: &BTreeSet<String>,
) -> Result<BTreeMap<String, f64>, MetricError> {
    let reply = Reply {
        server: String::new(),
        status: 200,
        content_type: "application/json".to_owned(),
        body: body.to_vec(),
    };
    decode_pod_samples(subject, &reply, wanted)
}

/// The Prometheus API envelope (`/api/v1/query`). `data.result` is kept as raw JSON (borrowed
/// from the body, nothing allocated) and decoded by a streaming visitor once `resultType` is
/// known, whatever the key order.
#[derive(Deserialize)]
struct Envelope<'a> {
    #[serde(default, borrow)]
    status: Option<&'a RawValue>,
    #[serde(default, borrow)]
    data: Option<Data<'a>>,
    #[serde(default, borrow, rename = "errorType")]
    error_type: Option<&'a RawValue>,
}

#[derive(Deserialize)]
struct Data<'a> {
    #[serde(default, borrow, rename = "resultType")]
    result_type: Option<&'a RawValue>,
    #[serde(default, borrow)]
    result: Option<&'a RawValue>,
}

/// A JSON string's value when `raw` is a plain string without escapes, else `None`.
fn plain_str(raw: Option<&RawValue>) -> Option<&str> {
    let text = raw?.get();
    let inner = text.strip_prefix('"')?.strip_suffix('"')?;
    (!inner.contains('\\')).then_some(inner)
}

/// Prometheus' documented `errorType` values; anything else shows as `unknown`.
fn known_error_type(raw: Option<&RawValue>) -> &'static str {
    const KNOWN: [&str; 8] = [
        "bad_data",
        "timeout",
        "canceled",
        "execution",
        "internal",
        "unavailable",
        "not_found",
        "not_acceptable",
    ];
    plain_str(raw)
        .and_then(|t| KNOWN.iter().find(|k| **k == t))
        .copied()
        .unwrap_or("unknown")
}

/// The result kinds a reply can carry.
enum ResultKind<'a> {
    Vector(&'a RawValue),
    Scalar(&'a RawValue),
}

/// Checks status and envelope, returning the raw result and its kind.
fn decode_envelope<'a>(subject: &Subject, reply: &'a Reply) -> Result<ResultKind<'a>, MetricError> {
    let parsed: Result<Envelope<'a>, _> = serde_json::from_slice(&reply.body);
    if reply.status != 200 {
        return Err(match parsed {
            Ok(envelope) if plain_str(envelope.status) == Some("error") => {
                reply.log_excerpt("Prometheus error reply");
                MetricError::QueryFailed {
                    subject: subject.clone(),
                    status: reply.status,
                    error_type: known_error_type(envelope.error_type),
                }
            }
            _ => reply.status_error(subject),
        });
    }
    let envelope = parsed.map_err(|e| {
        reply.decode_error(
            subject,
            format!("not Prometheus API JSON ({})", json_position(&e)),
        )
    })?;
    match plain_str(envelope.status) {
        Some("success") => {}
        Some("error") => {
            reply.log_excerpt("Prometheus error reply");
            return Err(MetricError::QueryFailed {
                subject: subject.clone(),
                status: reply.status,
                error_type: known_error_type(envelope.error_type),
            });
        }
        _ => {
            return Err(reply.decode_error(
                subject,
                "`status` is neither \"success\" nor \"error\"".to_owned(),
            ));
        }
    }
    let bad = |reason: String| MetricError::BadReply {
        subject: subject.clone(),
        reason,
    };
    let data = envelope
        .data
        .ok_or_else(|| bad("`data` is missing".to_owned()))?;
    let result = data
        .result
        .ok_or_else(|| bad("`data.result` is missing".to_owned()))?;
    match plain_str(data.result_type) {
        Some("vector") => Ok(ResultKind::Vector(result)),
        Some("scalar") => Ok(ResultKind::Scalar(result)),
        Some("matrix") => Err(bad(
            "the result is a range vector (matrix); use an instant query, e.g. \
             avg(avg_over_time(metric[1m])) instead of metric[1m]"
                .to_owned(),
        )),
        _ => Err(bad(
            "the result type is not supported (expected an instant vector or a scalar)".to_owned(),
        )),
    }
}

/// One vector sample as streamed: its labels and its value text (`None` for a native
/// histogram sample). Other members are skipped without being kept.
#[derive(Deserialize)]
struct VectorSample {
    #[serde(default)]
    metric: BTreeMap<String, String>,
    #[serde(default)]
    value: Option<(IgnoredAny, String)>,
}

/// What a streamed vector keeps of its samples.
trait SampleSink {
    /// Takes one sample; an `Err` stops the stream.
    fn take(&mut self, sample: VectorSample) -> Result<(), MetricError>;
}

/// Streams a JSON array of samples into a sink, one element at a time.
struct Stream<'s, S>(&'s mut S, &'s mut Option<MetricError>);

impl<'de, S: SampleSink> DeserializeSeed<'de> for Stream<'_, S> {
    type Value = ();
    fn deserialize<D: serde::Deserializer<'de>>(self, deserializer: D) -> Result<(), D::Error> {
        deserializer.deserialize_seq(self)
    }
}

impl<'de, S: SampleSink> Visitor<'de> for Stream<'_, S> {
    type Value = ();
    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("a list of samples")
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        while let Some(sample) = seq.next_element::<VectorSample>()? {
            if let Err(err) = self.0.take(sample) {
                *self.1 = Some(err);
                // Stop here: the rest of the array is never looked at.
                return Err(serde::de::Error::custom("stopped"));
            }
        }
        Ok(())
    }
}

fn stream<S: SampleSink>(
    subject: &Subject,
    raw: &RawValue,
    sink: &mut S,
) -> Result<(), MetricError> {
    let mut stopped = None;
    let mut deserializer = serde_json::Deserializer::from_str(raw.get());
    let result = Stream(sink, &mut stopped).deserialize(&mut deserializer);
    match (stopped, result) {
        (Some(err), _) => Err(err),
        (None, Ok(())) => Ok(()),
        (None, Err(e)) => Err(MetricError::BadReply {
            subject: subject.clone(),
            reason: format!("malformed vector ({})", json_position(&e)),
        }),
    }
}

/// Keeps the first sample, the count, and the label names whose values differ.
#[derive(Default)]
struct SingleSink {
    count: usize,
    first: Option<VectorSample>,
    differing: BTreeSet<String>,
}

impl SampleSink for SingleSink {
    fn take(&mut self, sample: VectorSample) -> Result<(), MetricError> {
        self.count += 1;
        let Some(first) = &self.first else {
            self.first = Some(sample);
            return Ok(());
        };
        if self.differing.len() < MAX_LABEL_NAMES {
            let names = first.metric.keys().chain(sample.metric.keys());
            for name in names {
                if first.metric.get(name) != sample.metric.get(name)
                    && let Some(shown) = shown_label_name(name)
                    && self.differing.len() < MAX_LABEL_NAMES
                {
                    self.differing.insert(shown.to_owned());
                }
            }
        }
        Ok(())
    }
}

/// Maps each sample's `pod` label to its value; refuses a sample without one, a duplicate pod
/// or a value that is not a finite number as soon as it is seen.
struct PerPodSink<'s> {
    subject: &'s Subject,
    costs: BTreeMap<String, f64>,
}

impl SampleSink for PerPodSink<'_> {
    fn take(&mut self, mut sample: VectorSample) -> Result<(), MetricError> {
        let bad = |reason: String| MetricError::BadReply {
            subject: self.subject.clone(),
            reason,
        };
        let Some(pod) = sample.metric.remove("pod") else {
            let mut names: Vec<&str> = sample
                .metric
                .keys()
                .filter_map(|n| shown_label_name(n))
                .take(MAX_LABEL_NAMES)
                .collect();
            names.sort_unstable();
            return Err(bad(format!(
                "a series has no `pod` label (its labels: {}); keep it, e.g. with `sum by (pod) (...)`",
                if names.is_empty() {
                    "none".to_owned()
                } else {
                    names.join(", ")
                }
            )));
        };
        let raw = sample_value(self.subject, &sample)?;
        let value = parse_value(self.subject, raw)?;
        if self.costs.insert(pod, value).is_some() {
            return Err(bad(
                "a pod appears in more than one series; aggregate by pod, e.g. \
                 `max by (pod) (...)`"
                    .to_owned(),
            ));
        }
        Ok(())
    }
}

/// Keeps the values of the wanted pods; refuses a series without `pod`, a wanted pod twice, a
/// value that is not a number, or a reply over [`MAX_POD_SERIES`] series.
struct PodSampleSink<'s> {
    subject: &'s Subject,
    wanted: &'s BTreeSet<String>,
    values: BTreeMap<String, f64>,
    count: usize,
}

impl SampleSink for PodSampleSink<'_> {
    fn take(&mut self, mut sample: VectorSample) -> Result<(), MetricError> {
        let bad = |reason: String| MetricError::BadReply {
            subject: self.subject.clone(),
            reason,
        };
        self.count += 1;
        if self.count > MAX_POD_SERIES {
            return Err(bad(format!(
                "more than {MAX_POD_SERIES} series; select the target's pods only, one series \
                 per pod"
            )));
        }
        let Some(pod) = sample.metric.remove("pod") else {
            return Err(bad(
                "a series has no `pod` label; a per-pod query must keep it, e.g. \
                 `sum by (pod) (...)`"
                    .to_owned(),
            ));
        };
        if !self.wanted.contains(&pod) {
            return Ok(());
        }
        let raw = sample_value(self.subject, &sample)?;
        let value: f64 = raw.trim().parse().map_err(|_| {
            bad(format!(
                "a sample value is not a number ({} bytes)",
                raw.len()
            ))
        })?;
        if self.values.insert(pod, value).is_some() {
            return Err(bad(
                "a pod appears in more than one series; aggregate by pod, e.g. \
                 `max by (pod) (...)`"
                    .to_owned(),
            ));
        }
        Ok(())
    }
}

/// Decodes a per-pod reply into `pod -> value` for the wanted pods (NaN kept).
fn decode_pod_samples(
    subject: &Subject,
    reply: &Reply,
    wanted: &BTreeSet<String>,
) -> Result<BTreeMap<String, f64>, MetricError> {
    let raw = match decode_envelope(subject, reply)? {
        ResultKind::Vector(raw) => raw,
        ResultKind::Scalar(_) => {
            return Err(MetricError::BadReply {
                subject: subject.clone(),
                reason: "the result is a scalar; a per-pod query must return one series per \
                         pod, each with a `pod` label"
                    .to_owned(),
            });
        }
    };
    let mut sink = PodSampleSink {
        subject,
        wanted,
        values: BTreeMap::new(),
        count: 0,
    };
    stream(subject, raw, &mut sink)?;
    Ok(sink.values)
}

/// Decodes an instant-query reply that must hold exactly one finite value.
fn decode_single(subject: &Subject, reply: &Reply) -> Result<f64, MetricError> {
    match decode_envelope(subject, reply)? {
        ResultKind::Scalar(raw) => {
            let (_, value): (IgnoredAny, String) =
                serde_json::from_str(raw.get()).map_err(|e| MetricError::BadReply {
                    subject: subject.clone(),
                    reason: format!("malformed scalar ({})", json_position(&e)),
                })?;
            parse_value(subject, &value)
        }
        ResultKind::Vector(raw) => {
            let mut sink = SingleSink::default();
            stream(subject, raw, &mut sink)?;
            match (sink.count, sink.first) {
                (0, _) | (_, None) => Err(MetricError::NoData {
                    subject: subject.clone(),
                }),
                (1, Some(only)) => {
                    let raw = sample_value(subject, &only)?;
                    parse_value(subject, raw)
                }
                (count, Some(_)) => Err(MetricError::MultipleSeries {
                    subject: subject.clone(),
                    count,
                    differing: sink.differing.into_iter().collect(),
                }),
            }
        }
    }
}

/// Decodes a per-pod reply into `pod -> value`.
fn decode_per_pod(subject: &Subject, reply: &Reply) -> Result<BTreeMap<String, f64>, MetricError> {
    let raw = match decode_envelope(subject, reply)? {
        ResultKind::Vector(raw) => raw,
        ResultKind::Scalar(_) => {
            return Err(MetricError::BadReply {
                subject: subject.clone(),
                reason: "the result is a scalar; a deletion-cost query must return one series \
                         per pod, each with a `pod` label"
                    .to_owned(),
            });
        }
    };
    let mut sink = PerPodSink {
        subject,
        costs: BTreeMap::new(),
    };
    stream(subject, raw, &mut sink)?;
    if sink.costs.is_empty() {
        return Err(MetricError::NoData {
            subject: subject.clone(),
        });
    }
    Ok(sink.costs)
}

fn sample_value<'a>(subject: &Subject, sample: &'a VectorSample) -> Result<&'a str, MetricError> {
    sample
        .value
        .as_ref()
        .map(|(_, v)| v.as_str())
        .ok_or_else(|| MetricError::BadReply {
            subject: subject.clone(),
            reason: "a series has no float value (a native histogram?); use \
                     histogram_quantile(...) or another function that returns a number"
                .to_owned(),
        })
}

/// Parses a Prometheus sample value (`"1.5"`, `"NaN"`, `"+Inf"`, `"-Inf"`); only finite values
/// pass. The text itself is never quoted back.
fn parse_value(subject: &Subject, raw: &str) -> Result<f64, MetricError> {
    let value: f64 = raw.trim().parse().map_err(|_| MetricError::BadReply {
        subject: subject.clone(),
        reason: format!("a sample value is not a number ({} bytes)", raw.len()),
    })?;
    if value.is_finite() {
        Ok(value)
    } else {
        let shown = if value.is_nan() {
            "NaN"
        } else if value > 0.0 {
            "+Inf"
        } else {
            "-Inf"
        };
        Err(MetricError::NotMeasurable {
            subject: subject.clone(),
            value: shown,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reply(status: u16, body: &str) -> Reply {
        Reply {
            server: "http://h:1/path".to_owned(),
            status,
            content_type: "application/json".to_owned(),
            body: body.as_bytes().to_vec(),
        }
    }

    fn subject() -> Subject {
        Subject::Query("avg(x)".to_owned())
    }

    fn single(status: u16, body: &str) -> Result<f64, MetricError> {
        decode_single(&subject(), &reply(status, body))
    }

    const ONE: &str = r#"{"status":"success","data":{"resultType":"vector","result":[
        {"metric":{},"value":[1700000000.1,"0.85"]}]}}"#;

    #[test]
    fn one_sample_vector_gives_its_value() {
        assert_eq!(single(200, ONE).expect("value"), 0.85);
    }

    #[test]
    fn scalar_is_accepted() {
        let body = r#"{"status":"success","data":{"resultType":"scalar","result":[1.5,"42"]}}"#;
        assert_eq!(single(200, body).expect("value"), 42.0);
    }

    #[test]
    fn empty_vector_is_no_data() {
        let body = r#"{"status":"success","data":{"resultType":"vector","result":[]}}"#;
        let err = single(200, body).expect_err("empty");
        assert_eq!(err.kind(), "no_data");
        assert_eq!(
            err.to_string(),
            "Prometheus query `avg(x)` returned no data (empty result); the metric is skipped, \
             not read as 0"
        );
    }

    #[test]
    fn several_series_give_the_count_and_the_differing_label_names_never_values() {
        let body = r#"{"status":"success","data":{"resultType":"vector","result":[
            {"metric":{"__name__":"m","pod":"secret-a","ns":"t"},"value":[1,"1"]},
            {"metric":{"__name__":"m","pod":"secret-b","ns":"t"},"value":[1,"2"]},
            {"metric":{"__name__":"m","pod":"secret-c","ns":"t","tenant":"x"},"value":[1,"3"]}]}}"#;
        let err = single(200, body).expect_err("three series");
        assert_eq!(err.kind(), "multiple_series");
        assert_eq!(
            err.to_string(),
            "Prometheus query `avg(x)` returned 3 series, expected exactly one; they differ in \
             `pod`, `tenant`: aggregate over it, e.g. sum without (pod, tenant) (...) or avg(...)"
        );
        // count_values turns values into label values: still never shown.
        let body = r#"{"status":"success","data":{"resultType":"vector","result":[
            {"metric":{"value":"hunter2"},"value":[1,"1"]},{"metric":{"value":"s3cr3t"},"value":[1,"1"]}]}}"#;
        let text = single(200, body).expect_err("two").to_string();
        assert!(
            !text.contains("hunter2") && !text.contains("s3cr3t"),
            "{text}"
        );
    }

    #[test]
    fn non_finite_values_are_not_measurable() {
        for raw in ["NaN", "+Inf", "-Inf"] {
            let body = format!(
                r#"{{"status":"success","data":{{"resultType":"vector","result":[
                {{"metric":{{}},"value":[1,"{raw}"]}}]}}}}"#
            );
            let err = single(200, &body).expect_err(raw);
            assert_eq!(err.kind(), "not_measurable", "{raw}");
            assert_eq!(
                err.to_string(),
                format!("Prometheus query `avg(x)` returned {raw}, which is not measurable")
            );
        }
        let body = r#"{"status":"success","data":{"resultType":"scalar","result":[1,"NaN"]}}"#;
        assert_eq!(single(200, body).expect_err("nan").kind(), "not_measurable");
    }

    #[test]
    fn matrix_is_refused() {
        let body = r#"{"status":"success","data":{"resultType":"matrix","result":[
            {"metric":{},"values":[[1,"1"],[2,"2"]]}]}}"#;
        let err = single(200, body).expect_err("matrix");
        assert_eq!(err.kind(), "bad_reply");
        assert!(err.to_string().contains("range vector (matrix)"), "{err}");
    }

    #[test]
    fn string_result_is_refused() {
        let body = r#"{"status":"success","data":{"resultType":"string","result":[1,"x"]}}"#;
        assert_eq!(single(200, body).expect_err("string").kind(), "bad_reply");
    }

    #[test]
    fn prometheus_error_gives_its_type_and_status_never_its_text() {
        let body = r#"{"status":"error","errorType":"bad_data","error":"found duplicate series for the match group {pod=\"secret\"}"}"#;
        let err = single(400, body).expect_err("syntax");
        assert_eq!(err.kind(), "query_error");
        assert_eq!(
            err.to_string(),
            "Prometheus rejected query `avg(x)` (HTTP 400, bad_data); its error text is in the \
             operator's debug log"
        );
        let body = r#"{"status":"error","errorType":"leaked-value","error":"x"}"#;
        let text = single(422, body).expect_err("odd type").to_string();
        assert!(text.contains("(HTTP 422, unknown)"), "{text}");
    }

    #[test]
    fn non_200_gives_status_type_and_length_never_the_body() {
        let err = single(401, "Unauthorized: token for tenant-secret\n").expect_err("401");
        assert_eq!(err.kind(), "http_status");
        assert_eq!(
            err.to_string(),
            "Prometheus at http://h:1/path answered HTTP 401 for query `avg(x)` (content-type \
             `application/json`, 38 bytes; body not shown)"
        );
        let err = single(302, "").expect_err("302");
        assert!(
            err.to_string().contains("redirects are not followed"),
            "{err}"
        );
    }

    #[test]
    fn html_body_is_a_decode_error_without_the_body() {
        let mut r = reply(200, "<html><body>internal-admin-panel</body></html>");
        r.content_type = "text/html".to_owned();
        let err = decode_single(&subject(), &r).expect_err("html");
        assert_eq!(err.kind(), "decode");
        let text = err.to_string();
        assert_eq!(
            text,
            "Prometheus reply for query `avg(x)` cannot be decoded (HTTP 200, content-type \
             `text/html`, 46 bytes; body not shown): not Prometheus API JSON (not JSON at line 1 \
             column 1)"
        );
    }

    #[test]
    fn wrong_types_never_quote_the_body() {
        for body in [
            r#"{"status":"success","data":{"resultType":"vector","result":[{"metric":{"a":["topsecret"]},"value":[1,"1"]}]}}"#,
            r#"{"status":"success","data":{"resultType":"vector","result":[{"metric":{},"value":[1,"topsecret"]}]}}"#,
            r#"{"status":"success","data":{"resultType":"scalar","result":"topsecret"}}"#,
            r#"{"status":"topsecret"}"#,
        ] {
            let text = single(200, body).expect_err(body).to_string();
            assert!(!text.contains("topsecret"), "{text}");
        }
    }

    #[test]
    fn success_without_data_is_bad_reply() {
        assert_eq!(
            single(200, r#"{"status":"success"}"#)
                .expect_err("no data")
                .kind(),
            "bad_reply"
        );
    }

    #[test]
    fn non_numeric_value_is_bad_reply() {
        let body = r#"{"status":"success","data":{"resultType":"vector","result":[
            {"metric":{},"value":[1,"abc"]}]}}"#;
        assert_eq!(single(200, body).expect_err("abc").kind(), "bad_reply");
    }

    #[test]
    fn pod_samples_keep_wanted_pods_only_nan_included_and_are_bounded() {
        let wanted: BTreeSet<String> = ["a".to_owned(), "b".to_owned()].into();
        let body = r#"{"status":"success","data":{"resultType":"vector","result":[
            {"metric":{"pod":"a"},"value":[1,"3"]},
            {"metric":{"pod":"other-tenant-pod"},"value":[1,"9"]},
            {"metric":{"pod":"b"},"value":[1,"NaN"]}]}}"#;
        let values = decode_pod_samples(&subject(), &reply(200, body), &wanted).expect("values");
        assert_eq!(values.len(), 2);
        assert_eq!(values["a"], 3.0);
        assert!(values["b"].is_nan());
        let empty = r#"{"status":"success","data":{"resultType":"vector","result":[]}}"#;
        assert!(
            decode_pod_samples(&subject(), &reply(200, empty), &wanted)
                .expect("empty")
                .is_empty()
        );
        for (result, text) in [
            (
                r#"[{"metric":{"app":"x"},"value":[1,"3"]}]"#,
                "has no `pod` label",
            ),
            (
                r#"[{"metric":{"pod":"a"},"value":[1,"3"]},{"metric":{"pod":"a"},"value":[1,"4"]}]"#,
                "more than one series",
            ),
        ] {
            let body = format!(
                r#"{{"status":"success","data":{{"resultType":"vector","result":{result}}}}}"#
            );
            let err =
                decode_pod_samples(&subject(), &reply(200, &body), &wanted).expect_err(result);
            assert_eq!(err.kind(), "bad_reply");
            assert!(err.to_string().contains(text), "{err}");
            assert!(!err.to_string().contains("other-tenant"), "{err}");
        }
        let many: Vec<String> = (0..=MAX_POD_SERIES)
            .map(|i| format!(r#"{{"metric":{{"pod":"p{i}"}},"value":[1,"1"]}}"#))
            .collect();
        let body = format!(
            r#"{{"status":"success","data":{{"resultType":"vector","result":[{}]}}}}"#,
            many.join(",")
        );
        let err = decode_pod_samples(&subject(), &reply(200, &body), &wanted).expect_err("cap");
        assert!(err.to_string().contains("more than 4096 series"), "{err}");
    }

    #[test]
    fn per_pod_maps_pods_to_values() {
        let body = r#"{"status":"success","data":{"resultType":"vector","result":[
            {"metric":{"pod":"a"},"value":[1,"3"]},
            {"metric":{"pod":"b"},"value":[1,"-1.5"]}]}}"#;
        let costs = decode_per_pod(&subject(), &reply(200, body)).expect("costs");
        assert_eq!(
            costs,
            BTreeMap::from([("a".to_owned(), 3.0), ("b".to_owned(), -1.5)])
        );
    }

    #[test]
    fn per_pod_refuses_missing_pod_label_duplicates_scalars_and_nan() {
        let cases = [
            (
                r#"[{"metric":{"app":"x"},"value":[1,"3"]}]"#,
                "bad_reply",
                "a series has no `pod` label (its labels: app)",
            ),
            (
                r#"[{"metric":{"pod":"a"},"value":[1,"3"]},{"metric":{"pod":"a"},"value":[1,"4"]}]"#,
                "bad_reply",
                "a pod appears in more than one series",
            ),
            (
                r#"[{"metric":{"pod":"a"},"value":[1,"NaN"]}]"#,
                "not_measurable",
                "returned NaN, which is not measurable",
            ),
            (r#"[]"#, "no_data", "returned no data"),
        ];
        for (result, kind, text) in cases {
            let body = format!(
                r#"{{"status":"success","data":{{"resultType":"vector","result":{result}}}}}"#
            );
            let err = decode_per_pod(&subject(), &reply(200, &body)).expect_err(result);
            assert_eq!(err.kind(), kind, "{result}");
            assert!(err.to_string().contains(text), "{err}");
        }
        let body = r#"{"status":"success","data":{"resultType":"scalar","result":[1,"1"]}}"#;
        assert_eq!(
            decode_per_pod(&subject(), &reply(200, body))
                .expect_err("scalar")
                .kind(),
            "bad_reply"
        );
    }
}
