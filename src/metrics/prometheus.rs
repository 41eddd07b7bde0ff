//! Prometheus HTTP API client: instant queries (spec §3) and the per-pod deletion-cost query
//! (spec §5).

use std::collections::BTreeMap;

use serde::Deserialize;

use super::{Endpoint, MetricError, MetricsClient, Reply, Subject};

/// Path of the instant-query endpoint, relative to `serverAddress`.
pub const QUERY_PATH: &str = "/api/v1/query";

/// Excerpt length, in characters, of a non-JSON body quoted in an error message.
const BODY_EXCERPT_CHARS: usize = 200;

/// Reads PromQL instant queries from one Prometheus server (spec §3).
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
    /// its single value, following spec §3.
    ///
    /// A one-sample instant vector or a scalar gives its value.
    ///
    /// # Errors
    /// - [`MetricError::Timeout`] after the endpoint's timeout (seconds), [`MetricError::Transport`]
    ///   when the server cannot be reached;
    /// - [`MetricError::QueryFailed`] when Prometheus answers `status: "error"` (its own message,
    ///   e.g. a PromQL parse error, is kept); [`MetricError::HttpStatus`] for any other non-200;
    ///   [`MetricError::Decode`] for a body that is not Prometheus API JSON;
    /// - [`MetricError::NoData`] for an empty vector; [`MetricError::MultipleSeries`] for more
    ///   than one series (lists the first two label sets); [`MetricError::NotMeasurable`] for NaN
    ///   or ±Inf; [`MetricError::BadReply`] for a matrix or string result.
    pub async fn query(&self, query: &str) -> Result<f64, MetricError> {
        let subject = Subject::Query(query.to_owned());
        let reply = self.fetch(query, &subject).await?;
        decode_single(&subject, &reply)
    }

    /// Runs the `deletionCostQuery` (spec §5) and maps each sample's `pod` label to its value.
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

    async fn fetch(&self, query: &str, subject: &Subject) -> Result<Reply, MetricError> {
        let url = self.endpoint.url(QUERY_PATH, &[("query", query)])?;
        tracing::debug!(server = %self.endpoint.shown_base(), query, "prometheus instant query");
        self.endpoint.get(&self.client, url, subject).await
    }
}

/// The Prometheus API envelope (`/api/v1/query`).
#[derive(Debug, Deserialize)]
struct Envelope {
    status: String,
    #[serde(default)]
    data: Option<Data>,
    #[serde(default, rename = "errorType")]
    error_type: Option<String>,
    #[serde(default)]
    error: Option<String>,
}

#[derive(Debug, Deserialize)]
struct Data {
    #[serde(rename = "resultType")]
    result_type: String,
    result: serde_json::Value,
}

#[derive(Debug, Deserialize)]
struct VectorSample {
    #[serde(default)]
    metric: BTreeMap<String, String>,
    /// `[timestamp, "value"]`; absent for native-histogram samples.
    #[serde(default)]
    value: Option<(serde_json::Value, String)>,
}

/// The decoded `data.result`.
#[derive(Debug)]
enum QueryResult {
    Vector(Vec<VectorSample>),
    Scalar(String),
}

