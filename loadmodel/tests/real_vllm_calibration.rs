//! The load model against one real vLLM replica, from the committed run of
//! `e2e/real-vllm-calibrate` (docs/benchmarks/real-vllm.md, "The load model against one real
//! replica"; issue 22 item 3), without vLLM: the committed profile parses, the committed
//! sequence fits the tiny model's 2,048-token context, and replaying it through the model gives
//! the committed model figures; the model's errors against the committed real figures stay
//! within what the page reports.
//!
//! Trace data of `sequence.csv`: Microsoft Azure, "Azure LLM inference trace 2023" (CC BY 4.0);
//! Patel et al., "Splitwise", ISCA 2024.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // a test: a failed expectation fails it

use llmscaler_loadmodel::calibration::{Figures, replay_one};
use llmscaler_loadmodel::{Params, Profile};
use serde_json::Value;

const DIR: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/benchmarks/real-vllm");

fn committed() -> (Params, Vec<llmscaler_loadmodel::Request>, Value) {
    let profile = Profile::from_file(format!("{DIR}/profile.yaml").as_ref()).unwrap();
    let sequence = std::fs::File::open(format!("{DIR}/sequence.csv")).unwrap();
    let requests = llmscaler_loadmodel::trace::read_azure(sequence).unwrap();
    let figures: Value =
        serde_json::from_str(&std::fs::read_to_string(format!("{DIR}/figures.json")).unwrap())
            .unwrap();
    (profile.apply(Params::default()), requests, figures)
}

fn figures(v: &Value) -> Figures {
    serde_json::from_value(v.clone()).unwrap()
}

#[test]
fn the_sequence_fits_the_context_and_the_window() {
    let (_, requests, figures) = committed();
    let window = figures["window_seconds"].as_f64().unwrap();
    assert!(requests.len() > 500, "{} requests", requests.len());
    for r in &requests {
        assert!(r.arrival_s <= window, "{r:?} after the window");
        assert!(
            r.prompt_tokens + r.output_tokens <= 2048,
            "{r:?} exceeds the context"
        );
        assert!(r.output_tokens >= 1 && r.prompt_tokens >= 1, "{r:?}");
    }
}

#[test]
fn the_model_replays_the_sequence_to_the_committed_figures() {
    let (params, requests, committed) = committed();
    let window = committed["window_seconds"].as_f64().unwrap();
    let got = replay_one(&requests, params, 1.0).figures(window);
    let want = figures(&committed["model"]);
    let close = |a: f64, b: f64| (a - b).abs() <= 1e-9 * a.abs().max(1.0);
    for (name, a, b) in [
        (
            "completions/s",
            got.completions_per_s,
            want.completions_per_s,
        ),
        ("TTFT p50", got.ttft_p50_s, want.ttft_p50_s),
        ("TTFT p95", got.ttft_p95_s, want.ttft_p95_s),
        ("TTFT p99", got.ttft_p99_s, want.ttft_p99_s),
        ("waiting mean", got.waiting_mean, want.waiting_mean),
        ("running mean", got.running_mean, want.running_mean),
        ("KV mean", got.kv_mean, want.kv_mean),
    ] {
        assert!(
            close(a, b),
            "{name}: the model gives {a}, figures.json says {b}"
        );
    }
}

#[test]
fn the_model_serves_the_real_completion_rate_within_20_percent() {
    let (params, requests, committed) = committed();
    let window = committed["window_seconds"].as_f64().unwrap();
    let model = replay_one(&requests, params, 1.0).figures(window);
    let real = figures(&committed["real"]);
    let error = (model.completions_per_s - real.completions_per_s) / real.completions_per_s;
    assert!(
        error.abs() <= 0.2,
        "completions/s: real {}, model {} ({:+.1} %)",
        real.completions_per_s,
        model.completions_per_s,
        error * 100.0
    );
}
