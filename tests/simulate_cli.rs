//! Runs the `llmscaler simulate` binary on small CSV files and compares the whole output, one
//! case per row of the worked-numbers table in `docs/scaling.md#worked-numbers`, plus the input
//! error cases.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // a test: a failed expectation fails it

use std::path::Path;
use std::process::Command;

use pretty_assertions::assert_eq;

const HEADER: &str = "apiVersion: autoscaling.modelsphere.dev/v1alpha1
kind: LLMScaler
metadata:
  name: vllm
  namespace: default
spec:
  targetRef: {apiVersion: apps/v1, kind: Deployment, name: vllm}
  serverAddress: http://127.0.0.1:9090
";

/// A Prometheus scaler on one metric `queue` with target 0.5.
fn one_metric(min: i32, max: i32, extra: &str) -> String {
    format!(
        "{HEADER}  minReplicas: {min}\n  maxReplicas: {max}\n  metrics:\n  - name: queue\n    query: avg(vllm:num_requests_waiting)\n    target: \"0.5\"\n{extra}"
    )
}

struct Output {
    code: i32,
    stdout: String,
    stderr: String,
}

fn simulate(scaler: &str, csv: &str, args: &[&str]) -> Output {
    let dir = tempfile::tempdir().expect("temp dir");
    let scaler_path = dir.path().join("scaler.yaml");
    let csv_path = dir.path().join("metrics.csv");
    std::fs::write(&scaler_path, scaler).expect("write scaler");
    std::fs::write(&csv_path, csv).expect("write csv");
    run(&scaler_path, &csv_path, args)
}

fn run(scaler: &Path, csv: &Path, args: &[&str]) -> Output {
    let output = Command::new(env!("CARGO_BIN_EXE_llmscaler"))
        .arg("simulate")
        .arg("--scaler")
        .arg(scaler)
        .arg("--metrics")
        .arg(csv)
        .args(args)
        .output()
        .expect("run llmscaler");
    Output {
        code: output.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&output.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
    }
}

fn ok(scaler: &str, csv: &str, args: &[&str]) -> String {
    let out = simulate(scaler, csv, args);
    assert_eq!(out.code, 0, "stderr: {}", out.stderr);
    out.stdout
}

#[test]
fn row_ready_1_value_085_gives_2() {
    let out = ok(
        &one_metric(1, 5, ""),
        "t,queue\n0,0.85\n15,0.85\n",
        &["--initial-replicas", "1"],
    );
    assert_eq!(
        out,
        "t,ready,desired,replicas,action,reason,queue\n\
         0,1,2,2,scale_up,ScaledUp,0.85\n\
         15,2,4,4,scale_up,ScaledUp,0.85\n"
    );
}

#[test]
fn row_spec_5_value_0_min_1_gives_1() {
    let out = ok(
        &one_metric(1, 5, ""),
        "t,queue\n0,0\n",
        &["--initial-replicas", "5"],
    );
    assert_eq!(
        out,
        "t,ready,desired,replicas,action,reason,queue\n0,5,1,1,scale_down,ScaledDown,0\n"
    );
}

#[test]
fn row_spec_2_value_0_min_0_gives_0_and_wakes_with_baseline_1() {
    let out = ok(
        &one_metric(0, 5, ""),
        "t,queue\n0,0\n15,0.85\n30,0.85\n",
        &["--initial-replicas", "2"],
    );
    assert_eq!(
        out,
        "t,ready,desired,replicas,action,reason,queue\n\
         0,2,0,0,scale_down,ScaledDown,0\n\
         15,0,2,2,scale_up,ScaledUp,0.85\n\
         30,2,4,4,scale_up,ScaledUp,0.85\n"
    );
}

#[test]
fn row_empty_second_metric_is_skipped() {
    let scaler = format!(
        "{HEADER}  minReplicas: 1\n  maxReplicas: 10\n  metrics:\n  - {{name: a, query: avg(a), target: \"0.8\"}}\n  - {{name: b, query: avg(b), target: \"0.5\"}}\n"
    );
    let out = ok(&scaler, "t,a,b\n0,0.9,\n", &["--initial-replicas", "3"]);
    assert_eq!(
        out,
        "t,ready,desired,replicas,action,reason,a,b\n0,3,4,4,scale_up,ScaledUp,0.9,\n"
    );
}