/// Checks status and envelope, returning the result.
fn decode_envelope(subject: &Subject, reply: &Reply) -> Result<QueryResult, MetricError> {
    let parsed: Result<Envelope, _> = serde_json::from_slice(&reply.body);
    if reply.status != 200 {
        return Err(match parsed {
            Ok(Envelope {
                status,
                error_type,
                error: Some(message),
                ..
            }) if status == "error" => MetricError::QueryFailed {
                subject: subject.clone(),
                status: reply.status,
                error_type: error_type.unwrap_or_else(|| "unknown".to_owned()),
                message,
            },
            _ => MetricError::HttpStatus {
                subject: subject.clone(),
                server: reply.server.clone(),
                status: reply.status,
                detail: reply.snippet(BODY_EXCERPT_CHARS),
            },
        });
    }
    let envelope = parsed.map_err(|e| MetricError::Decode {
        subject: subject.clone(),
        status: reply.status,
        reason: format!(
            "not Prometheus API JSON ({}; content-type `{}`; body starts `{}`)",
            e,
            reply.content_type,
            reply.snippet(80)
        ),
    })?;
    if envelope.status != "success" {
        return Err(MetricError::QueryFailed {
            subject: subject.clone(),
            status: reply.status,
            error_type: envelope.error_type.unwrap_or_else(|| "unknown".to_owned()),
            message: envelope
                .error
                .unwrap_or_else(|| format!("status `{}`", envelope.status)),
        });
    }
    let bad = |reason: String| MetricError::BadReply {
        subject: subject.clone(),
        reason,
    };
    let data = envelope
        .data
        .ok_or_else(|| bad("`data` is missing".to_owned()))?;
    match data.result_type.as_str() {
        "vector" => serde_json::from_value::<Vec<VectorSample>>(data.result)
            .map(QueryResult::Vector)
            .map_err(|e| bad(format!("malformed vector: {e}"))),
        "scalar" => serde_json::from_value::<(serde_json::Value, String)>(data.result)
            .map(|(_, v)| QueryResult::Scalar(v))
            .map_err(|e| bad(format!("malformed scalar: {e}"))),
        "matrix" => Err(bad(
            "the result is a range vector (matrix); use an instant query, e.g. \
             avg(avg_over_time(metric[1m])) instead of metric[1m]"
                .to_owned(),
        )),
        other => Err(bad(format!(
            "result type `{other}` is not supported (expected an instant vector or a scalar)"
        ))),
    }
}

/// Decodes an instant-query reply that must hold exactly one finite value.
fn decode_single(subject: &Subject, reply: &Reply) -> Result<f64, MetricError> {
    match decode_envelope(subject, reply)? {
        QueryResult::Scalar(raw) => parse_value(subject, &raw, None),
        QueryResult::Vector(samples) => match samples.as_slice() {
            [] => Err(MetricError::NoData {
                subject: subject.clone(),
            }),
            [only] => {
                let raw = sample_value(subject, only)?;
                parse_value(subject, raw, None)
            }
            [first, second, ..] => Err(MetricError::MultipleSeries {
                subject: subject.clone(),
                count: samples.len(),
                first: label_set(&first.metric),
                second: label_set(&second.metric),
            }),
        },
    }
}

/// Decodes a per-pod reply into `pod -> value`.
fn decode_per_pod(subject: &Subject, reply: &Reply) -> Result<BTreeMap<String, f64>, MetricError> {
    let bad = |reason: String| MetricError::BadReply {
        subject: subject.clone(),
        reason,
    };
    let samples = match decode_envelope(subject, reply)? {
        QueryResult::Vector(samples) => samples,
        QueryResult::Scalar(_) => {
            return Err(bad(
                "the result is a scalar; a deletion-cost query must return one series per pod, \
                 each with a `pod` label"
                    .to_owned(),
            ));
        }
    };
    if samples.is_empty() {
        return Err(MetricError::NoData {
            subject: subject.clone(),
        });
    }
    let mut costs = BTreeMap::new();
    for sample in &samples {
        let Some(pod) = sample.metric.get("pod") else {
            return Err(bad(format!(
                "series {} has no `pod` label; keep it, e.g. with `sum by (pod) (...)`",
                label_set(&sample.metric)
            )));
        };
        let raw = sample_value(subject, sample)?;
        let value = parse_value(subject, raw, Some(&sample.metric))?;
        if costs.insert(pod.clone(), value).is_some() {
            return Err(bad(format!(
                "pod `{pod}` appears in more than one series; aggregate by pod, e.g. \
                 `max by (pod) (...)`"
            )));
        }
    }
    Ok(costs)
}

fn sample_value<'a>(subject: &Subject, sample: &'a VectorSample) -> Result<&'a str, MetricError> {
    sample
        .value
        .as_ref()
        .map(|(_, v)| v.as_str())
        .ok_or_else(|| MetricError::BadReply {
            subject: subject.clone(),
            reason: format!(
                "series {} has no float value (a native histogram?); use histogram_quantile(...) \
                 or another function that returns a number",
                label_set(&sample.metric)
            ),
        })
}

