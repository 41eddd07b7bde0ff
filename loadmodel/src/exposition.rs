//! Prometheus text exposition (format 0.0.4) of replica metrics under vLLM's metric names.

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

/// Renders every replica's series: one sample per replica for each gauge and counter, and the
/// TTFT histogram (`_bucket` with `le`, `_sum`, `_count`). An empty input renders the
/// `# HELP`/`# TYPE` lines only.
pub fn render(replicas: &[(Labels, ReplicaMetrics)]) -> String {
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
        for (labels, m) in replicas {
            let _ = writeln!(out, "{name}{} {}", label_text(labels, None), number(get(m)));
        }
    }
    let counters: [(&str, &str, Getter); 3] = [
        (
            "vllm:request_success",
            "Count of successfully processed requests.",
            |m| m.counters.success as f64,
        ),
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
        for (labels, m) in replicas {
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
    for (labels, m) in replicas {
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
        let text = render(&[(labels, r.metrics())]);
        assert!(text.contains(
            "vllm:num_requests_waiting{pod=\"pod-a\",namespace=\"demo\",app=\"va\\\"l\"} 0\n"
        ));
        assert!(text.contains("# TYPE vllm:request_success_total counter\n"));
        assert!(text.contains(
            "vllm:request_success_total{pod=\"pod-a\",namespace=\"demo\",app=\"va\\\"l\"} 1\n"
        ));
        assert!(text.contains("le=\"0.01\"} 0\n"), "{text}");
        assert!(!text.contains("le=\"0.025\""), "not a vLLM bound");
        // TTFT = 0.012 + 0.00035 + 100/12000 s = 0.0207 s.
        assert!(text.contains("le=\"0.02\"} 0\n"), "{text}");
        assert!(text.contains("le=\"0.04\"} 1\n"), "{text}");
        assert!(text.contains("le=\"+Inf\"} 1\n"));
        assert!(text.contains("vllm:time_to_first_token_seconds_count{pod=\"pod-a\",namespace=\"demo\",app=\"va\\\"l\"} 1\n"));
        assert_eq!(text.lines().filter(|l| l.contains("_bucket")).count(), 23);
    }
}