#[test]
fn row_non_finite_values_hold() {
    let scaler = format!(
        "{HEADER}  minReplicas: 1\n  maxReplicas: 10\n  metrics:\n  - {{query: avg(q), target: \"2\"}}\n"
    );
    let out = ok(
        &scaler,
        "t,metric0\n0,NaN\n15,+Inf\n30,-Inf\n45,\n",
        &["--initial-replicas", "4"],
    );
    assert_eq!(
        out,
        "t,ready,desired,replicas,action,reason,metric0\n\
         0,4,4,4,none,MetricsUnavailable,NaN\n\
         15,4,4,4,none,MetricsUnavailable,+Inf\n\
         30,4,4,4,none,MetricsUnavailable,-Inf\n\
         45,4,4,4,none,MetricsUnavailable,\n"
    );
}

#[test]
fn row_window_300_step_2() {
    let scaler = one_metric(
        1,
        5,
        "  scaleDown: {stabilizationWindowSeconds: 300, maxStepReplicas: 2}\n",
    );
    let out = ok(
        &scaler,
        "t,queue\n0,0\n15,0\n285,0\n300,0\n",
        &["--initial-replicas", "5"],
    );
    assert_eq!(
        out,
        "t,ready,desired,replicas,action,reason,queue\n\
         0,5,1,3,scale_down,StepCapped,0\n\
         15,3,3,3,none,ScaleDownStabilized,0\n\
         285,3,3,3,none,ScaleDownStabilized,0\n\
         300,3,1,1,scale_down,ScaledDown,0\n"
    );
}

#[test]
fn row_step_2_without_window_waits_to_settle() {
    let scaler = one_metric(1, 5, "  scaleDown: {maxStepReplicas: 2}\n");
    let out = ok(
        &scaler,
        "t,queue,ready\n0,0,\n15,0,5\n30,0,\n",
        &["--initial-replicas", "5"],
    );
    assert_eq!(
        out,
        "t,ready,desired,replicas,action,reason,queue\n\
         0,5,1,3,scale_down,StepCapped,0\n\
         15,5,1,3,deferred,ScaleDownNotSettled,0\n\
         30,3,1,1,scale_down,ScaledDown,0\n"
    );
}

#[test]
fn rows_custom_provider() {
    let custom = |min: i32, max: i32| {
        format!(
            "{HEADER}  metricProvider: Custom\n  customProvider: {{serviceId: llama}}\n  minReplicas: {min}\n  maxReplicas: {max}\n"
        )
    };
    let csv = "t,decision\n0,15\n15,\n";
    assert_eq!(
        ok(&custom(1, 20), csv, &["--initial-replicas", "1"]),
        "t,ready,desired,replicas,action,reason,decision\n\
         0,1,15,15,scale_up,ScaledUp,15\n\
         15,15,15,15,none,MetricsUnavailable,\n"
    );
    assert_eq!(
        ok(
            &custom(1, 5),
            "t,decision\n0,15\n",
            &["--initial-replicas", "1"]
        ),
        "t,ready,desired,replicas,action,reason,decision\n0,1,5,5,scale_up,ScaledUp,15\n"
    );
    assert_eq!(
        ok(
            &custom(2, 20),
            "t,decision\n0,0\n",
            &["--initial-replicas", "4"]
        ),
        "t,ready,desired,replicas,action,reason,decision\n0,4,2,2,scale_down,ScaledDown,0\n"
    );
}

#[test]
fn held_sync_above_max_is_clamped_to_max() {
    // maxReplicas 5, the fleet at 8, the only metric empty: the held 8 is clamped to 5.
    let out = ok(
        &one_metric(1, 5, ""),
        "t,queue\n0,\n15,\n",
        &["--initial-replicas", "8"],
    );
    assert_eq!(
        out,
        "t,ready,desired,replicas,action,reason,queue\n\
         0,8,5,5,scale_down,ScaledDown,\n\
         15,5,5,5,none,MetricsUnavailable,\n"
    );
}