/// Parses a Prometheus sample value (`"1.5"`, `"NaN"`, `"+Inf"`, `"-Inf"`); only finite values
/// pass.
fn parse_value(
    subject: &Subject,
    raw: &str,
    series: Option<&BTreeMap<String, String>>,
) -> Result<f64, MetricError> {
    let value: f64 = raw.trim().parse().map_err(|_| MetricError::BadReply {
        subject: subject.clone(),
        reason: format!("sample value `{raw}` is not a number"),
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
            value: shown.to_owned(),
            series: series.map(label_set),
        })
    }
}

/// Renders a label set the way PromQL writes a selector: `name{a="b", c="d"}`.
fn label_set(labels: &BTreeMap<String, String>) -> String {
    let name = labels.get("__name__").map(String::as_str).unwrap_or("");
    let inner: Vec<String> = labels
        .iter()
        .filter(|(k, _)| k.as_str() != "__name__")
        .map(|(k, v)| format!("{k}=\"{}\"", v.escape_default()))
        .collect();
    format!("{name}{{{}}}", inner.join(", "))
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
    fn two_series_name_both_label_sets_and_say_aggregate() {
        let body = r#"{"status":"success","data":{"resultType":"vector","result":[
            {"metric":{"__name__":"m","pod":"a"},"value":[1,"1"]},
            {"metric":{"__name__":"m","pod":"b"},"value":[1,"2"]},
            {"metric":{"__name__":"m","pod":"c"},"value":[1,"3"]}]}}"#;
        let err = single(200, body).expect_err("three series");
        assert_eq!(err.kind(), "multiple_series");
        assert_eq!(
            err.to_string(),
            "Prometheus query `avg(x)` returned 3 series, expected exactly one: m{pod=\"a\"} and \
             m{pod=\"b\"}; aggregate it, e.g. wrap it in avg(...) or sum(...)"
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
    fn prometheus_error_keeps_its_message_and_status() {
        let body = r#"{"status":"error","errorType":"bad_data","error":"1:5: parse error: unexpected end of input"}"#;
        let err = single(400, body).expect_err("syntax");
        assert_eq!(err.kind(), "query_error");
        assert_eq!(
            err.to_string(),
            "Prometheus rejected query `avg(x)` (HTTP 400, bad_data): 1:5: parse error: \
             unexpected end of input"
        );
    }

    #[test]
    fn non_200_without_envelope_names_status_and_body() {
        let err = single(401, "Unauthorized\n").expect_err("401");
        assert_eq!(err.kind(), "http_status");
        assert_eq!(
            err.to_string(),
            "Prometheus at http://h:1/path answered HTTP 401 for query `avg(x)`: Unauthorized"
        );
        let err = single(503, "").expect_err("503");
        assert_eq!(
            err.to_string(),
            "Prometheus at http://h:1/path answered HTTP 503 for query `avg(x)`"
        );
    }

    #[test]
    fn html_body_is_a_decode_error() {
        let mut r = reply(200, "<html><body>Login</body></html>");
        r.content_type = "text/html".to_owned();
        let err = decode_single(&subject(), &r).expect_err("html");
        assert_eq!(err.kind(), "decode");
        let text = err.to_string();
        assert!(
            text.starts_with("Prometheus reply for query `avg(x)` cannot be decoded (HTTP 200)")
        );
        assert!(text.contains("content-type `text/html`"), "{text}");
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
                "series {app=\"x\"} has no `pod` label",
            ),
            (
                r#"[{"metric":{"pod":"a"},"value":[1,"3"]},{"metric":{"pod":"a"},"value":[1,"4"]}]"#,
                "bad_reply",
                "pod `a` appears in more than one series",
            ),
            (
                r#"[{"metric":{"pod":"a"},"value":[1,"NaN"]}]"#,
                "not_measurable",
                "returned NaN for series {pod=\"a\"}",
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

    #[test]
    fn label_sets_render_like_promql() {
        let labels = BTreeMap::from([
            ("__name__".to_owned(), "vllm:x".to_owned()),
            ("pod".to_owned(), "p\"1".to_owned()),
            ("app".to_owned(), "a".to_owned()),
        ]);
        assert_eq!(label_set(&labels), "vllm:x{app=\"a\", pod=\"p\\\"1\"}");
        assert_eq!(label_set(&BTreeMap::new()), "{}");
    }
}
