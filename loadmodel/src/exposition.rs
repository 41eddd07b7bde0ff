//! Prometheus text exposition (format 0.0.4) of replica metrics under vLLM's metric names, with
//! the label sets real vLLM 0.32 puts on them (`engine`, `model_name`, `finished_reason`,
//! `reason`): checked against real vLLM's `/metrics` captured in `tests/fixtures/vllm-0.32/`
//! (`tests/fixtures/vllm-0.32/README.md`).

use std::fmt::Write;

use super::replica::{ReplicaMetrics, TTFT_BUCKETS_S};

/// Label pairs put on every series of one replica (e.g. `pod`, `namespace`, `app`).
pub type Labels = Vec<(String, String)>;

fn escape(value: &str) -> String {
    value
        .replace('\\', "\\\\")
        .replace('\n', "\\n")
        .replace('"', "\\\"")
}

fn label_text(labels: &Labels, extra: Option<(&str, &str)>) -> String {
    let mut parts: Vec<String> = labels
        .iter()
        .map(|(k, v)| format!("{k}=\"{}\"", escape(v)))
        .collect();
    if let Some((k, v)) = extra {
        parts.push(format!("{k}=\"{}\"", escape(v)));
    }
    format!("{{{}}}", parts.join(","))
}

/// vLLM's `engine` label: the engine core's index; 0 for a server without data parallelism.
pub const ENGINE: &str = "0";

/// The `finished_reason` values real vLLM 0.32 labels `vllm:request_success_total` with; the
/// model's requests always stop at their output length, so only `length` counts.
pub const FINISHED_REASONS: [&str; 5] = ["stop", "length", "abort", "error", "repetition"];

/// The `reason` values of `vllm:num_requests_waiting_by_reason` in vLLM 0.32: `capacity` (no
/// room in the batch or the KV cache: every waiting request of the model) and `deferred`.
pub const WAITING_REASONS: [&str; 2] = ["capacity", "deferred"];

/// `labels` with vLLM's own `engine` and `model_name` added, as real vLLM labels every series.
fn with_vllm_labels(labels: &Labels, model_name: &str) -> Labels {
    let mut all = labels.clone();
    all.push(("engine".to_owned(), ENGINE.to_owned()));
    all.push(("model_name".to_owned(), model_name.to_owned()));
    all
}

fn number(v: f64) -> String {
    if v.is_nan() {
        "NaN".into()
    } else if v == f64::INFINITY {
        "+Inf".into()
    } else if v == f64::NEG_INFINITY {
        "-Inf".into()
    } else {
        format!("{v}")
    }
}