#[test]
fn held_sync_is_recorded_in_the_window() {
    // Window 60 s, the fleet at 5: t=0 nothing measurable (hold at 5, recorded), t=10 the metric
    // reads 0: the held 5 is still inside the window, so the fleet stays until t=60.
    let scaler = one_metric(1, 10, "  scaleDown: {stabilizationWindowSeconds: 60}\n");
    let out = ok(
        &scaler,
        "t,queue\n0,\n10,0\n60,0\n",
        &["--initial-replicas", "5"],
    );
    assert_eq!(
        out,
        "t,ready,desired,replicas,action,reason,queue\n\
         0,5,5,5,none,MetricsUnavailable,\n\
         10,5,5,5,none,ScaleDownStabilized,0\n\
         60,5,1,1,scale_down,ScaledDown,0\n"
    );
}

#[test]
fn decisions_the_client_refuses_hold() {
    // Negative, non-integer and over-int32 decisions are refused by the decision-server client;
    // the replay holds on them as the operator does, and acts on the next valid one.
    let scaler = format!(
        "{HEADER}  metricProvider: Custom\n  customProvider: {{serviceId: llama}}\n  minReplicas: 1\n  maxReplicas: 20\n"
    );
    let out = ok(
        &scaler,
        "t,decision\n0,-1\n15,1.5\n30,2147483648\n45,3.0\n60,6\n",
        &["--initial-replicas", "4"],
    );
    assert_eq!(
        out,
        "t,ready,desired,replicas,action,reason,decision\n\
         0,4,4,4,none,MetricsUnavailable,-1\n\
         15,4,4,4,none,MetricsUnavailable,1.5\n\
         30,4,4,4,none,MetricsUnavailable,2147483648\n\
         45,4,3,3,scale_down,ScaledDown,3.0\n\
         60,3,6,6,scale_up,ScaledUp,6\n"
    );
    let out = simulate(&scaler, "t,decision\n0,four\n", &[]);
    assert_eq!(out.code, 2, "{}", out.stderr);
    assert!(
        out.stderr
            .contains("line 2, column \"decision\": \"four\" is not a number or empty"),
        "{}",
        out.stderr
    );
}

#[test]
fn a_rollout_defers_scale_down_not_scale_up() {
    // During a rollout (rollout = 1) a spike still scales up (2 -> 8); the drop to 0 waits for
    // the rollout to end, then goes down.
    let out = ok(
        &one_metric(1, 10, ""),
        "t,queue,rollout\n0,2,1\n15,0,1\n30,0,0\n",
        &["--initial-replicas", "2"],
    );
    assert_eq!(
        out,
        "t,ready,desired,replicas,action,reason,queue\n\
         0,2,8,8,scale_up,ScaledUp,2\n\
         15,8,1,8,deferred,RolloutInProgress,0\n\
         30,8,1,1,scale_down,ScaledDown,0\n"
    );
}

#[test]
fn startup_seconds_delay_readiness() {
    let out = ok(
        &one_metric(1, 10, ""),
        "t,queue\n0,1\n15,0.5\n30,0.5\n",
        &["--initial-replicas", "1", "--startup-seconds", "20"],
    );
    assert_eq!(
        out,
        "t,ready,desired,replicas,action,reason,queue\n\
         0,1,2,2,scale_up,ScaledUp,1\n\
         15,1,1,2,deferred,ScaleDownNotSettled,0.5\n\
         30,2,2,2,none,Steady,0.5\n"
    );
}

#[test]
fn refused_targets_exit_2_with_the_field_path() {
    for target in ["80%", "0", "-1", "NaN", "abc", ""] {
        let scaler = format!(
            "{HEADER}  minReplicas: 1\n  maxReplicas: 5\n  metrics:\n  - {{query: avg(a), target: \"1\"}}\n  - {{query: avg(b), target: \"{target}\"}}\n"
        );
        let out = simulate(&scaler, "t,metric0,metric1\n0,1,1\n", &[]);
        assert_eq!(out.code, 2, "target {target:?}: {}", out.stderr);
        assert!(
            out.stderr.contains("spec.metrics[1].target: "),
            "{target:?}: {}",
            out.stderr
        );
        assert!(out.stdout.is_empty());
    }
}

