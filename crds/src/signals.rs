//! Runtime signals (docs/signals.md): which metric each serving runtime publishes for each
//! signal, and the per-pod PromQL query the operator (and `simulate`) builds for one.
//!
//! The table is the one source for admission (a signal a runtime does not publish is refused,
//! naming the alternative), the controller and the replay.

use crate::types::{Runtime, RuntimeSignal};

/// Default `coverage`: share of the target's Ready pods that must report (docs/signals.md#coverage).
pub const DEFAULT_COVERAGE: f64 = 0.5;

/// Default `scrapeIntervalSeconds` (docs/signals.md#staleness): samples older than two of them
/// are stale.
pub(crate) const DEFAULT_SCRAPE_INTERVAL_SECONDS: i32 = 30;

/// The quantile of the `ttftP90` signal.
pub(crate) const TTFT_QUANTILE: f64 = 0.9;

/// Shortest `rate()` window of the `ttftP90` signal, seconds (docs/signals.md#runtimes).
pub(crate) const TTFT_MIN_WINDOW_SECONDS: i64 = 60;

/// How a runtime publishes one signal.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Published {
    /// A gauge per pod, summed by pod (several engines in one pod add up).
    Sum(&'static str),
    /// A gauge per pod that is a share (0..1): the largest series of the pod.
    Max(&'static str),
    /// A histogram's `_bucket` series; the signal is its quantile per pod.
    Histogram(&'static str),
}

impl Published {
    /// The metric name Prometheus stores (`..._bucket` for a histogram).
    pub fn metric(self) -> &'static str {
        match self {
            Published::Sum(m) | Published::Max(m) | Published::Histogram(m) => m,
        }
    }
}

/// The runtime's name as written in a spec (`vllm`, `sglang`, `llamacpp`, `tgi`).
pub fn runtime_name(runtime: Runtime) -> &'static str {
    match runtime {
        Runtime::Vllm => "vllm",
        Runtime::Sglang => "sglang",
        Runtime::Llamacpp => "llamacpp",
        Runtime::Tgi => "tgi",
    }
}

/// The signal's name as written in a spec (`waiting`, `running`, `kvCacheUsage`, `ttftP90`).
pub fn signal_name(signal: RuntimeSignal) -> &'static str {
    match signal {
        RuntimeSignal::Waiting => "waiting",
        RuntimeSignal::Running => "running",
        RuntimeSignal::KvCacheUsage => "kvCacheUsage",
        RuntimeSignal::TtftP90 => "ttftP90",
    }
}

/// The metric `runtime` publishes for `signal` (the table of docs/signals.md#runtimes).
///
/// # Errors
/// Why the runtime has no such metric and what to use instead, for an admission message.
pub fn published(runtime: Runtime, signal: RuntimeSignal) -> Result<Published, &'static str> {
    use Published::{Histogram, Max, Sum};
    use RuntimeSignal::{KvCacheUsage, Running, TtftP90, Waiting};
    match (runtime, signal) {
        (Runtime::Vllm, Waiting) => Ok(Sum("vllm:num_requests_waiting")),
        (Runtime::Vllm, Running) => Ok(Sum("vllm:num_requests_running")),
        (Runtime::Vllm, KvCacheUsage) => Ok(Max("vllm:kv_cache_usage_perc")),
        (Runtime::Vllm, TtftP90) => Ok(Histogram("vllm:time_to_first_token_seconds_bucket")),
        (Runtime::Sglang, Waiting) => Ok(Sum("sglang:num_queue_reqs")),
        (Runtime::Sglang, Running) => Ok(Sum("sglang:num_running_reqs")),
        (Runtime::Sglang, KvCacheUsage) => Ok(Max("sglang:token_usage")),
        (Runtime::Sglang, TtftP90) => Ok(Histogram("sglang:time_to_first_token_seconds_bucket")),
        (Runtime::Llamacpp, Waiting) => Ok(Sum("llamacpp:requests_deferred")),
        (Runtime::Llamacpp, Running) => Ok(Sum("llamacpp:requests_processing")),
        (Runtime::Llamacpp, KvCacheUsage) => Ok(Max("llamacpp:kv_cache_usage_ratio")),
        (Runtime::Llamacpp, TtftP90) => Err(
            "llama.cpp publishes no time-to-first-token histogram; use signal waiting \
             (llamacpp:requests_deferred) as a guardrail, or a perPod query on a gateway's TTFT \
             histogram",
        ),
        (Runtime::Tgi, Waiting) => Ok(Sum("tgi_queue_size")),
        (Runtime::Tgi, Running) => Ok(Sum("tgi_batch_current_size")),
        (Runtime::Tgi, KvCacheUsage) => Err(
            "TGI publishes no KV-cache gauge; use signal running (tgi_batch_current_size) with a \
             target below the server's --max-batch-size",
        ),
        (Runtime::Tgi, TtftP90) => Err(
            "TGI publishes no time-to-first-token histogram (tgi_request_queue_duration covers \
             queueing only); use signal waiting (tgi_queue_size), or a perPod query with \
             histogram_quantile over tgi_request_queue_duration_bucket",
        ),
    }
}

/// The `rate()` window of `ttftP90`: four scrape intervals, at least a minute, seconds.
pub(crate) fn ttft_window_seconds(scrape_interval_seconds: i32) -> i64 {
    (4 * i64::from(scrape_interval_seconds.max(1))).max(TTFT_MIN_WINDOW_SECONDS)
}

