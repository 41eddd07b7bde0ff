//! Per-pod metrics (docs/signals.md): the target's Ready pods, the query of a runtime signal
//! or a `perPod` query over them, and the aggregation with the coverage rule. The aggregation
//! is pure and shared with `simulate --requests`.

use std::collections::{BTreeMap, BTreeSet};

use llmscaler_api::MetricSpec;
use llmscaler_api::signals::{self, parse_coverage};

use super::error::MAX_MISSING_PODS;
use super::{MetricError, PrometheusSource, Subject};

/// Longest per-pod query sent, in bytes: the runtime signal's query names every Ready pod.
pub(crate) const MAX_POD_QUERY_BYTES: usize = 256 * 1024;

/// The target's pods as the per-pod metrics of one sync see them.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PodSet {
    /// The target's namespace.
    pub namespace: String,
    /// Names of its current Ready pods (Ready condition True, not being deleted).
    pub ready: BTreeSet<String>,
}

/// The subject and query of a per-pod metric over `pods` (docs/signals.md#the-query): a runtime
/// signal's built query, or the `perPod` query as written.
///
/// # Errors
/// A message when the runtime does not publish the signal (admission refuses it first) or the
/// spec is not a per-pod metric.
pub(crate) fn subject_and_query(
    metric: &MetricSpec,
    pods: &PodSet,
) -> Result<(Subject, String), String> {
    match (metric.runtime, metric.signal) {
        (Some(runtime), Some(signal)) => {
            let published = signals::published(runtime, signal).map_err(str::to_owned)?;
            let names: Vec<&str> = pods.ready.iter().map(String::as_str).collect();
            let query = signals::pod_query(
                published,
                &pods.namespace,
                &names,
                metric.effective_scrape_interval_seconds(),
            );
            let subject = Subject::Signal(format!(
                "{} {}",
                signals::runtime_name(runtime),
                signals::signal_name(signal)
            ));
            Ok((subject, query))
        }
        _ if metric.per_pod == Some(true) && !metric.query.trim().is_empty() => {
            Ok((Subject::Query(metric.query.clone()), metric.query.clone()))
        }
        _ => Err("not a per-pod metric".to_owned()),
    }
}

/// Reads one per-pod metric over the target's Ready pods: one query, then [`aggregate`].
///
/// # Errors
/// [`MetricError::NoReadyPods`] without a Ready pod (nothing is asked),
/// [`MetricError::NoPodSelector`] for a query over [`MAX_POD_QUERY_BYTES`], the errors of
/// [`PrometheusSource::query_pods`], and those of [`aggregate`].
pub async fn read(
    source: &PrometheusSource,
    metric: &MetricSpec,
    pods: &PodSet,
) -> Result<f64, MetricError> {
    let (subject, query) =
        subject_and_query(metric, pods).map_err(|reason| MetricError::NoPodSelector {
            subject: Subject::Query(metric.query.clone()),
            reason,
        })?;
    if pods.ready.is_empty() {
        return Err(MetricError::NoReadyPods { subject });
    }
    if query.len() > MAX_POD_QUERY_BYTES {
        return Err(MetricError::NoPodSelector {
            subject,
            reason: format!(
                "{} Ready pods are too many to name in one query (over {MAX_POD_QUERY_BYTES} bytes)",
                pods.ready.len()
            ),
        });
    }
    let samples = source.query_pods(&subject, &query, &pods.ready).await?;
    let coverage = parse_coverage(metric.coverage.as_deref()).unwrap_or(signals::DEFAULT_COVERAGE);
    aggregate(&subject, &samples, &pods.ready, coverage)
}