#[test]
fn malformed_csv_exits_2_naming_line_and_column() {
    let cases = [
        (
            "t,queue,bogus\n0,1,1\n",
            "line 1, column \"bogus\": unknown column",
        ),
        (
            "t,queue\n0,1\n15,one\n",
            "line 3, column \"queue\": \"one\" is not a number",
        ),
        (
            "t,queue\n0,1\n15,1\n10,1\n",
            "line 4, column \"t\": 10 is not after the previous row's 15",
        ),
        ("queue\n1\n", "line 1: missing column \"t\""),
    ];
    for (csv, expected) in cases {
        let out = simulate(&one_metric(1, 5, ""), csv, &[]);
        assert_eq!(out.code, 2, "{csv}");
        assert!(out.stderr.contains(expected), "{csv}: {}", out.stderr);
    }
}

#[cfg(feature = "plot")]
#[test]
fn plot_writes_an_svg() {
    let dir = tempfile::tempdir().expect("temp dir");
    let plot = dir.path().join("replay.svg");
    let plot_arg = plot.to_str().expect("utf-8 path");
    ok(
        &one_metric(1, 5, ""),
        "t,queue\n0,1\n15,0.2\n30,\n",
        &["--plot", plot_arg],
    );
    let svg = std::fs::read_to_string(&plot).expect("plot written");
    assert!(svg.starts_with("<svg"), "{}", &svg[..svg.len().min(80)]);
    assert!(svg.contains("spec.replicas") && svg.contains("queue"));
}

/// The operator's image build (`--no-default-features`) has no plotting: `--plot` fails with
/// exit 1 and says why, and writes no file.
#[cfg(not(feature = "plot"))]
#[test]
fn plot_without_the_plot_feature_fails_clearly() {
    let dir = tempfile::tempdir().expect("temp dir");
    let plot = dir.path().join("replay.png");
    let plot_arg = plot.to_str().expect("utf-8 path");
    let out = simulate(
        &one_metric(1, 5, ""),
        "t,queue\n0,1\n",
        &["--plot", plot_arg],
    );
    assert_eq!(out.code, 1, "stderr: {}", out.stderr);
    assert_eq!(
        out.stderr,
        format!(
            "error: {plot_arg}: this llmscaler was built without the `plot` feature (build with \
             `cargo build --features plot` to draw plots)\n"
        )
    );
    assert!(!plot.exists());
}

#[test]
fn a_schedule_floor_follows_local_time_across_a_dst_change() {
    // Europe/Berlin springs forward on 2026-03-29 at 02:00. The floor of 4 holds from local
    // midnight (23:00 UTC the day before) to local noon (10:00 UTC after the change: 11 h).
    let scaler = one_metric(
        1,
        10,
        "  schedules:\n  - name: night-warm\n    start: \"0 0 * * *\"\n    end: \"0 12 * * *\"\n    timeZone: Europe/Berlin\n    minReplicas: 4\n",
    );
    let out = ok(
        &scaler,
        "t,queue\n0,0\n3599,0\n3600,0\n43199,0\n43200,0\n",
        &[
            "--initial-replicas",
            "1",
            "--start-time",
            "2026-03-28T22:00:00Z",
        ],
    );
    assert_eq!(
        out,
        "t,ready,desired,replicas,action,reason,queue\n\
         0,1,1,1,none,Steady,0\n\
         3599,1,1,1,none,Steady,0\n\
         3600,1,4,4,scale_up,ScaledUp,0\n\
         43199,4,4,4,none,Steady,0\n\
         43200,4,1,1,scale_down,ScaledDown,0\n"
    );
}

