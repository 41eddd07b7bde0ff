//! Reading a Prometheus' history (docs/backtest.md#what-it-reads): `query_range` in chunks of
//! at most [`MAX_POINTS_PER_REQUEST`] points per series, and instant queries, through the
//! operator's own HTTP client ([`crate::metrics::Endpoint`]: the body cap of
//! [`crate::metrics::MAX_BODY_BYTES`], the per-request timeout, the egress policy, header values
//! never shown).

use std::collections::BTreeMap;
use std::io::Write;

use serde::Deserialize;

use super::BacktestError;
use crate::metrics::{Endpoint, MetricError, MetricsClient, Subject};

/// Most points per series one `query_range` request asks for (Prometheus refuses more than
/// 11,000; 720 keeps a reply of ~20 series under the 1 MiB body cap).
pub(crate) const MAX_POINTS_PER_REQUEST: i64 = 720;

/// Fewest points per request the reader halves down to when a reply is over the body cap
/// (many series, e.g. a histogram with many buckets or many pods).
const MIN_POINTS_PER_REQUEST: i64 = 10;

/// Most series one query may return over the whole range (`docs/backtest.md#limits`).
pub(crate) const MAX_SERIES: usize = 2_000;

/// One series of a reply: its labels and its points (`(seconds, value)`, in time order).
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Series {
    /// The label set (`__name__` included when Prometheus keeps it).
    pub(crate) labels: BTreeMap<String, String>,
    /// `(Unix seconds, value)`; values may be NaN or negative as sent.
    pub(crate) points: Vec<(i64, f64)>,
}

#[derive(Deserialize)]
struct Envelope {
    status: String,
    #[serde(default, rename = "errorType")]
    error_type: Option<String>,
    #[serde(default)]
    data: Option<Data>,
}

#[derive(Deserialize)]
struct Data {
    #[serde(rename = "resultType")]
    result_type: String,
    result: Vec<RawSeries>,
}

#[derive(Deserialize)]
struct RawSeries {
    #[serde(default)]
    metric: BTreeMap<String, String>,
    #[serde(default)]
    values: Vec<(f64, String)>,
    #[serde(default)]
    value: Option<(f64, String)>,
}

/// A Prometheus' query API, as `backtest` reads it.
pub(crate) struct Reader {
    client: MetricsClient,
    endpoint: Endpoint,
    /// Print a progress line on stderr.
    pub(crate) progress: bool,
}

impl Reader {
    /// A reader of `endpoint` over `client`.
    pub(crate) fn new(client: MetricsClient, endpoint: Endpoint, progress: bool) -> Self {
        Self {
            client,
            endpoint,
            progress,
        }
    }

    /// The server as shown in messages (no credentials, no headers).
    pub(crate) fn shown(&self) -> String {
        self.endpoint.shown_base()
    }

    async fn get(
        &self,
        path: &str,
        pairs: &[(&str, &str)],
        query: &str,
    ) -> Result<Vec<RawSeries>, MetricError> {
        let subject = Subject::Query(query.to_owned());
        let url = self.endpoint.url(path, pairs)?;
        let reply = self.endpoint.get(&self.client, url, &subject).await?;
        let envelope: Result<Envelope, _> = serde_json::from_slice(&reply.body);
        match envelope {
            Ok(e) if e.status == "success" && reply.status == 200 => match e.data {
                Some(d) if d.result_type == "matrix" || d.result_type == "vector" => Ok(d.result),
                Some(d) => Err(reply.decode_error(
                    &subject,
                    format!(
                        "result type `{}` is not a matrix or vector",
                        shown(&d.result_type)
                    ),
                )),
                None => Err(reply.decode_error(&subject, "no `data`".to_owned())),
            },
            Ok(e) if e.status == "error" => Err(MetricError::QueryFailed {
                subject,
                status: reply.status,
                error_type: error_type(e.error_type.as_deref()),
            }),
            _ if reply.status != 200 => Err(reply.status_error(&subject)),
            Ok(_) => Err(reply.decode_error(&subject, "`status` is not success".to_owned())),
            Err(err) => {
                let position = crate::metrics::json_position(&err);
                Err(reply.decode_error(&subject, position))
            }
        }
    }