/// The per-pod query of a runtime signal over the pods `pods` of `namespace`: one series per
/// pod, each with its `pod` label (docs/signals.md#the-query). Gauges read the last sample of
/// the last two scrape intervals (`last_over_time`), so a sample older than that is stale and
/// its pod reads as missing; `ttftP90` is `histogram_quantile(0.9, ...)` over the `rate` of the
/// buckets in [`ttft_window_seconds`], NaN for a pod that served nothing in it.
///
/// Pod names are DNS subdomains (`[a-z0-9.-]`); `.` is written `[.]`, so the regex needs no
/// escapes. An empty `pods` selects nothing (`pod=~""` matches no pod-labelled series).
pub fn pod_query(
    published: Published,
    namespace: &str,
    pods: &[&str],
    scrape_interval_seconds: i32,
) -> String {
    let pod_regex = pods
        .iter()
        .map(|p| p.replace('.', "[.]"))
        .collect::<Vec<_>>()
        .join("|");
    let namespace = namespace.replace(['\\', '"'], "");
    build(
        published,
        &format!("namespace=\"{namespace}\",pod=~\"{pod_regex}\""),
        scrape_interval_seconds,
    )
}

/// The fleet-wide form of a runtime signal for comparators that aggregate themselves
/// (`simulate`'s HPA and KEDA): `avg(...)` of the per-pod query over every pod-labelled series.
pub fn fleet_query(published: Published, scrape_interval_seconds: i32) -> String {
    format!(
        "avg({})",
        build(published, "pod=~\".+\"", scrape_interval_seconds)
    )
}

fn build(published: Published, matchers: &str, scrape_interval_seconds: i32) -> String {
    let fresh_s = 2 * i64::from(scrape_interval_seconds.max(1));
    let selector = |metric: &str| format!("{metric}{{{matchers}}}");
    match published {
        Published::Sum(metric) => format!(
            "sum by (pod) (last_over_time({}[{fresh_s}s]))",
            selector(metric)
        ),
        Published::Max(metric) => format!(
            "max by (pod) (last_over_time({}[{fresh_s}s]))",
            selector(metric)
        ),
        Published::Histogram(metric) => format!(
            "histogram_quantile({TTFT_QUANTILE}, sum by (pod, le) (rate({}[{}s])))",
            selector(metric),
            ttft_window_seconds(scrape_interval_seconds)
        ),
    }
}

/// Parses `metrics[].coverage`: a plain number in (0, 1] (unset: [`DEFAULT_COVERAGE`]).
///
/// # Errors
/// A message (without the field path) otherwise.
pub fn parse_coverage(raw: Option<&str>) -> Result<f64, String> {
    let Some(raw) = raw else {
        return Ok(DEFAULT_COVERAGE);
    };
    match raw.trim().parse::<f64>() {
        Ok(v) if v.is_finite() && v > 0.0 && v <= 1.0 => Ok(v),
        _ => Err(format!(
            "{raw:?} is not a share in (0, 1] of the Ready pods, e.g. \"0.5\" (no % suffix)"
        )),
    }
}

/// Why a `perPod` query cannot keep a `pod` label (an aggregation without `by (... pod ...)`,
/// one `without (... pod ...)`, `scalar`/`vector`, a number), judged from its syntax tree;
/// `None` when it may keep it. Prometheus has the last word: a series without `pod` is refused
/// at run time.
pub(crate) fn drops_pod_label(query: &str) -> Option<String> {
    crate::promql::drops_pod_label(query)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_runtime_publishes_waiting_and_running() {
        for runtime in [
            Runtime::Vllm,
            Runtime::Sglang,
            Runtime::Llamacpp,
            Runtime::Tgi,
        ] {
            for signal in [RuntimeSignal::Waiting, RuntimeSignal::Running] {
                assert!(published(runtime, signal).is_ok(), "{runtime:?} {signal:?}");
            }
        }
        assert!(
            published(Runtime::Tgi, RuntimeSignal::KvCacheUsage)
                .expect_err("tgi kv")
                .contains("use signal running")
        );
        assert!(published(Runtime::Llamacpp, RuntimeSignal::TtftP90).is_err());
    }

    #[test]
    fn queries_select_the_pods_by_name() {
        let q = pod_query(
            Published::Sum("vllm:num_requests_waiting"),
            "inference",
            &["vllm-a.b", "vllm-c"],
            15,
        );
        assert_eq!(
            q,
            "sum by (pod) (last_over_time(vllm:num_requests_waiting{namespace=\"inference\",pod=~\"vllm-a[.]b|vllm-c\"}[30s]))"
        );
        let q = pod_query(
            Published::Histogram("vllm:time_to_first_token_seconds_bucket"),
            "ns",
            &["p"],
            30,
        );
        assert_eq!(
            q,
            "histogram_quantile(0.9, sum by (pod, le) (rate(vllm:time_to_first_token_seconds_bucket{namespace=\"ns\",pod=~\"p\"}[120s])))"
        );
    }

    #[test]
    fn coverage_is_a_share() {
        assert_eq!(parse_coverage(None), Ok(0.5));
        assert_eq!(parse_coverage(Some("1")), Ok(1.0));
        for bad in ["0", "1.5", "50%", "x", "NaN"] {
            assert!(parse_coverage(Some(bad)).is_err(), "{bad}");
        }
    }

    #[test]
    fn pod_label_heuristic() {
        for keeps in [
            "vllm:num_requests_waiting{app=\"x\"}",
            "sum by (pod) (rate(x[1m]))",
            "max(x) by (namespace, pod)",
            "sum without (le) (x)",
            "rate(x[1m]) / 2",
        ] {
            assert_eq!(drops_pod_label(keeps), None, "{keeps}");
        }
        for drops in [
            "sum(x)",
            "avg by (app) (x)",
            "sum(x) by (app)",
            "sum without (pod) (x)",
            "scalar(x)",
            "3",
        ] {
            assert!(drops_pod_label(drops).is_some(), "{drops}");
        }
    }
}