/// The average over the Ready pods that report (docs/signals.md#coverage): samples of pods not
/// in `ready` are ignored (gone, not Ready); when fewer than `coverage` (0..1] of the Ready pods
/// report, the metric is unmeasurable and the message names the first missing pods. A pod that
/// reports NaN (no request in a `histogram_quantile` window) counts as reporting but adds no
/// value; when no reporting pod has a finite value the metric is NaN, not measurable.
///
/// # Errors
/// [`MetricError::NoReadyPods`], [`MetricError::LowCoverage`], [`MetricError::NotMeasurable`].
pub fn aggregate(
    subject: &Subject,
    samples: &BTreeMap<String, f64>,
    ready: &BTreeSet<String>,
    coverage: f64,
) -> Result<f64, MetricError> {
    if ready.is_empty() {
        return Err(MetricError::NoReadyPods {
            subject: subject.clone(),
        });
    }
    let reporting: Vec<f64> = ready
        .iter()
        .filter_map(|p| samples.get(p).copied())
        .collect();
    let needed = coverage * ready.len() as f64;
    if (reporting.len() as f64) < needed - 1e-9 {
        let missing: Vec<&String> = ready.iter().filter(|p| !samples.contains_key(*p)).collect();
        return Err(MetricError::LowCoverage {
            subject: subject.clone(),
            reporting: reporting.len(),
            ready: ready.len(),
            coverage,
            missing: missing
                .iter()
                .take(MAX_MISSING_PODS)
                .map(|p| (*p).clone())
                .collect(),
            more: missing.len().saturating_sub(MAX_MISSING_PODS),
        });
    }
    let finite: Vec<f64> = reporting
        .iter()
        .copied()
        .filter(|v| v.is_finite())
        .collect();
    if finite.is_empty() {
        let shown = match reporting.iter().find(|v| !v.is_nan()) {
            Some(v) if *v > 0.0 => "+Inf",
            Some(_) => "-Inf",
            None => "NaN",
        };
        return Err(MetricError::NotMeasurable {
            subject: subject.clone(),
            value: shown,
        });
    }
    let mean = finite.iter().sum::<f64>() / finite.len() as f64;
    Ok(mean)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn set(names: &[&str]) -> BTreeSet<String> {
        names.iter().map(|s| (*s).to_owned()).collect()
    }

    fn samples(pairs: &[(&str, f64)]) -> BTreeMap<String, f64> {
        pairs.iter().map(|(k, v)| ((*k).to_owned(), *v)).collect()
    }

    fn subject() -> Subject {
        Subject::Signal("vllm waiting".to_owned())
    }

    #[test]
    fn averages_over_ready_pods_and_ignores_others() {
        let ready = set(&["a", "b", "c"]);
        // `gone` is a deleted pod whose series lingers: ignored, no ratchet.
        let s = samples(&[("a", 2.0), ("b", 4.0), ("c", 0.0), ("gone", 100.0)]);
        assert_eq!(aggregate(&subject(), &s, &ready, 0.5).expect("value"), 2.0);
    }

    #[test]
    fn coverage_below_the_share_names_the_missing_pods() {
        let ready = set(&["a", "b", "c", "d"]);
        let s = samples(&[("a", 2.0)]);
        let err = aggregate(&subject(), &s, &ready, 0.5).expect_err("1 of 4");
        assert_eq!(err.kind(), "low_coverage");
        assert_eq!(
            err.to_string(),
            "signal `vllm waiting`: 1 of 4 Ready pods report a fresh sample, below coverage 0.5; \
             missing: b, c, d; the metric is skipped, not read as 0"
        );
        // Exactly the share passes: 2 of 4 at 0.5, averaged over the two that report.
        let s = samples(&[("a", 2.0), ("b", 4.0)]);
        assert_eq!(aggregate(&subject(), &s, &ready, 0.5).expect("2 of 4"), 3.0);
        assert!(aggregate(&subject(), &s, &ready, 1.0).is_err());
    }

    #[test]
    fn many_missing_pods_are_bounded_in_the_message() {
        let names: Vec<String> = (0..20).map(|i| format!("p{i:02}")).collect();
        let ready: BTreeSet<String> = names.iter().cloned().collect();
        let err = aggregate(&subject(), &BTreeMap::new(), &ready, 0.5).expect_err("none");
        let text = err.to_string();
        assert!(
            text.contains("missing: p00, p01, p02, p03, p04 and 15 more"),
            "{text}"
        );
    }

    #[test]
    fn nan_pods_report_but_add_no_value() {
        let ready = set(&["a", "b"]);
        let s = samples(&[("a", f64::NAN), ("b", 0.4)]);
        assert_eq!(aggregate(&subject(), &s, &ready, 1.0).expect("value"), 0.4);
        let s = samples(&[("a", f64::NAN), ("b", f64::NAN)]);
        let err = aggregate(&subject(), &s, &ready, 1.0).expect_err("idle");
        assert_eq!(err.kind(), "not_measurable");
    }

    #[test]
    fn no_ready_pod_is_its_own_error() {
        let err =
            aggregate(&subject(), &samples(&[("a", 1.0)]), &set(&[]), 0.5).expect_err("empty");
        assert_eq!(err.kind(), "no_ready_pods");
    }
}