    /// `query` as an instant vector at `time` (Unix seconds): each series' labels and value.
    pub(crate) async fn instant(
        &self,
        query: &str,
        time: i64,
    ) -> Result<Vec<Series>, BacktestError> {
        let t = time.to_string();
        let raw = self
            .get(
                crate::metrics::QUERY_PATH,
                &[("query", query), ("time", &t)],
                query,
            )
            .await?;
        if raw.len() > MAX_SERIES {
            return Err(BacktestError::TooManySeries {
                query: query.to_owned(),
                count: raw.len(),
            });
        }
        Ok(raw
            .into_iter()
            .map(|s| Series {
                labels: s.metric,
                points: s.value.into_iter().map(point).collect(),
            })
            .collect())
    }

    /// `query` over `[start, end]` (Unix seconds) at `step` seconds, in chunks of at most
    /// [`MAX_POINTS_PER_REQUEST`] points (halved while a reply is over the body cap), series
    /// merged by label set.
    ///
    /// # Errors
    /// The request's [`MetricError`] (naming the query and the server), or
    /// [`BacktestError::TooManySeries`].
    pub(crate) async fn range(
        &self,
        what: &str,
        query: &str,
        start: i64,
        end: i64,
        step: i64,
    ) -> Result<Vec<Series>, BacktestError> {
        let step_text = step.to_string();
        let mut merged: BTreeMap<BTreeMap<String, String>, Vec<(i64, f64)>> = BTreeMap::new();
        let mut points = MAX_POINTS_PER_REQUEST;
        let mut from = start;
        let total = ((end - start) / step + 1).max(1);
        while from <= end {
            let to = (from + (points - 1) * step).min(end);
            let (a, b) = (from.to_string(), to.to_string());
            let reply = self
                .get(
                    "/api/v1/query_range",
                    &[
                        ("query", query),
                        ("start", &a),
                        ("end", &b),
                        ("step", &step_text),
                    ],
                    query,
                )
                .await;
            let raw = match reply {
                Ok(raw) => raw,
                Err(MetricError::Decode { ref reason, .. })
                    if reason.starts_with("reply larger than")
                        && points > MIN_POINTS_PER_REQUEST =>
                {
                    points = (points / 2).max(MIN_POINTS_PER_REQUEST);
                    continue;
                }
                Err(err) => return Err(err.into()),
            };
            for s in raw {
                let entry = merged.entry(s.metric).or_default();
                entry.extend(s.values.into_iter().map(point));
            }
            if merged.len() > MAX_SERIES {
                return Err(BacktestError::TooManySeries {
                    query: query.to_owned(),
                    count: merged.len(),
                });
            }
            if self.progress {
                let done = ((to - start) / step + 1).min(total);
                let mut err = std::io::stderr().lock();
                let _ = write!(
                    err,
                    "\rreading {what}: {done}/{total} steps ({}%)   ",
                    done * 100 / total
                );
                if to >= end {
                    let _ = writeln!(err);
                }
            }
            from = to + step;
        }
        Ok(merged
            .into_iter()
            .map(|(labels, mut points)| {
                points.sort_by_key(|p| p.0);
                points.dedup_by_key(|p| p.0);
                Series { labels, points }
            })
            .collect())
    }
}

/// A sample as Prometheus sends it: seconds (rounded) and the value text (`NaN`, `+Inf` kept;
/// text that is no number becomes NaN).
fn point((t, v): (f64, String)) -> (i64, f64) {
    #[allow(clippy::cast_possible_truncation)]
    let t = t.round() as i64;
    (t, v.parse::<f64>().unwrap_or(f64::NAN))
}

fn error_type(text: Option<&str>) -> &'static str {
    match text {
        Some("bad_data") => "bad_data",
        Some("timeout") => "timeout",
        Some("canceled") => "canceled",
        Some("execution") => "execution",
        Some("internal") => "internal",
        Some("unavailable") => "unavailable",
        Some("not_found") => "not_found",
        Some("not_acceptable") => "not_acceptable",
        _ => "unknown",
    }
}

/// A server-sent word, cut and stripped of control characters before it is shown.
fn shown(text: &str) -> String {
    text.chars().filter(|c| !c.is_control()).take(32).collect()
}