#[test]
fn the_scale_up_cap_limits_pods_per_period() {
    // At most 2 pods per 60 s: 1 -> 3 at once, held at 3 inside the period, 3 -> 5 once the
    // first change is a whole period old (HPA: changes strictly after now - period count).
    let scaler = one_metric(
        1,
        10,
        "  scaleUp:\n    policies:\n    - {type: Pods, value: 2, periodSeconds: 60}\n",
    );
    let out = ok(
        &scaler,
        "t,queue\n0,5\n15,5\n60,5\n61,5\n",
        &["--initial-replicas", "1"],
    );
    assert_eq!(
        out,
        "t,ready,desired,replicas,action,reason,queue\n\
         0,1,10,3,scale_up,ScaleUpLimited,5\n\
         15,3,10,3,none,ScaleUpLimited,5\n\
         60,3,10,5,scale_up,ScaleUpLimited,5\n\
         61,5,10,5,none,ScaleUpLimited,5\n"
    );
}

#[test]
fn the_tolerance_band_keeps_the_fleet_inside_it() {
    // Target 0.5, tolerance 0.1: 0.54 (ratio 1.08) keeps 4; 0.6 (ratio 1.2) scales to 5.
    let scaler = one_metric(1, 10, "  scaleUp: {tolerance: \"0.1\"}\n");
    let out = ok(
        &scaler,
        "t,queue\n0,0.54\n15,0.6\n",
        &["--initial-replicas", "4"],
    );
    assert_eq!(
        out,
        "t,ready,desired,replicas,action,reason,queue\n\
         0,4,4,4,none,Steady,0.54\n\
         15,4,5,5,scale_up,ScaledUp,0.6\n"
    );
}

fn two_metrics(min: i32, max: i32) -> String {
    format!(
        "{HEADER}  minReplicas: {min}\n  maxReplicas: {max}\n  metrics:\n  - {{name: a, query: avg(a), target: \"0.8\"}}\n  - {{name: b, query: avg(b), target: \"0.8\"}}\n"
    )
}

#[test]
fn row_one_metric_unmeasurable_never_lowers() {
    // ready 10, a unmeasurable (empty, NaN, negative), b recommends ceil(10 × 0.56 / 0.8) = 7:
    // stays 10; once a reads again (0.1 → 2), the fleet comes down to 7.
    let out = ok(
        &two_metrics(1, 20),
        "t,a,b\n0,,0.56\n15,NaN,0.56\n30,-1,0.56\n45,0.1,0.56\n",
        &["--initial-replicas", "10"],
    );
    assert_eq!(
        out,
        "t,ready,desired,replicas,action,reason,a,b\n\
         0,10,10,10,none,MetricsUnavailable,,0.56\n\
         15,10,10,10,none,MetricsUnavailable,NaN,0.56\n\
         30,10,10,10,none,MetricsUnavailable,-1,0.56\n\
         45,10,7,7,scale_down,ScaledDown,0.1,0.56\n"
    );
}

#[test]
fn row_one_metric_unmeasurable_still_raises() {
    let out = ok(
        &two_metrics(1, 10),
        "t,a,b\n0,0.9,\n",
        &["--initial-replicas", "3"],
    );
    assert_eq!(
        out,
        "t,ready,desired,replicas,action,reason,a,b\n0,3,4,4,scale_up,ScaledUp,0.9,\n"
    );
}

#[test]
fn row_negative_value_holds() {
    let out = ok(
        &one_metric(1, 10, ""),
        "t,queue\n0,-0.5\n",
        &["--initial-replicas", "4"],
    );
    assert_eq!(
        out,
        "t,ready,desired,replicas,action,reason,queue\n0,4,4,4,none,MetricsUnavailable,-0.5\n"
    );
}

#[test]
fn row_window_never_holds_above_max() {
    // Window 300 s, the fleet starts at 8 above maxReplicas 5 with a high reading: 5 at once,
    // and the window (which only ever saw 5) keeps it there, never above.
    let scaler = one_metric(1, 5, "  scaleDown: {stabilizationWindowSeconds: 300}\n");
    let out = ok(
        &scaler,
        "t,queue\n0,4\n15,4\n",
        &["--initial-replicas", "8"],
    );
    assert_eq!(
        out,
        "t,ready,desired,replicas,action,reason,queue\n\
         0,8,5,5,scale_down,ScaledDown,4\n\
         15,5,5,5,none,Steady,4\n"
    );
}
