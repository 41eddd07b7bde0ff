//! Prometheus scraping the Ready pods: each scrape appends one point per series of every Ready
//! pod (vLLM's names, the series of `docs/load-model.md#metrics-per-replica`) and writes
//! staleness markers for the pods that stopped answering since the last one.

use llmscaler_loadmodel::ReplicaMetrics;
use llmscaler_loadmodel::replica::TTFT_BUCKETS_S;

use super::Cluster;
use crate::promql::{Labels, Store};

/// The labels every series carries besides `pod`: the target labels Prometheus attaches
/// (`namespace`, `app`, `job`) and vLLM's own (`engine`, `model_name`).
pub type SeriesLabels = Vec<(String, String)>;

fn series(base: &Labels, name: &str, extra: Option<(&str, String)>) -> Labels {
    let mut l = base.clone();
    l.insert("__name__".to_string(), name.to_string());
    if let Some((k, v)) = extra {
        l.insert(k.to_string(), v);
    }
    l
}

fn write_pod(store: &mut Store, base: &Labels, m: &ReplicaMetrics, t_ms: i64) {
    let gauges = [
        ("vllm:num_requests_running", m.running as f64),
        ("vllm:num_requests_waiting", m.waiting as f64),
        ("vllm:kv_cache_usage_perc", m.kv_cache_usage),
        ("vllm:request_success_total", m.counters.success as f64),
        ("vllm:prompt_tokens_total", m.counters.prompt_tokens as f64),
        (
            "vllm:generation_tokens_total",
            m.counters.generation_tokens as f64,
        ),
        (
            "vllm:time_to_first_token_seconds_sum",
            m.counters.ttft_sum_s,
        ),
        (
            "vllm:time_to_first_token_seconds_count",
            m.counters.ttft_count as f64,
        ),
        ("vllm:inter_token_latency_seconds_sum", m.counters.itl_sum_s),
        (
            "vllm:inter_token_latency_seconds_count",
            m.counters.itl_count as f64,
        ),
    ];
    for (name, v) in gauges {
        // vLLM counts successes per `finished_reason`; the model's requests stop at their length.
        let extra = (name == "vllm:request_success_total")
            .then(|| ("finished_reason", "length".to_owned()));
        store.push(&series(base, name, extra), t_ms, Some(v));
    }
    let mut cumulative = 0u64;
    let bounds = TTFT_BUCKETS_S
        .iter()
        .map(|b| format!("{b}"))
        .chain(["+Inf".to_string()]);
    for (le, count) in bounds.zip(&m.counters.ttft_bucket_counts) {
        cumulative += count;
        store.push(
            &series(
                base,
                "vllm:time_to_first_token_seconds_bucket",
                Some(("le", le)),
            ),
            t_ms,
            Some(cumulative as f64),
        );
    }
}

/// One scrape of every Ready pod at `t_ms` (pods out of rotation included: they still serve
/// `/metrics`).
pub fn scrape(cluster: &Cluster, labels: &SeriesLabels, store: &mut Store, t_ms: i64) {
    let mut base: Labels = labels.iter().cloned().collect();
    let ready = cluster.ready_names();
    for m in cluster.fleet().metrics_alive() {
        base.insert("pod".to_string(), m.name.clone());
        write_pod(store, &base, &m, t_ms);
    }
    let stopped: Vec<String> = store_pods(store)
        .into_iter()
        .filter(|p| !ready.contains(p))
        .collect();
    for pod in stopped {
        let mut only = Labels::new();
        only.insert("pod".to_string(), pod);
        store.mark_stale(&only, t_ms);
    }
}

/// Pods with a live (non-stale) series in the store.
fn store_pods(store: &Store) -> Vec<String> {
    store.live_values_of("vllm:num_requests_running", "pod")
}
