//! The controller's pure rules without a cluster: claim on first contact, the re-assert throttle,
//! contest detection and the ownership shown in `ReplicasContested`, on a substituted clock.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use k8s_openapi::jiff::Timestamp;
use kube::api::DynamicObject;
use llmscaler_api::names::{ConditionType, Reason};
use llmscaler_api::{LLMScaler, LLMScalerStatus};
use serde_json::json;

use super::*;
use crate::controller::target::state_of;
use crate::engine::clock::{Clock, ManualClock};
use crate::engine::{MetricInput, Signal};

const PERIOD_MS: i64 = 15_000;

fn scaler(previous: Option<(Reason, bool)>) -> LLMScaler {
    let mut scaler: LLMScaler = serde_json::from_value(json!({
        "apiVersion": "autoscaling.modelsphere.dev/v1alpha1", "kind": "LLMScaler",
        "metadata": {"name": "s", "namespace": "ns", "uid": "u1", "generation": 1},
        "spec": {
            "targetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "vllm"},
            "serverAddress": "http://prometheus:9090",
            "minReplicas": 1, "maxReplicas": 10,
            "metrics": [{"query": "avg(w)", "target": "2"}]
        }
    }))
    .expect("scaler");
    if let Some((reason, status)) = previous {
        scaler.status = Some(LLMScalerStatus {
            conditions: Some(vec![Condition {
                type_: ConditionType::ReplicasContested.as_str().to_owned(),
                status: if status { "True" } else { "False" }.to_owned(),
                reason: reason.as_str().to_owned(),
                message: "earlier".to_owned(),
                observed_generation: Some(1),
                last_transition_time: Time(k8s_openapi::jiff::Timestamp::UNIX_EPOCH),
            }]),
            ..LLMScalerStatus::default()
        });
    }
    scaler
}

/// A Deployment at `replicas` (all ready) whose `spec.replicas` is owned by `managers`.
fn target(replicas: i32, managers: &[&str]) -> TargetState {
    let managed: Vec<_> = managers
        .iter()
        .enumerate()
        .map(|(i, m)| {
            json!({"manager": m, "operation": "Apply", "fieldsType": "FieldsV1",
                   "time": format!("2026-01-01T00:0{i}:00Z"),
                   "fieldsV1": {"f:spec": {"f:replicas": {}}}})
        })
        .collect();
    let object: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": "vllm", "namespace": "ns", "generation": 1, "managedFields": managed},
        "spec": {"replicas": replicas},
        "status": {"observedGeneration": 1, "replicas": replicas, "updatedReplicas": replicas,
                   "readyReplicas": replicas}
    }))
    .expect("object");
    state_of(object, "Deployment")
}

/// Queue length `value` against target 2 (so `ready * value / 2` replicas), or nothing.
fn signal(value: Option<f64>) -> Signal<String> {
    Signal::Metrics(vec![MetricInput {
        guardrail: false,
        name: "metric0".to_owned(),
        target: "2".to_owned(),
        value: value.ok_or_else(|| "no data".to_owned()),
    }])
}

