//! `simulate --requests`: the replayed series carry vLLM's own labels (`model_name`, `engine`),
//! so a query filtering on them reads the replay; a query whose selector selects no replayed
//! series is named on stderr and in the report (docs/simulate/README.md#prometheus; issue 28
//! item 5).

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // a test: a failed expectation fails it

use std::path::Path;
use std::process::Command;

fn scaler(selector: &str) -> String {
    format!(
        "apiVersion: autoscaling.modelsphere.dev/v1alpha1
kind: LLMScaler
metadata:
  name: chat
  namespace: inference
spec:
  targetRef: {{apiVersion: apps/v1, kind: Deployment, name: vllm}}
  serverAddress: http://127.0.0.1:9090
  minReplicas: 1
  maxReplicas: 16
  metrics:
  - name: running
    query: avg(vllm:num_requests_running{{{selector}}})
    target: \"4\"
"
    )
}

fn run(scaler: &str, args: &[&str]) -> (i32, String, Option<serde_json::Value>) {
    let dir = tempfile::tempdir().expect("temp dir");
    let scaler_path = dir.path().join("scaler.yaml");
    std::fs::write(&scaler_path, scaler).expect("write scaler");
    let report = dir.path().join("r.json");
    let out = Command::new(env!("CARGO_BIN_EXE_llmscaler"))
        .arg("simulate")
        .arg("--scaler")
        .arg(&scaler_path)
        .arg("--requests")
        .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("traces/azure-llm-2023/conv.csv"))
        .arg("--report")
        .arg(&report)
        .args(["--scale", "0.3", "--seed", "7", "--initial-replicas", "1"])
        .args(args)
        .output()
        .expect("run llmscaler");
    let json = std::fs::read_to_string(&report)
        .ok()
        .map(|t| serde_json::from_str(&t).expect("report is JSON"));
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stderr).into_owned(),
        json,
    )
}

fn llmscaler_peak(report: &serde_json::Value) -> i64 {
    report["policies"]["llmscaler"]["peak_replicas"]
        .as_i64()
        .expect("peak_replicas")
}

#[test]
fn a_query_filtering_on_model_name_and_engine_reads_the_replay() {
    let (code, stderr, report) = run(
        &scaler("namespace=\"inference\",model_name=\"llama-3\",engine=\"0\""),
        &[],
    );
    assert_eq!(code, 0, "stderr: {stderr}");
    let report = report.expect("report written");
    assert!(
        llmscaler_peak(&report) > 1,
        "the scaler reads its metric and scales up: {report}"
    );
    assert_eq!(report["model_name"], "llama-3", "named by the query");
    assert_eq!(report["unmatched_queries"], serde_json::json!([]));
    assert!(!stderr.contains("warning"), "{stderr}");
}

#[test]
fn a_query_no_replayed_series_matches_is_named_on_stderr_and_in_the_report() {
    // `service` is a label kube-prometheus-stack adds; the replay's series do not carry it.
    let (code, stderr, report) = run(&scaler("service=\"vllm\""), &[]);
    assert_eq!(code, 0, "a warning, not a refusal: {stderr}");
    assert!(
        stderr.contains("warning: spec.metrics[0].query: vllm:num_requests_running{service=\"vllm\"} matched no series in the replay"),
        "{stderr}"
    );
    let report = report.expect("report written");
    assert_eq!(llmscaler_peak(&report), 1, "held for the whole run");
    let unmatched = &report["unmatched_queries"][0];
    assert_eq!(unmatched["field"], "spec.metrics[0].query");
    assert_eq!(
        unmatched["selectors"],
        serde_json::json!(["vllm:num_requests_running{service=\"vllm\"}"])
    );
}

#[test]
fn model_name_overrides_the_query_and_a_mismatch_is_named() {
    let (code, stderr, report) = run(&scaler("model_name=\"llama-3\""), &["--model-name", "qwen"]);
    assert_eq!(code, 0, "stderr: {stderr}");
    assert!(stderr.contains("model_name=\"qwen\""), "{stderr}");
    assert!(stderr.contains("spec.metrics[0].query"), "{stderr}");
    let report = report.expect("report written");
    assert_eq!(report["model_name"], "qwen");
    assert_eq!(
        report["unmatched_queries"].as_array().map(Vec::len),
        Some(1)
    );
}

#[test]
fn queries_naming_two_models_need_model_name() {
    let two = scaler("model_name=\"a\"").replace(
        "target: \"4\"\n",
        "target: \"4\"\n  - name: waiting\n    query: sum(vllm:num_requests_waiting{model_name=\"b\"})\n    target: \"4\"\n",
    );
    let (code, stderr, _) = run(&two, &[]);
    assert_eq!(code, 2, "stderr: {stderr}");
    assert!(stderr.contains("--model-name"), "{stderr}");
    assert!(
        stderr.contains("spec.metrics[1].query: model_name=\"b\""),
        "{stderr}"
    );
    let (code, stderr, _) = run(&two, &["--model-name", "a"]);
    assert_eq!(code, 0, "stderr: {stderr}");
    assert!(stderr.contains("spec.metrics[1].query"), "{stderr}");
}
