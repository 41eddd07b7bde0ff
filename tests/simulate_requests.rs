//! `llmscaler simulate --requests`: the closed-loop replay on the shipped conversation trace
//! (thinned with `--scale` to keep the debug build quick): report shape, determinism, and the
//! errors for a query outside the PromQL subset and an unknown comparator; runtime signals and a
//! TTFT guardrail (docs/signals.md#in-the-replay).

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // a test: a failed expectation fails it

use std::path::{Path, PathBuf};
use std::process::Command;

const SCALER: &str = "apiVersion: autoscaling.modelsphere.dev/v1alpha1
kind: LLMScaler
metadata:
  name: chat
  namespace: inference
spec:
  targetRef: {apiVersion: apps/v1, kind: Deployment, name: vllm}
  serverAddress: http://127.0.0.1:9090
  minReplicas: 1
  maxReplicas: 16
  metrics:
  - name: running
    query: avg(vllm:num_requests_running{app=\"vllm\"})
    target: \"24\"
  - name: waiting
    query: avg(vllm:num_requests_waiting{app=\"vllm\"}) or vector(0)
    target: \"4\"
  scaleDown:
    stabilizationWindowSeconds: 300
";

fn trace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("traces/azure-llm-2023/conv.csv")
}

fn run(scaler: &str, args: &[&str]) -> (i32, String, String, Option<serde_json::Value>) {
    let dir = tempfile::tempdir().expect("temp dir");
    let scaler_path = dir.path().join("scaler.yaml");
    std::fs::write(&scaler_path, scaler).expect("write scaler");
    let report = dir.path().join("r.json");
    let out = Command::new(env!("CARGO_BIN_EXE_llmscaler"))
        .arg("simulate")
        .arg("--scaler")
        .arg(&scaler_path)
        .arg("--requests")
        .arg(trace())
        .arg("--report")
        .arg(&report)
        .args(args)
        .output()
        .expect("run llmscaler");
    let json = std::fs::read_to_string(&report)
        .ok()
        .map(|t| serde_json::from_str(&t).expect("report is JSON"));
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
        json,
    )
}

const ARGS: &[&str] = &[
    "--scale",
    "0.3",
    "--seed",
    "7",
    "--compare",
    "hpa,keda,ideal,static",
];

#[test]
fn the_report_has_every_policy_and_the_same_seed_gives_the_same_json() {
    let (code, stdout, stderr, first) = run(SCALER, ARGS);
    assert_eq!(code, 0, "stderr: {stderr}");
    assert!(
        stdout.contains("CC BY 4.0"),
        "attribution printed: {stdout}"
    );
    let first = first.expect("report written");
    let policies = first["policies"].as_object().expect("policies");
    let names: Vec<&str> = policies.keys().map(String::as_str).collect();
    assert_eq!(names, ["hpa", "ideal", "keda", "llmscaler", "static"]);
    for (name, p) in policies {
        for key in [
            "replica_seconds",
            "slo_attainment",
            "ttft_p50_seconds",
            "ttft_p99_seconds",
            "requests_dropped",
            "scale_events",
        ] {
            assert!(p.get(key).is_some(), "{name} lacks {key}: {p}");
        }
        let slo = p["slo_attainment"].as_f64().expect("a share");
        assert!((0.0..=1.0).contains(&slo), "{name}: {slo}");
    }
    assert!(
        first["attribution"]
            .as_str()
            .is_some_and(|a| a.contains("CC BY 4.0"))
    );
    // The bound is cheapest; the static fleet never scales and costs peak × duration.
    let rs = |n: &str| policies[n]["replica_seconds"].as_f64().expect("number");
    for other in ["llmscaler", "hpa", "keda", "static"] {
        assert!(rs("ideal") <= rs(other), "ideal above {other}");
    }
    assert_eq!(policies["static"]["scale_events"], 0);
    assert_eq!(
        policies["static"]["peak_replicas"],
        policies["ideal"]["peak_replicas"]
    );

    let (code, _, stderr, second) = run(SCALER, ARGS);
    assert_eq!(code, 0, "stderr: {stderr}");
    assert_eq!(Some(first), second, "same inputs and seed, same report");
}

#[test]
fn a_query_outside_the_subset_is_refused_naming_the_construct() {
    let scaler = SCALER.replace(
        "avg(vllm:num_requests_running{app=\"vllm\"})",
        "quantile_over_time(0.9, vllm:num_requests_running[1m])",
    );
    assert_ne!(scaler, SCALER);
    let (code, _, stderr, report) = run(&scaler, &["--scale", "0.1"]);
    assert_eq!(code, 2, "stderr: {stderr}");
    assert!(
        stderr.contains("unsupported PromQL construct function \"quantile_over_time\""),
        "{stderr}"
    );
    assert!(report.is_none());
}

#[test]
fn an_unknown_comparator_is_refused() {
    let (code, _, stderr, _) = run(SCALER, &["--compare", "hpa,vpa"]);
    assert_eq!(code, 2, "stderr: {stderr}");
    assert!(stderr.contains("unknown comparator \"vpa\""), "{stderr}");
}

/// The replay variant `bench/quality/variants/drain.yaml` (docs/examples/vllm.yaml plus
/// `scaleDown.drain`) and the same scaler without the drain: deleted pods lose what they hold at
/// once (`--termination-grace-seconds 0`, vLLM's default on SIGTERM), so the plain scale-down
/// drops requests and the drained one drops none.
#[test]
fn the_drain_variant_drops_nothing_where_the_plain_scale_down_drops_requests() {
    let variant = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("bench/quality/variants/drain.yaml"),
    )
    .expect("the drain variant");
    let plain: String = {
        let cut = variant
            .find("    # Take the pods to remove")
            .expect("the drain block");
        variant[..cut].to_owned()
    };
    assert!(!plain.contains("drain:") && variant.contains("drainSeconds"));
    let args = ["--scale", "0.5", "--seed", "3"];
    let (code, _, stderr, plain_report) = run(&plain, &args);
    assert_eq!(code, 0, "stderr: {stderr}");
    let (code, _, stderr, drained_report) = run(&variant, &args);
    assert_eq!(code, 0, "stderr: {stderr}");
    let figure = |r: &Option<serde_json::Value>, key: &str| {
        r.as_ref().expect("report written")["policies"]["llmscaler"][key]
            .as_f64()
            .expect("a number")
    };
    assert_eq!(
        r_grace(&plain_report),
        0.0,
        "the default termination grace is 0"
    );
    assert!(
        figure(&plain_report, "scale_events") > 0.0,
        "the fleet scales"
    );
    assert!(
        figure(&plain_report, "requests_dropped") > 0.0,
        "a plain scale-down kills what the deleted pods hold"
    );
    assert_eq!(figure(&drained_report, "requests_dropped"), 0.0);
    assert!(figure(&drained_report, "scale_events") > 0.0);
}

fn r_grace(report: &Option<serde_json::Value>) -> f64 {
    report.as_ref().expect("report")["termination_grace_seconds"]
        .as_f64()
        .expect("a number")
}

/// `SCALER` with `running` and `waiting` as vLLM runtime signals (docs/signals.md) instead of
/// `avg(...)` queries, plus the `extra` metric entries.
fn with_runtime_signals(extra: &str) -> String {
    let signals = "  - name: running
    runtime: vllm
    signal: running
    scrapeIntervalSeconds: 15
    target: \"24\"
  - name: waiting
    runtime: vllm
    signal: waiting
    scrapeIntervalSeconds: 15
    target: \"4\"
";
    let start = SCALER.find("  - name: running").expect("metrics");
    let end = SCALER.find("  scaleDown:").expect("scaleDown");
    format!("{}{signals}{extra}{}", &SCALER[..start], &SCALER[end..])
}

fn llmscaler_of(report: &serde_json::Value) -> (f64, i64) {
    let p = &report["policies"]["llmscaler"];
    (
        p["replica_seconds"].as_f64().expect("replica_seconds"),
        p["scale_events"].as_i64().expect("scale_events"),
    )
}

#[test]
fn runtime_signals_read_per_ready_pod_replay_like_the_equivalent_queries() {
    let args = &["--scale", "1", "--seed", "7", "--compare", "ideal"];
    let (code, _, stderr, queries) = run(SCALER, args);
    assert_eq!(code, 0, "stderr: {stderr}");
    let (code, _, stderr, signals) = run(&with_runtime_signals(""), args);
    assert_eq!(code, 0, "stderr: {stderr}");
    // The replay scrapes only Ready pods, every sample fresh: the average over the Ready pods
    // that report is the fleet average, so the runs match (the `or vector(0)` of the query form
    // only differs at zero pods, which minReplicas 1 never reaches).
    let (queries, signals) = (queries.expect("report"), signals.expect("report"));
    println!(
        "queries {:?}, runtime signals {:?}",
        llmscaler_of(&queries),
        llmscaler_of(&signals)
    );
    assert!(
        llmscaler_of(&queries).1 > 0,
        "the run must scale for the comparison to mean something"
    );
    assert_eq!(llmscaler_of(&queries), llmscaler_of(&signals));
}

#[test]
fn a_ttft_guardrail_above_target_holds_and_raises() {
    let args = &["--scale", "0.3", "--seed", "7", "--compare", "ideal"];
    let (code, _, stderr, base) = run(&with_runtime_signals(""), args);
    assert_eq!(code, 0, "stderr: {stderr}");
    // A 10 ms P90 objective is above target whenever a pod served a request in the window:
    // the guardrail holds every scale-down then, and between requests (NaN) it does nothing.
    let guard = "  - name: ttft
    runtime: vllm
    signal: ttftP90
    role: Guardrail
    scrapeIntervalSeconds: 15
    target: \"0.01\"
";
    let (code, _, stderr, guarded) = run(&with_runtime_signals(guard), args);
    assert_eq!(code, 0, "stderr: {stderr}");
    let (base, guarded) = (
        llmscaler_of(&base.expect("report")),
        llmscaler_of(&guarded.expect("report")),
    );
    println!("without guardrail {base:?}, with {guarded:?}");
    assert!(
        guarded.0 > base.0,
        "a guardrail above target holds and raises: {guarded:?} vs {base:?}"
    );
}

#[test]
fn the_capacity_recommender_is_replayed_and_the_hpa_can_run_another_scalers_metrics() {
    // The capacity recommender next to one queue metric; the HPA runs SCALER's metrics.
    let capacity = "apiVersion: autoscaling.modelsphere.dev/v1alpha1
kind: LLMScaler
metadata: {name: chat, namespace: inference}
spec:
  targetRef: {apiVersion: apps/v1, kind: Deployment, name: vllm}
  serverAddress: http://127.0.0.1:9090
  minReplicas: 1
  maxReplicas: 16
  capacity:
    arrivalRateQuery: sum(rate(vllm:request_success_total{app=\"vllm\"}[30s]))
    replicaRequestsPerSecond: \"4.5\"
  metrics:
  - name: waiting
    query: avg(vllm:num_requests_waiting{app=\"vllm\"}) or vector(0)
    target: \"8\"
  scaleDown:
    stabilizationWindowSeconds: 300
  startup: {initialSeconds: 90, countStartingReplicas: true}
";
    let dir = tempfile::tempdir().expect("temp dir");
    let metric_only = dir.path().join("metric-only.yaml");
    std::fs::write(&metric_only, SCALER).expect("write scaler");
    let metric_only = metric_only.to_string_lossy().into_owned();
    let args = [
        "--scale",
        "0.3",
        "--seed",
        "7",
        "--initial-replicas",
        "2",
        "--compare",
        "hpa",
    ];
    let (code, _, stderr, with) = run(
        capacity,
        &[&args[..], &["--comparators-scaler", metric_only.as_str()]].concat(),
    );
    assert_eq!(code, 0, "stderr: {stderr}");
    let (code, _, stderr, alone) = run(SCALER, &args);
    assert_eq!(code, 0, "stderr: {stderr}");
    let (with, alone) = (with.expect("report"), alone.expect("report"));
    // The HPA ran SCALER's metrics in both runs: the same figures.
    assert_eq!(with["policies"]["hpa"], alone["policies"]["hpa"]);
    // The scaler itself is the capacity one: not the metric-only scaler's figures.
    assert_ne!(
        with["policies"]["llmscaler"],
        alone["policies"]["llmscaler"]
    );
    let slo = with["policies"]["llmscaler"]["slo_attainment"]
        .as_f64()
        .expect("a share");
    assert!(slo > 0.9, "the capacity scaler serves the trace: {slo}");
}

/// `--flash-crowd` (issue 27): arrivals ×3 for 300 s at a seeded start, reported; the same seed
/// gives the same start, and the crowd adds about twice the window's requests.
#[test]
fn a_flash_crowd_adds_a_seeded_burst_and_is_reported() {
    let args = ["--scale", "0.3", "--seed", "7"];
    let (code, _, stderr, plain) = run(SCALER, &args);
    assert_eq!(code, 0, "stderr: {stderr}");
    let plain = plain.expect("report");
    let crowd_args = ["--scale", "0.3", "--seed", "7", "--flash-crowd"];
    let (code, stdout, stderr, crowd) = run(SCALER, &crowd_args);
    assert_eq!(code, 0, "stderr: {stderr}");
    assert!(
        stdout.contains("flash crowd: arrivals x3 for 300 s"),
        "{stdout}"
    );
    let crowd = crowd.expect("report");
    let start = crowd["flash_crowd"]["start_seconds"]
        .as_f64()
        .expect("start");
    assert!(start >= 0.0 && start < crowd["trace_seconds"].as_f64().expect("t"));
    assert_eq!(crowd["flash_crowd"]["factor"], 3.0);
    let (before, after) = (
        plain["requests"].as_u64().expect("n"),
        crowd["requests"].as_u64().expect("n"),
    );
    // 0.3 × ~5.5 req/s over 300 s ≈ 500 requests in the window, doubled by the crowd.
    assert!(after > before + 300, "{before} -> {after}");
    let (_, _, _, again) = run(SCALER, &crowd_args);
    assert_eq!(again.expect("report")["flash_crowd"], crowd["flash_crowd"]);
    // A pinned start.
    let pinned = [
        "--scale",
        "0.3",
        "--flash-crowd",
        "--flash-crowd-start",
        "600",
    ];
    let (code, _, stderr, pinned) = run(SCALER, &pinned);
    assert_eq!(code, 0, "stderr: {stderr}");
    assert_eq!(
        pinned.expect("report")["flash_crowd"]["start_seconds"],
        600.0
    );
}

#[test]
fn a_flash_crowd_needs_a_request_trace() {
    let dir = tempfile::tempdir().expect("temp dir");
    let scaler_path = dir.path().join("scaler.yaml");
    std::fs::write(&scaler_path, SCALER).expect("write scaler");
    let metrics = dir.path().join("m.csv");
    std::fs::write(&metrics, "t,running,waiting\n0,1,1\n").expect("write metrics");
    let out = Command::new(env!("CARGO_BIN_EXE_llmscaler"))
        .args(["simulate", "--scaler"])
        .arg(&scaler_path)
        .arg("--metrics")
        .arg(&metrics)
        .arg("--flash-crowd")
        .output()
        .expect("run llmscaler");
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("--flash-crowd"), "{stderr}");
}

/// `--model FILE` (docs/load-model.md#model-profiles): every policy replays the profile, the
/// report names it, and a slower model needs more replica-seconds from `ideal` on the same
/// requests; a bad key exits 2 naming it, a missing file exits 1.
#[test]
fn a_model_profile_is_replayed_by_every_policy_and_reported() {
    let args = ["--scale", "0.3", "--seed", "7", "--compare", "ideal"];
    let (code, _, stderr, default) = run(SCALER, &args);
    assert_eq!(code, 0, "stderr: {stderr}");
    let default = default.expect("report written");
    assert_eq!(default["model"]["maxNumSeqs"], 64, "{}", default["model"]);

    let slow = Path::new(env!("CARGO_MANIFEST_DIR")).join("bench/quality/models/slow-large.yaml");
    let slow = slow.to_str().expect("a UTF-8 path");
    let (code, _, stderr, slower) = run(SCALER, &[&args[..], &["--model", slow]].concat());
    assert_eq!(code, 0, "stderr: {stderr}");
    let slower = slower.expect("report written");
    assert_eq!(slower["model"]["maxNumSeqs"], 32, "{}", slower["model"]);
    assert_eq!(slower["model"]["prefillTokensPerSecond"], 3000.0);
    let ideal = |r: &serde_json::Value| {
        r["policies"]["ideal"]["replica_seconds"]
            .as_f64()
            .expect("number")
    };
    assert!(
        ideal(&slower) > 1.5 * ideal(&default),
        "a model at a quarter of the prefill rate and half the batch needs more replicas: {} vs {}",
        ideal(&slower),
        ideal(&default)
    );

    let dir = tempfile::tempdir().expect("temp dir");
    let typo = dir.path().join("typo.yaml");
    std::fs::write(&typo, "maxNumSeq: 8\n").expect("write profile");
    let (code, _, stderr, _) = run(
        SCALER,
        &[&args[..], &["--model", typo.to_str().expect("UTF-8")]].concat(),
    );
    assert_eq!(code, 2, "stderr: {stderr}");
    assert!(stderr.contains("maxNumSeq"), "the key is named: {stderr}");
    let missing = dir.path().join("none.yaml");
    let (code, _, stderr, _) = run(
        SCALER,
        &[&args[..], &["--model", missing.to_str().expect("UTF-8")]].concat(),
    );
    assert_eq!(code, 1, "stderr: {stderr}");
    assert!(stderr.contains("none.yaml"), "the file is named: {stderr}");
}

/// `spec.objective`'s estimate at every sync is in the report (`policies.llmscaler.capacity`,
/// docs/simulate/README.md#report), in sync order with a basis and a positive rate; a policy
/// without an objective has none.
#[test]
fn the_objectives_estimate_at_every_sync_is_reported() {
    let objective = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/examples/vllm-objective.yaml"),
    )
    .expect("read the example");
    let args = ["--scale", "0.3", "--seed", "7", "--compare", "hpa"];
    let (code, _, stderr, report) = run(&objective, &args);
    assert_eq!(code, 0, "stderr: {stderr}");
    let report = report.expect("report written");
    let points = report["policies"]["llmscaler"]["capacity"]
        .as_array()
        .expect("an array of estimates");
    assert!(points.len() > 10, "{points:?}");
    let times: Vec<f64> = points
        .iter()
        .map(|p| p["t_seconds"].as_f64().expect("t_seconds"))
        .collect();
    assert!(times.windows(2).all(|w| w[0] < w[1]), "{times:?}");
    for p in points {
        assert!(
            p["requests_per_second"].as_f64().expect("a rate") > 0.0,
            "{p}"
        );
        let basis = p["basis"].as_str().expect("a basis");
        assert!(
            [
                "saturated",
                "calibrated",
                "extrapolated",
                "lowerBound",
                "restored"
            ]
            .contains(&basis),
            "{p}"
        );
    }
    assert!(report["policies"]["hpa"].get("capacity").is_none());
}

/// The replayed pod template states the model's `maxNumSeqs` as `--max-num-seqs`
/// (docs/simulate/README.md, docs/objective.md#calibration): the objective extrapolates its line
/// to that limit (never to the KV cache's batch, `extrapolated`); with `--unstated-max-num-seqs`
/// it states none, the report says so, and the estimates differ.
#[test]
fn the_replayed_template_states_max_num_seqs_unless_told_not_to() {
    let objective = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/examples/vllm-objective.yaml"),
    )
    .expect("read the example");
    let args = ["--scale", "0.3", "--seed", "7"];
    let bases = |report: &serde_json::Value| -> Vec<(String, f64)> {
        report["policies"]["llmscaler"]["capacity"]
            .as_array()
            .expect("an array of estimates")
            .iter()
            .map(|p| {
                (
                    p["basis"].as_str().expect("a basis").to_owned(),
                    p["requests_per_second"].as_f64().expect("a rate"),
                )
            })
            .collect()
    };
    let (code, _, stderr, stated) = run(&objective, &args);
    assert_eq!(code, 0, "stderr: {stderr}");
    let stated = stated.expect("report written");
    assert_eq!(stated["stated_max_num_seqs"], 64);
    let (code, _, stderr, unstated) = run(
        &objective,
        &[&args[..], &["--unstated-max-num-seqs"]].concat(),
    );
    assert_eq!(code, 0, "stderr: {stderr}");
    let unstated = unstated.expect("report written");
    assert!(unstated["stated_max_num_seqs"].is_null(), "{unstated}");
    let (stated, unstated) = (bases(&stated), bases(&unstated));
    assert!(
        stated.iter().all(|(b, _)| b != "extrapolated"),
        "{stated:?}"
    );
    assert!(stated.iter().any(|(b, _)| b == "calibrated"), "{stated:?}");
    assert_ne!(stated, unstated);
}
