use llmscaler_api::{LLMScaler, apply_defaults};

use super::*;
use crate::engine::{MetricInput, Record};

fn spec(extra: &str) -> LLMScalerSpec {
    let yaml = format!(
        "apiVersion: autoscaling.modelsphere.dev/v1alpha1
kind: LLMScaler
metadata: {{name: s, namespace: ns}}
spec:
  targetRef: {{apiVersion: apps/v1, kind: Deployment, name: vllm}}
  serverAddress: http://prometheus:9090
  minReplicas: 1
  maxReplicas: 5
  metrics:
  - {{name: waiting, query: avg(w), target: \"2\"}}
{extra}"
    );
    let scaler: LLMScaler = serde_yaml::from_str(&yaml).expect("scaler");
    let mut spec = scaler.spec;
    apply_defaults(&mut spec);
    spec
}

fn target(spec_replicas: i32) -> TargetView<'static> {
    TargetView {
        kind: "Deployment",
        name: "vllm",
        observed: Observation {
            spec_replicas,
            ready_replicas: spec_replicas,
            rollout_in_progress: false,
        },
    }
}

fn signal(value: Result<f64, &str>) -> Signal<String> {
    Signal::Metrics(vec![MetricInput {
        guardrail: false,
        name: "waiting".into(),
        target: "2".into(),
        value: value.map_err(str::to_owned),
    }])
}

fn now() -> Timestamp {
    "2026-12-01T12:00:00Z".parse().expect("time")
}

#[test]
fn a_held_scaler_says_nothing_was_measurable_and_what_would_change_it() {
    let e = explain(
        &spec(""),
        &target(3),
        &signal(Err("no data")),
        &History::default(),
        now(),
    );
    assert!(e.held);
    assert!(
        e.text
            .contains("waiting: skipped, never read as 0: no data"),
        "{}",
        e.text
    );
    assert!(
        e.text
            .contains("nothing measurable: hold at spec.replicas 3"),
        "{}",
        e.text
    );
    assert!(
        e.text
            .contains("=> spec.replicas stays 3 (MetricsUnavailable)"),
        "{}",
        e.text
    );
    assert!(
        e.text
            .contains("next: when a metric becomes measurable again"),
        "{}",
        e.text
    );
}

#[test]
fn a_clamped_scaler_names_the_bound() {
    let e = explain(
        &spec(""),
        &target(4),
        &signal(Ok(4.0)),
        &History::default(),
        now(),
    );
    assert!(
        e.text.contains("waiting: value 4 target 2 -> 8 replica(s)"),
        "{}",
        e.text
    );
    assert!(
        e.text
            .contains("3. clamp to [1, 5]: 5 (lowered to the ceiling 5)"),
        "{}",
        e.text
    );
    assert!(
        e.text.contains("=> spec.replicas 4 -> 5 (ScaledUp)"),
        "{}",
        e.text
    );
    assert_eq!(e.replicas, 5);
}

#[test]
fn a_window_held_scaler_says_when_the_maximum_expires() {
    let spec = spec("  scaleDown: {stabilizationWindowSeconds: 300}\n");
    // A recommendation of 5 made 100 s ago holds the fleet until 200 s from now.
    let history = History::from_records(vec![Record {
        at_ms: now().as_millisecond() - 100_000,
        replicas: 5,
    }]);
    let e = explain(&spec, &target(5), &signal(Ok(0.0)), &history, now());
    assert!(
        e.text.contains(
            "4. stabilization window 300 s: maximum 5 holds until 2026-12-01T12:03:20Z (in 200 s)"
        ),
        "{}",
        e.text
    );
    assert!(
        e.text
            .contains("=> spec.replicas stays 5 (ScaleDownStabilized)"),
        "{}",
        e.text
    );
    assert!(
        e.text
            .contains("next: a scale-down at 2026-12-01T12:03:20Z (in 200 s)"),
        "{}",
        e.text
    );
}

#[test]
fn a_schedule_floor_shows_in_the_clamp() {
    let spec = spec(
        "  schedules:\n  - {name: warm, start: \"0 8 * * *\", durationSeconds: 43200, minReplicas: 4}\n",
    );
    let e = explain(
        &spec,
        &target(2),
        &signal(Ok(0.0)),
        &History::default(),
        now(),
    );
    assert!(
        e.text
            .contains("3. clamp to [4, 5] with schedules warm: 4 (raised to the floor 4)"),
        "{}",
        e.text
    );
}
