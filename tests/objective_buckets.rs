//! The TTFT readings of `spec.objective` (docs/objective.md#each-sync) on a vLLM histogram:
//! the attainment quantile and the bounds of the bucket that holds it, as the offline PromQL of
//! `simulate` evaluates them, must be what Prometheus' own `promtool test rules` evaluates, for
//! the quantile inside a bucket, in the first bucket and in `+Inf`.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // a test: a failed expectation fails it

use std::fmt::Write as _;
use std::path::Path;

use llmscaler::promql::{Labels, Store, evaluate_single, parse};
use llmscaler_api::LLMScalerSpec;

/// vLLM's TTFT bucket bounds (`vllm:time_to_first_token_seconds_bucket`), seconds.
const BOUNDS: [&str; 23] = [
    "0.001", "0.005", "0.01", "0.02", "0.04", "0.06", "0.08", "0.1", "0.25", "0.5", "0.75", "1.0",
    "2.5", "5.0", "7.5", "10.0", "20.0", "40.0", "80.0", "160.0", "640.0", "2560.0", "+Inf",
];

/// The recommended file's spec.
fn spec() -> LLMScalerSpec {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/examples/vllm-objective.yaml");
    let doc: serde_yaml::Value =
        serde_yaml::from_str(&std::fs::read_to_string(path).expect("example")).expect("YAML");
    serde_yaml::from_value(doc["spec"].clone()).expect("spec")
}

/// The quantile's query and the two bucket-bound queries, found by what they compute.
fn ttft_queries(spec: &LLMScalerSpec) -> Vec<String> {
    let queries = llmscaler::engine::objective::queries(spec).expect("objective queries");
    let pick = |needle: &str| {
        queries
            .iter()
            .find(|q| q.starts_with(needle))
            .unwrap_or_else(|| panic!("no query starting with {needle}"))
            .clone()
    };
    vec![
        pick("histogram_quantile(0.99,"),
        pick("histogram_quantile(1e-9,"),
        pick("histogram_quantile(1,"),
    ]
}

/// One case: per pod and per 15 s scrape, how many requests land in each bucket (the bucket's
/// index in [`BOUNDS`] and the count), over 3 minutes.
struct Case {
    name: &'static str,
    per_scrape: Vec<(usize, u32)>,
}

fn cases() -> Vec<Case> {
    vec![
        // 190 of 200 within 0.75 s, 9 in (1, 2.5], 1 in (2.5, 5]: p99 = rank 198 in (1, 2.5]
        // (not on a bound: there the rate's rounding decides the bucket, in both engines alike
        // for the quantile and the bounds, but not alike between them).
        Case {
            name: "inside (1, 2.5]",
            per_scrape: vec![(10, 190), (12, 9), (13, 1)],
        },
        // Everything within 1 ms: the first bucket, from 0.
        Case {
            name: "first bucket",
            per_scrape: vec![(0, 50)],
        },
        // 2 of 100 above 2560 s: the rank is in +Inf, both bounds the largest finite one.
        Case {
            name: "+Inf",
            per_scrape: vec![(9, 98), (22, 2)],
        },
    ]
}

#[test]
fn the_ttft_bucket_readings_are_what_prometheus_reads() {
    let spec = spec();
    let queries = ttft_queries(&spec);
    let scrapes = 13; // 0 .. 180 s
    let eval_ms = 180_000;
    let mut file = String::from("rule_files: []\nevaluation_interval: 15s\ntests:\n");
    for case in cases() {
        let mut store = Store::new();
        writeln!(file, "  - interval: 15s\n    input_series:").unwrap();
        for pod in ["a", "b"] {
            for (i, le) in BOUNDS.iter().enumerate() {
                // Cumulative: a bucket counts the requests of every bucket at or below it.
                let step: u32 = case
                    .per_scrape
                    .iter()
                    .filter(|(bucket, _)| *bucket <= i)
                    .map(|(_, n)| n)
                    .sum();
                let labels: Labels = [
                    ("__name__", "vllm:time_to_first_token_seconds_bucket"),
                    ("namespace", "inference"),
                    ("app", "vllm"),
                    ("pod", pod),
                    ("le", le),
                ]
                .iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                .collect();
                for k in 0..scrapes {
                    store.push(&labels, i64::from(k) * 15_000, Some(f64::from(step * k)));
                }
                writeln!(
                    file,
                    "      - series: 'vllm:time_to_first_token_seconds_bucket{{namespace=\"inference\",app=\"vllm\",pod=\"{pod}\",le=\"{le}\"}}'\n        values: '0+{step}x{}'",
                    scrapes - 1
                )
                .unwrap();
            }
        }
        writeln!(file, "    promql_expr_test:").unwrap();
        let mut values = Vec::new();
        for query in &queries {
            let value =
                evaluate_single(&parse(query).expect("parses"), &store, eval_ms).expect("a value");
            values.push(value);
            writeln!(
                file,
                // Within 1e-9 (the two engines round the rate differently in the last bits).
                "      - expr: 'abs(({query}) - {value:e}) < bool 1e-9'\n        eval_time: 3m\n        exp_samples:\n          - labels: '{{}}'\n            value: 1"
            )
            .unwrap();
        }
        // What each case is about, in the offline reading (promtool checks Prometheus agrees).
        let [q, low, high] = values[..] else {
            panic!("three readings")
        };
        match case.name {
            "inside (1, 2.5]" => {
                assert!(q > 1.0 && q <= 2.5, "{q}");
                assert!(
                    (low - 1.0).abs() < 1e-6 && (high - 2.5).abs() < 1e-12,
                    "{low} {high}"
                );
            }
            "first bucket" => assert!(low < 1e-9 && (high - 0.001).abs() < 1e-12, "{low} {high}"),
            _ => assert!(low == 2560.0 && high == 2560.0, "{low} {high}"),
        }
    }
    let dir = tempfile::TempDir::new().unwrap();
    std::fs::write(dir.path().join("buckets.test.yaml"), &file).unwrap();
    if let Err(err) =
        llmscaler_testkit::prometheus::promtool_test_rules(dir.path(), "buckets.test.yaml")
    {
        panic!("{err:#}\n{file}");
    }
}