#[test]
fn claims_once_on_first_contact_then_only_when_due() {
    let clock = ManualClock::at_ms(1_700_000_000_000);
    let scaler = scaler(None);
    let spec = scaler.spec.clone();
    let mut state = ScalerState::default();
    /// (advance ms, target owners, value) -> write (from, to)
    type Row<'a> = (i64, &'a [&'a str], Option<f64>, Option<(i32, i32)>);
    let table: [Row<'_>; 6] = [
        (0, &["helm"], Some(2.0), Some((3, 3))), // first contact: claim the unchanged value
        (5_000, &["helm"], Some(2.0), None),     // not owned yet, throttled
        (10_000, &["helm"], None, None),         // holding asserts nothing
        (0, &["helm"], Some(2.0), Some((3, 3))), // 15 s later: claim again
        (15_000, &["llmscaler", "helm"], Some(2.0), None), // owned (shared): nothing to do
        (1, &["llmscaler"], Some(4.0), Some((3, 6))), // a change is written at once
    ];
    for (i, (advance, owners, value, want)) in table.into_iter().enumerate() {
        clock.advance_ms(advance);
        let plan = decide(
            &scaler,
            &spec,
            &target(3, owners),
            &signal(value),
            false,
            &mut state,
            clock.now().as_millisecond(),
            PERIOD_MS,
        );
        assert_eq!(plan.write.map(|w| (w.from, w.to)), want, "row {i}");
        assert_eq!(plan.contested_by, None, "row {i}: never claimed before");
    }
}

#[test]
fn a_contest_is_detected_reasserted_once_per_period_and_remembered() {
    let clock = ManualClock::at_ms(1_700_000_000_000);
    let owned_before = scaler(Some((Reason::OwnedByLLMScaler, false)));
    let spec = owned_before.spec.clone();
    let mut state = ScalerState::default();
    let taken = target(1, &["kubectl-client-side-apply"]);
    let now = clock.now().as_millisecond();
    let plan = decide(
        &owned_before,
        &spec,
        &taken,
        &signal(Some(4.0)),
        false,
        &mut state,
        now,
        PERIOD_MS,
    );
    assert_eq!(
        plan.contested_by.as_deref(),
        Some("kubectl-client-side-apply")
    );
    assert_eq!(plan.write.as_ref().map(|w| (w.from, w.to)), Some((1, 2)));
    assert_eq!(state.contest.last_contest_ms, Some(now));
    assert_eq!(
        ownership(
            &plan,
            &owned_before,
            &taken,
            &state,
            &WriteOutcome::Wrote,
            now
        ),
        Ownership::Contested("kubectl-client-side-apply".to_owned())
    );

    // The other manager writes 3 again right away: no write war inside one sync period.
    clock.advance_ms(1_000);
    let again = target(3, &["kubectl-client-side-apply"]);
    let now = clock.now().as_millisecond();
    let plan = decide(
        &owned_before,
        &spec,
        &again,
        &signal(Some(2.0)),
        false,
        &mut state,
        now,
        PERIOD_MS,
    );
    assert_eq!(plan.write, None, "re-assert throttled");

    // Back in our hands: the contest stays visible (recent) for five minutes.
    let contested_now = scaler(Some((Reason::OtherFieldManager, true)));
    let ours = target(3, &["llmscaler"]);
    for (advance, recent) in [(60_000, true), (240_000, false)] {
        clock.advance_ms(advance);
        let now = clock.now().as_millisecond();
        let plan = decide(
            &contested_now,
            &spec,
            &ours,
            &signal(Some(2.0)),
            false,
            &mut state,
            now,
            PERIOD_MS,
        );
        let shown = ownership(
            &plan,
            &contested_now,
            &ours,
            &state,
            &WriteOutcome::NotNeeded,
            now,
        );
        assert_eq!(
            matches!(shown, Ownership::RecentlyContested(_)),
            recent,
            "{advance} ms later: {shown:?}"
        );
    }
}

#[test]
fn ownership_before_any_write_is_not_claimed() {
    let scaler = scaler(None);
    let plan = Plan {
        decision: crate::engine::decide(
            &Policy::from_spec(&scaler.spec),
            &target(2, &[]).observation(),
            &signal(None),
            &mut History::default(),
            0,
        ),
        write: None,
        contested_by: None,
        history: (History::default(), PERIOD_MS),
        acting: Acting::Active,
        active_schedules: Vec::new(),
        bounds: (1, 10),
        woken: false,
        competitor: None,
    };
    let state = ScalerState::default();
    let unowned = target(2, &["helm"]);
    assert_eq!(
        ownership(
            &plan,
            &scaler,
            &unowned,
            &state,
            &WriteOutcome::NotNeeded,
            0
        ),
        Ownership::NotClaimed
    );
    assert_eq!(
        ownership(&plan, &scaler, &unowned, &state, &WriteOutcome::Wrote, 0),
        Ownership::Owned
    );
}

#[test]
fn the_history_comes_back_from_status_shifted_later() {
    let clock = ManualClock::at_ms(1_700_000_000_000);
    let mut scaler = scaler(None);
    scaler.spec.scale_down =
        Some(serde_json::from_value(json!({"stabilizationWindowSeconds": 60})).expect("scaleDown"));
    let spec = scaler.spec.clone();
    // Status says 6 replicas were recommended 50 s ago: with the 15 s refresh shift the record is
    // restored as 35 s old, so it still holds the fleet at 6 for 25 s, not 10.
    let recorded = Timestamp::from_millisecond(clock.now().as_millisecond() - 50_000).expect("ts");
    scaler.status = Some(LLMScalerStatus {
        recommendations: Some(vec![llmscaler_api::RecommendationRecord {
            time: Time(recorded),
            replicas: 6,
        }]),
        ..LLMScalerStatus::default()
    });
    let mut state = ScalerState::default();
    for (advance, want) in [(0, 6), (20_000, 6), (5_000, 1)] {
        clock.advance_ms(advance);
        let plan = decide(
            &scaler,
            &spec,
            &target(6, &["llmscaler"]),
            &signal(Some(0.0)),
            false,
            &mut state,
            clock.now().as_millisecond(),
            PERIOD_MS,
        );
        assert_eq!(plan.decision.desired, want, "{advance} ms later");
    }
}

/// One sync of `scaler` at t = 1 s with fresh memory, its target at `replicas` owned by
/// llmscaler, the metric at `value`, the activation waking or not.
fn once(scaler: &LLMScaler, replicas: i32, value: Option<f64>, wake: bool) -> Plan<String> {
    decide(
        scaler,
        &scaler.spec,
        &target(replicas, &["llmscaler"]),
        &signal(value),
        wake,
        &mut ScalerState::default(),
        1_000,
        PERIOD_MS,
    )
}

#[test]
fn without_a_window_old_records_are_dropped() {
    let mut scaler = scaler(None);
    scaler.status = Some(LLMScalerStatus {
        recommendations: Some(vec![llmscaler_api::RecommendationRecord {
            time: Time(Timestamp::UNIX_EPOCH),
            replicas: 6,
        }]),
        ..LLMScalerStatus::default()
    });
    let plan = once(&scaler, 6, Some(0.0), false);
    assert!(plan.history.0.records().is_empty());
    assert_eq!(plan.decision.replicas, 1, "no window: straight down");
}

#[test]
fn the_activation_signal_wakes_a_fleet_at_zero_only() {
    let mut scaler = scaler(None);
    scaler.spec.min_replicas = 0;
    scaler.spec.activation = Some(llmscaler_api::Activation {
        query: "sum(gateway_queue)".into(),
        threshold: Some("0.5".into()),
    });
    let spec = scaler.spec.clone();
    let value = |v: f64| Some(Ok::<f64, String>(v));
    // (activation value) -> wakes
    assert!(wakes(&spec, value(1.0).as_ref()));
    assert!(
        !wakes(&spec, value(0.5).as_ref()),
        "not above the threshold"
    );
    assert!(!wakes(&spec, value(f64::NAN).as_ref()));
    assert!(!wakes(&spec, Some(&Err("timeout".to_owned()))));
    assert!(!wakes::<String>(&spec, None));
    // At zero with every per-pod metric empty (no pods, no series): woken to 1.
    let plan = once(&scaler, 0, None, true);
    assert!(plan.woken);
    assert_eq!(plan.write.map(|w| (w.from, w.to)), Some((0, 1)));
    // Not woken: held at zero.
    let plan = once(&scaler, 0, None, false);
    assert_eq!(plan.decision.replicas, 0);
    // Above zero the activation does nothing (the metrics decide).
    let plan = once(&scaler, 2, Some(0.0), true);
    assert!(!plan.woken);
    assert_eq!(plan.decision.replicas, 0, "the metrics scale 2 -> 0");
}