/// Renders every replica's series as vLLM 0.32 serving `model_name` would: one sample per
/// replica for each gauge and counter (each labelled with the replica's `labels` plus `engine`
/// and `model_name`), `vllm:num_requests_waiting_by_reason` per reason,
/// `vllm:request_success_total` per `finished_reason`, and the TTFT histogram (`_bucket` with
/// `le`, `_sum`, `_count`). An empty input renders the `# HELP`/`# TYPE` lines only.
pub fn render(model_name: &str, replicas: &[(Labels, ReplicaMetrics)]) -> String {
    let replicas: Vec<(Labels, &ReplicaMetrics)> = replicas
        .iter()
        .map(|(labels, m)| (with_vllm_labels(labels, model_name), m))
        .collect();
    let mut out = String::new();
    type Getter = fn(&ReplicaMetrics) -> f64;
    let gauges: [(&str, &str, Getter); 3] = [
        (
            "vllm:num_requests_running",
            "Number of requests in model execution batches.",
            |m| m.running as f64,
        ),
        (
            "vllm:num_requests_waiting",
            "Number of requests waiting to be processed.",
            |m| m.waiting as f64,
        ),
        (
            "vllm:kv_cache_usage_perc",
            "KV-cache usage. 1 means 100 percent usage.",
            |m| m.kv_cache_usage,
        ),
    ];
    for (name, help, get) in gauges {
        let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} gauge");
        for (labels, m) in &replicas {
            let _ = writeln!(out, "{name}{} {}", label_text(labels, None), number(get(m)));
        }
    }
    let name = "vllm:num_requests_waiting_by_reason";
    let _ = writeln!(
        out,
        "# HELP {name} Number of requests waiting, by reason.\n# TYPE {name} gauge"
    );
    for (labels, m) in &replicas {
        for reason in WAITING_REASONS {
            let value = if reason == "capacity" { m.waiting } else { 0 };
            let _ = writeln!(
                out,
                "{name}{} {value}",
                label_text(labels, Some(("reason", reason)))
            );
        }
    }
    let name = "vllm:request_success";
    let _ = writeln!(
        out,
        "# HELP {name}_total Count of successfully processed requests.\n# TYPE {name}_total counter"
    );
    for (labels, m) in &replicas {
        for reason in FINISHED_REASONS {
            let value = if reason == "length" {
                m.counters.success
            } else {
                0
            };
            let _ = writeln!(
                out,
                "{name}_total{} {value}",
                label_text(labels, Some(("finished_reason", reason)))
            );
        }
    }
    let counters: [(&str, &str, Getter); 2] = [
        (
            "vllm:prompt_tokens",
            "Number of prefill tokens processed.",
            |m| m.counters.prompt_tokens as f64,
        ),
        (
            "vllm:generation_tokens",
            "Number of generation tokens processed.",
            |m| m.counters.generation_tokens as f64,
        ),
    ];
    for (name, help, get) in counters {
        let _ = writeln!(
            out,
            "# HELP {name}_total {help}\n# TYPE {name}_total counter"
        );
        for (labels, m) in &replicas {
            let _ = writeln!(
                out,
                "{name}_total{} {}",
                label_text(labels, None),
                number(get(m))
            );
        }
    }
    let name = "vllm:time_to_first_token_seconds";
    let _ = writeln!(
        out,
        "# HELP {name} Histogram of time to first token in seconds.\n# TYPE {name} histogram"
    );
    for (labels, m) in &replicas {
        let mut cumulative = 0u64;
        let bounds = TTFT_BUCKETS_S
            .iter()
            .map(|b| number(*b))
            .chain(["+Inf".into()]);
        for (le, count) in bounds.zip(&m.counters.ttft_bucket_counts) {
            cumulative += count;
            let _ = writeln!(
                out,
                "{name}_bucket{} {cumulative}",
                label_text(labels, Some(("le", &le)))
            );
        }
        let l = label_text(labels, None);
        let _ = writeln!(out, "{name}_sum{l} {}", number(m.counters.ttft_sum_s));
        let _ = writeln!(out, "{name}_count{l} {}", m.counters.ttft_count);
    }
    // The inter-token latency (vLLM 0.32's `vllm:inter_token_latency_seconds`): the step
    // times decoding sequences saw; only the `+Inf` bucket, its sum and count.
    let name = "vllm:inter_token_latency_seconds";
    let _ = writeln!(
        out,
        "# HELP {name} Histogram of inter-token latency in seconds.\n# TYPE {name} histogram"
    );
    for (labels, m) in &replicas {
        let _ = writeln!(
            out,
            "{name}_bucket{} {}",
            label_text(labels, Some(("le", "+Inf"))),
            m.counters.itl_count
        );
        let l = label_text(labels, None);
        let _ = writeln!(out, "{name}_sum{l} {}", number(m.counters.itl_sum_s));
        let _ = writeln!(out, "{name}_count{l} {}", m.counters.itl_count);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::replica::{Params, Replica};
    use crate::trace::Request;

    #[test]
    fn renders_one_series_per_replica_with_labels_and_a_cumulative_histogram() {
        let mut r = Replica::new("pod-a", Params::default(), 0.0);
        r.enqueue(Request {
            arrival_s: 0.0,
            prompt_tokens: 100,
            output_tokens: 2,
        });
        r.advance_to(1.0);
        let labels: Labels = vec![
            ("pod".into(), "pod-a".into()),
            ("namespace".into(), "demo".into()),
            ("app".into(), "va\"l".into()),
        ];
        let text = render("m", &[(labels, r.metrics())]);
        let l = "pod=\"pod-a\",namespace=\"demo\",app=\"va\\\"l\",engine=\"0\",model_name=\"m\"";
        assert!(
            text.contains(&format!("vllm:num_requests_waiting{{{l}}} 0\n")),
            "{text}"
        );
        assert!(text.contains(&format!(
            "vllm:num_requests_waiting_by_reason{{{l},reason=\"capacity\"}} 0\n"
        )));
        assert!(text.contains("# TYPE vllm:request_success_total counter\n"));
        assert!(text.contains(&format!(
            "vllm:request_success_total{{{l},finished_reason=\"length\"}} 1\n"
        )));
        assert!(text.contains(&format!(
            "vllm:request_success_total{{{l},finished_reason=\"abort\"}} 0\n"
        )));
        assert!(text.contains("le=\"0.01\"} 0\n"), "{text}");
        assert!(!text.contains("le=\"0.025\""), "not a vLLM bound");
        // TTFT = 0.012 + 0.00035 + 100/12000 s = 0.0207 s.
        assert!(text.contains("le=\"0.02\"} 0\n"), "{text}");
        assert!(text.contains("le=\"0.04\"} 1\n"), "{text}");
        assert!(text.contains("le=\"+Inf\"} 1\n"));
        assert!(text.contains(&format!(
            "vllm:time_to_first_token_seconds_count{{{l}}} 1\n"
        )));
        assert!(text.contains(&format!(
            "vllm:inter_token_latency_seconds_count{{{l}}} 1\n"
        )));
        assert_eq!(text.lines().filter(|l| l.contains("_bucket")).count(), 24);
    }
}
