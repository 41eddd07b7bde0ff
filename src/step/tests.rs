//! The step without a cluster: claim on first contact, the re-assert throttle, contest
//! detection, the restored history, activation, the drain's transitions (start, wait, finish,
//! cancel, pause), on a substituted clock; and the differential test of the operator's step
//! against the `simulate --requests` replay.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use k8s_openapi::jiff::Timestamp;
use kube::api::DynamicObject;
use llmscaler_api::names::{ConditionType, ROTATION_IN, ROTATION_OUT, Reason};
use llmscaler_api::{LLMScaler, LLMScalerSpec, LLMScalerStatus};
use serde_json::json;

use super::*;
use crate::controller::target::state_of;
use crate::engine::clock::{Clock, ManualClock};
use crate::engine::conditions::{Ownership, WriteOutcome};
use crate::engine::{MetricInput, Signal};

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
                last_transition_time: Time(Timestamp::UNIX_EPOCH),
            }]),
            ..LLMScalerStatus::default()
        });
    }
    scaler
}

/// A Deployment at `replicas` (all ready) whose `spec.replicas` is owned by `managers`, as the
/// controller reads it.
fn deployment(replicas: i32, managers: &[&str]) -> crate::controller::target::TargetState {
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
        "spec": {"replicas": replicas, "selector": {"matchLabels": {"app": "vllm"}}},
        "status": {"observedGeneration": 1, "replicas": replicas, "updatedReplicas": replicas,
                   "readyReplicas": replicas}
    }))
    .expect("object");
    state_of(object, "Deployment")
}

fn target(replicas: i32, managers: &[&str]) -> Target {
    crate::controller::target_view(&deployment(replicas, managers))
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

fn observation<'a>(
    scaler: &'a LLMScaler,
    target: Target,
    value: Option<f64>,
    now_ms: i64,
) -> Observation<'a, String> {
    Observation {
        now_ms,
        target,
        signal: signal(value),
        capacity: None,
        objective: None,
        activation: None,
        pods: Some(Ok(Vec::new())),
        in_flight: None,
        deletion_costs: None,
        activator: None,
        acting: Acting::of(scaler, &scaler.spec),
        competitor: None,
        status: scaler.status.as_ref(),
    }
}

#[test]
fn claims_once_on_first_contact_then_only_when_due() {
    let clock = ManualClock::at_ms(1_700_000_000_000);
    let scaler = scaler(None);
    let mut step = Scaler::new(&scaler.spec, None);
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
        let now = clock.now().as_millisecond();
        let plan = step.step(&observation(&scaler, target(3, owners), value, now));
        assert_eq!(plan.write.map(|w| (w.from, w.to)), want, "row {i}");
        assert_eq!(plan.contested_by, None, "row {i}: never claimed before");
    }
}

#[test]
fn a_contest_is_detected_reasserted_once_per_period_and_remembered() {
    let clock = ManualClock::at_ms(1_700_000_000_000);
    let owned_before = scaler(Some((Reason::OwnedByLLMScaler, false)));
    let mut step = Scaler::new(&owned_before.spec, None);
    let taken = deployment(1, &["kubectl-client-side-apply"]);
    let now = clock.now().as_millisecond();
    let plan = step.step(&observation(
        &owned_before,
        crate::controller::target_view(&taken),
        // 4 against the target asks 2 from 1 Ready: within the evidence bound (2 × 1).
        Some(4.0),
        now,
    ));
    assert_eq!(
        plan.contested_by.as_deref(),
        Some("kubectl-client-side-apply")
    );
    assert_eq!(plan.write.as_ref().map(|w| (w.from, w.to)), Some((1, 2)));
    assert_eq!(plan.last_contest_ms, Some(now));
    assert_eq!(
        crate::controller::report::ownership(
            &plan,
            &owned_before,
            &taken,
            &WriteOutcome::Wrote,
            now
        ),
        Ownership::Contested("kubectl-client-side-apply".to_owned())
    );

    // The other manager writes 3 again right away: no write war inside one sync period.
    clock.advance_ms(1_000);
    let now = clock.now().as_millisecond();
    let again = target(3, &["kubectl-client-side-apply"]);
    let plan = step.step(&observation(&owned_before, again, Some(2.0), now));
    assert_eq!(plan.write, None, "re-assert throttled");

    // Back in our hands: the contest stays visible (recent) for five minutes.
    let contested_now = scaler(Some((Reason::OtherFieldManager, true)));
    let ours = deployment(3, &["llmscaler"]);
    for (advance, recent) in [(60_000, true), (240_000, false)] {
        clock.advance_ms(advance);
        let now = clock.now().as_millisecond();
        let plan = step.step(&observation(
            &contested_now,
            crate::controller::target_view(&ours),
            Some(2.0),
            now,
        ));
        let shown = crate::controller::report::ownership(
            &plan,
            &contested_now,
            &ours,
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
    let unowned = deployment(2, &["helm"]);
    let plan = Scaler::new(&scaler.spec, None).step(&Observation {
        acting: Acting::Passive {
            reason: Reason::Paused,
            by: "test".to_owned(),
        },
        ..observation(&scaler, target(2, &["helm"]), None, 0)
    });
    assert_eq!(
        crate::controller::report::ownership(&plan, &scaler, &unowned, &WriteOutcome::NotNeeded, 0),
        Ownership::NotClaimed
    );
    assert_eq!(
        crate::controller::report::ownership(&plan, &scaler, &unowned, &WriteOutcome::Wrote, 0),
        Ownership::Owned
    );
}

#[test]
fn the_history_comes_back_from_status_shifted_later() {
    let clock = ManualClock::at_ms(1_700_000_000_000);
    let mut scaler = scaler(None);
    scaler.spec.scale_down =
        Some(serde_json::from_value(json!({"stabilizationWindowSeconds": 60})).expect("scaleDown"));
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
    let mut step = Scaler::new(&scaler.spec, scaler.status.as_ref());
    for (advance, want) in [(0, 6), (20_000, 6), (5_000, 1)] {
        clock.advance_ms(advance);
        let now = clock.now().as_millisecond();
        let plan = step.step(&observation(
            &scaler,
            target(6, &["llmscaler"]),
            Some(0.0),
            now,
        ));
        assert_eq!(plan.decision.desired, want, "{advance} ms later");
    }
}

#[test]
fn a_history_written_on_a_slower_clock_is_moved_later_by_the_estimated_skew() {
    let clock = ManualClock::at_ms(1_700_000_000_000);
    let mut scaler = scaler(None);
    scaler.spec.scale_down =
        Some(serde_json::from_value(json!({"stabilizationWindowSeconds": 60})).expect("scaleDown"));
    // The previous leader's clock ran 30 s behind this one: its record of 6, made 20 s ago in
    // real time, reads 50 s old here. Moved 30 s later (and by the 15 s refresh shift), it is
    // restored as 5 s old: it holds the fleet at 6 for 55 s from now, never less than the 40 s
    // it really has left. Without the move the fleet would drop after 25 s.
    let recorded = Timestamp::from_millisecond(clock.now().as_millisecond() - 50_000).expect("ts");
    scaler.status = Some(LLMScalerStatus {
        recommendations: Some(vec![llmscaler_api::RecommendationRecord {
            time: Time(recorded),
            replicas: 6,
        }]),
        ..LLMScalerStatus::default()
    });
    let run = |shift_ms: i64| {
        let clock = ManualClock::at_ms(clock.now().as_millisecond());
        let mut step =
            Scaler::new(&scaler.spec, scaler.status.as_ref()).status_written_behind_by(shift_ms);
        let mut first_lower = None;
        for second in 0..80 {
            let now = clock.now().as_millisecond();
            let plan = step.step(&observation(
                &scaler,
                target(6, &["llmscaler"]),
                Some(0.0),
                now,
            ));
            if plan.decision.desired < 6 && first_lower.is_none() {
                first_lower = Some(second);
            }
            clock.advance_ms(1_000);
        }
        first_lower
    };
    assert_eq!(
        run(0),
        Some(25),
        "without the estimate the window ends 15 s early"
    );
    assert_eq!(run(30_000), Some(55));
    // A writer whose clock ran ahead changes nothing (its times already lie later).
    assert_eq!(run(-30_000), run(0));
}

/// One sync of `scaler` at t = 1 s with fresh memory restored from its status, its target at
/// `replicas` owned by llmscaler, the metric at `value`, the activation value `activation`.
fn once(
    scaler: &LLMScaler,
    replicas: i32,
    value: Option<f64>,
    activation: Option<f64>,
) -> Plan<String> {
    Scaler::new(&scaler.spec, scaler.status.as_ref()).step(&Observation {
        activation: activation.map(Ok),
        ..observation(scaler, target(replicas, &["llmscaler"]), value, 1_000)
    })
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
    let plan = once(&scaler, 6, Some(0.0), None);
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
    // The step asks for the activation query at zero only.
    let step = Scaler::new(&spec, None);
    assert_eq!(
        step.reads(&target(0, &["llmscaler"]), "ns", 0)
            .activation
            .as_deref(),
        Some("sum(gateway_queue)")
    );
    assert_eq!(
        step.reads(&target(2, &["llmscaler"]), "ns", 0).activation,
        None
    );
    // At zero with every per-pod metric empty (no pods, no series): woken to 1.
    let plan = once(&scaler, 0, None, Some(1.0));
    assert!(plan.woken);
    assert_eq!(plan.write.map(|w| (w.from, w.to)), Some((0, 1)));
    // Not woken: held at zero.
    let plan = once(&scaler, 0, None, Some(0.0));
    assert_eq!(plan.decision.replicas, 0);
    // Above zero the activation does nothing (the metrics decide).
    let plan = once(&scaler, 2, Some(0.0), Some(1.0));
    assert!(!plan.woken);
    assert_eq!(plan.decision.replicas, 0, "the metrics scale 2 -> 0");
}

/// A drained scaler (drainSeconds 60) at 1..10 replicas, no window.
fn drained() -> LLMScaler {
    let mut scaler = scaler(None);
    scaler.spec.scale_down =
        Some(serde_json::from_value(json!({"drain": {"drainSeconds": 60}})).expect("scaleDown"));
    llmscaler_api::apply_defaults(&mut scaler.spec);
    scaler
}

fn pods(list: &[(&str, Option<&str>)]) -> Vec<Pod> {
    list.iter()
        .enumerate()
        .map(|(i, (name, rotation))| Pod {
            name: (*name).to_owned(),
            ready: true,
            created: i64::try_from(i).unwrap_or(0),
            deletion_cost: None,
            rotation: rotation.map(str::to_owned),
        })
        .collect()
}

fn rotation<E>(plan: &Plan<E>) -> Vec<(String, &'static str)> {
    plan.rotation().map(|(p, v)| (p.to_owned(), v)).collect()
}

#[test]
fn a_drain_starts_waits_for_idle_pods_then_lowers_exactly_them() {
    let scaler = drained();
    let mut step = Scaler::new(&scaler.spec, None);
    let three = pods(&[("a", Some("in")), ("b", Some("in")), ("c", Some("in"))]);
    let at = |now_ms, pods: Vec<Pod>, in_flight: Option<BTreeMap<String, f64>>| Observation {
        pods: Some(Ok(pods)),
        in_flight: in_flight.map(Ok),
        ..observation(&scaler, target(3, &["llmscaler"]), Some(2.0 / 3.0), now_ms)
    };
    // Load for one replica: the newest two leave rotation, spec.replicas stays.
    let plan = step.step(&at(0, three.clone(), None));
    assert_eq!(plan.decision.replicas, 1);
    assert_eq!(plan.write, None);
    assert_eq!(
        rotation(&plan),
        [("c".into(), ROTATION_OUT), ("b".into(), ROTATION_OUT)]
    );
    assert!(matches!(plan.outcome, WriteOutcome::Draining(_)));
    assert_eq!(
        step.drain().map(|d| d.victims.clone()),
        Some(vec!["c".into(), "b".into()])
    );
    // The step asks for their in-flight requests once the EndpointSlices settle.
    assert_eq!(
        step.reads(&target(3, &["llmscaler"]), "ns", 1_000)
            .in_flight,
        None
    );
    let (query, asked) = step
        .reads(&target(3, &["llmscaler"]), "ns", SETTLE_MS)
        .in_flight
        .expect("in-flight read");
    assert!(query.contains("vllm:num_requests_running"), "{query}");
    assert_eq!(asked, ["c", "b"]);
    // Still busy: wait (the status shows the requests in flight).
    let out = pods(&[("a", Some("in")), ("b", Some("out")), ("c", Some("out"))]);
    let busy = BTreeMap::from([("b".to_owned(), 0.0), ("c".to_owned(), 2.0)]);
    let plan = step.step(&at(15_000, out.clone(), Some(busy)));
    assert_eq!(plan.write, None);
    assert_eq!(plan.draining.as_ref().and_then(|d| d.in_flight), Some(2));
    // Idle: lower by exactly the drained pods, marking them.
    let idle = BTreeMap::from([("b".to_owned(), 0.0), ("c".to_owned(), 0.0)]);
    let plan = step.step(&at(30_000, out, Some(idle)));
    assert_eq!(plan.write.as_ref().map(|w| (w.from, w.to)), Some((3, 1)));
    let marks = plan.effects.iter().find_map(|e| match e {
        Effect::Marks(m) => Some(m.victims.clone()),
        _ => None,
    });
    assert_eq!(marks, Some(vec!["b".into(), "c".into()]));
    assert_eq!(plan.outcome, WriteOutcome::Wrote);
    assert_eq!(step.drain(), None);
}

#[test]
fn pausing_or_load_coming_back_puts_drained_pods_back() {
    let mut scaler = drained();
    let mut step = Scaler::new(&scaler.spec, None);
    let three = pods(&[("a", Some("in")), ("b", Some("in")), ("c", Some("in"))]);
    let plan = step.step(&Observation {
        pods: Some(Ok(three)),
        ..observation(&scaler, target(3, &["llmscaler"]), Some(2.0 / 3.0), 0)
    });
    assert_eq!(rotation(&plan).len(), 2);
    // Paused mid-drain: the drained pods go back, nothing is written.
    scaler.metadata.annotations = Some(BTreeMap::from([(
        llmscaler_api::names::PAUSED_ANNOTATION.to_owned(),
        "true".to_owned(),
    )]));
    let out = pods(&[("a", Some("in")), ("b", Some("out")), ("c", Some("out"))]);
    let mut paused = step.clone();
    let plan = paused.step(&Observation {
        pods: Some(Ok(out.clone())),
        ..observation(&scaler, target(3, &["llmscaler"]), Some(2.0 / 3.0), 15_000)
    });
    assert_eq!(
        rotation(&plan),
        [("c".into(), ROTATION_IN), ("b".into(), ROTATION_IN)]
    );
    assert_eq!(plan.write, None);
    assert_eq!(paused.drain(), None);
    // Active, with load back: the drained pods go back instead of new pods starting.
    scaler.metadata.annotations = None;
    let plan = step.step(&Observation {
        pods: Some(Ok(out)),
        ..observation(&scaler, target(3, &["llmscaler"]), Some(2.0), 15_000)
    });
    assert_eq!(
        rotation(&plan),
        [("c".into(), ROTATION_IN), ("b".into(), ROTATION_IN)]
    );
    assert!(
        plan.effects
            .iter()
            .any(|e| matches!(e, Effect::Event(ev) if ev.reason == Reason::DrainCancelled))
    );
}

#[test]
fn a_new_leader_takes_over_a_drain_from_the_pods_labels() {
    let mut scaler = drained();
    scaler.status = Some(
        serde_json::from_value(
            json!({"draining": {"pods": ["c"], "since": "1970-01-01T00:00:10Z"}}),
        )
        .expect("status"),
    );
    let mut step = Scaler::new(&scaler.spec, scaler.status.as_ref());
    let out = pods(&[("a", Some("in")), ("b", Some("in")), ("c", Some("out"))]);
    let plan = step.step(&Observation {
        pods: Some(Ok(out)),
        ..observation(&scaler, target(3, &["llmscaler"]), Some(4.0 / 3.0), 40_000)
    });
    assert!(
        plan.effects
            .iter()
            .any(|e| matches!(e, Effect::Event(ev) if ev.reason == Reason::DrainResumed))
    );
    assert_eq!(
        step.drain().map(|d| d.started_ms),
        Some(10_000),
        "the clock of the status"
    );
    assert_eq!(plan.write, None);
}

/// The spec of the differential test: every field that changes the walk is set.
fn differential_spec() -> LLMScalerSpec {
    let mut spec: LLMScalerSpec = serde_json::from_value(json!({
        "targetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "vllm"},
        "serverAddress": "http://prometheus:9090",
        "minReplicas": 0, "maxReplicas": 8, "syncPeriodSeconds": 15,
        "metrics": [{"name": "waiting", "query": "sum(vllm:num_requests_waiting{namespace=\"ns\"})", "target": "4"}],
        "activation": {"query": "vector(1)", "threshold": "0"},
        "schedules": [{"name": "warm", "start": "0 0 * * *", "durationSeconds": 90, "minReplicas": 2}],
        "startup": {"initialSeconds": 30},
        "capacity": {"arrivalRateQuery": "sum(rate(vllm:request_success_total{namespace=\"ns\"}[1m]))",
                     "replicaRequestsPerSecond": "4"},
        "scaleUp": {"policies": [{"type": "Pods", "value": 2, "periodSeconds": 30}]},
        "scaleDown": {"stabilizationWindowSeconds": 30, "drain": {"drainSeconds": 20}}
    }))
    .expect("spec");
    llmscaler_api::apply_defaults(&mut spec);
    spec
}

/// The same readings and clock through the operator's path (the target and its pods as the
/// controller reads them, [`crate::controller::target_view`] and
/// [`crate::controller::pod_cache::PodInfo::into_step`]) and through the `simulate --requests`
/// replay ([`crate::simulate::policies::LlmscalerPolicy`]): the same `spec.replicas` walk and
/// the same drain transitions, with every feature of the spec exercised.
#[test]
fn the_operator_and_the_replay_take_the_same_steps() {
    use crate::simulate::policies::LlmscalerPolicy;
    use crate::simulate::replay::{self, Settings};
    let spec = differential_spec();
    llmscaler_api::check_spec(&spec, &llmscaler_api::OperatorPolicy::default()).expect("valid");
    // 40 requests/s for 150 s, then quiet for 200 s.
    let requests: Vec<llmscaler_loadmodel::Request> = (0..6_000)
        .map(|i| llmscaler_loadmodel::Request {
            arrival_s: f64::from(i) / 40.0,
            prompt_tokens: 600,
            output_tokens: 150,
        })
        .collect();
    let settings = Settings {
        params: llmscaler_loadmodel::Params::default(),
        startup_ms: 30_000,
        scrape_interval_ms: 5_000,
        tail_ms: 200_000,
        labels: vec![("namespace".to_owned(), "ns".to_owned())],
    };
    let mut policy = LlmscalerPolicy::new(&spec)
        .expect("policy")
        .in_namespace("ns")
        .recording();
    replay::run(&requests, &settings, 0, &mut policy);
    let recorded = policy.recorded();
    assert!(recorded.len() > 20, "{} syncs", recorded.len());

    // Warm-started as the replay is (the run starts at 0 replicas).
    let mut operator =
        Scaler::new(&spec, None).with_history(crate::engine::History::from_records(vec![
            crate::engine::Record {
                at_ms: 0,
                replicas: 0,
            },
        ]));
    let (mut woken, mut scheduled, mut drained, mut held_up) = (false, false, false, false);
    for (i, sync) in recorded.iter().enumerate() {
        let seen = &sync.observed;
        // The target and the pods as the controller reads them.
        let mut object = deployment(seen.target.spec_replicas, &["llmscaler"]);
        object.ready_replicas = seen.target.ready_replicas;
        let pods = seen.pods.clone().map(|pods| {
            pods.map(|pods| {
                pods.into_iter()
                    .map(|p| {
                        crate::controller::pod_cache::PodInfo {
                            name: p.name,
                            ready: p.ready,
                            created: p.created,
                            deletion_cost: p.deletion_cost,
                            rotation: p.rotation,
                            terminating: false,
                        }
                        .into_step()
                    })
                    .collect()
            })
        });
        let observed = Observation {
            target: crate::controller::target_view(&object),
            pods,
            ..seen.clone()
        };
        let plan = operator.step(&observed);
        assert_eq!(
            plan.replicas_after(seen.target.spec_replicas),
            sync.replicas,
            "sync {i}"
        );
        let turned: Vec<(String, &str)> = plan.rotation().map(|(p, v)| (p.to_owned(), v)).collect();
        assert_eq!(turned, sync.rotation, "sync {i}: drain transitions");
        woken |= plan.woken;
        scheduled |= !plan.active_schedules.is_empty();
        drained |= matches!(plan.outcome, WriteOutcome::Draining(_));
        held_up |= plan.decision.reason == crate::engine::Reason::ScaleUpLimited;
    }
    let walk: Vec<i32> = recorded.iter().map(|s| s.replicas).collect();
    assert!(woken, "the activation woke the fleet: {walk:?}");
    assert!(scheduled, "a schedule was in force: {walk:?}");
    assert!(drained, "a scale-down drained first: {walk:?}");
    assert!(held_up, "the scale-up policy limited a step: {walk:?}");
    assert!(
        recorded
            .iter()
            .any(|s| s.rotation.iter().any(|(_, v)| *v == ROTATION_OUT)),
        "{walk:?}"
    );
}

/// A scaler holding requests at zero (`spec.scaleToZero.holdRequests`), min 0.
fn holding_scaler() -> LLMScaler {
    let mut scaler = scaler(None);
    scaler.spec.min_replicas = 0;
    scaler.spec.scale_to_zero = Some(llmscaler_api::ScaleToZero {
        hold_requests: Some(true),
        service: Some("vllm".into()),
        ..Default::default()
    });
    scaler
}

/// One step of a fresh `scaler` on a target at `spec`/`ready` replicas, metric `value`, the
/// activator holding `held` requests with the route `routed`.
fn route_step(
    scaler: &LLMScaler,
    (spec, ready): (i32, i32),
    value: Option<f64>,
    (held, routed): (u64, bool),
) -> Plan<String> {
    let mut step = Scaler::new(&scaler.spec, None);
    let mut seen = target(spec, &["llmscaler"]);
    seen.ready_replicas = ready;
    let mut observed = observation(scaler, seen, value, 1_700_000_000_000);
    observed.activator = Some(ActivatorView { held, routed });
    step.step(&observed)
}

fn routes(plan: &Plan<String>) -> Vec<(usize, bool)> {
    plan.effects
        .iter()
        .enumerate()
        .filter_map(|(i, e)| match e {
            Effect::ActivatorRoute { on } => Some((i, *on)),
            _ => None,
        })
        .collect()
}

#[test]
fn a_held_request_wakes_the_fleet_at_zero_and_the_route_stays_until_a_replica_is_ready() {
    let scaler = holding_scaler();
    // At zero, routed, one request held, no metric data (no pods): woken to 1, route kept.
    let plan = route_step(&scaler, (0, 0), None, (1, true));
    assert!(plan.woken);
    assert_eq!(plan.write.as_ref().map(|w| (w.from, w.to)), Some((0, 1)));
    assert_eq!(routes(&plan), []);
    // Nothing held: stays at zero.
    let plan = route_step(&scaler, (0, 0), None, (0, true));
    assert!(!plan.woken);
    assert_eq!(plan.decision.replicas, 0);
    // Held requests never wake without holdRequests.
    let mut off = holding_scaler();
    off.spec.scale_to_zero = None;
    assert!(!route_step(&off, (0, 0), None, (3, true)).woken);
    // Starting (1 wanted, none Ready): the route stays on.
    let plan = route_step(&scaler, (1, 0), Some(2.0), (0, true));
    assert_eq!(routes(&plan), []);
    // At zero but the route missing (a fresh scaler, or a failed write): on.
    let plan = route_step(&scaler, (0, 0), None, (0, false));
    assert_eq!(routes(&plan), [(0, true)]);
}

#[test]
fn the_route_goes_off_once_a_replica_is_ready_and_on_before_the_write_to_zero() {
    let scaler = holding_scaler();
    // One Ready replica with load: off, last.
    let plan = route_step(&scaler, (1, 1), Some(2.0), (0, true));
    assert_eq!(plan.decision.replicas, 1);
    let effects = plan.effects.len();
    assert_eq!(routes(&plan), [(effects - 1, false)]);
    // Off already: nothing.
    assert_eq!(
        routes(&route_step(&scaler, (1, 1), Some(2.0), (0, false))),
        []
    );
    // Going to zero (no load, no window): on FIRST, before the replicas write.
    let plan = route_step(&scaler, (1, 1), Some(0.0), (0, false));
    assert_eq!(plan.write.as_ref().map(|w| (w.from, w.to)), Some((1, 0)));
    assert_eq!(routes(&plan), [(0, true)]);
    let write_at = plan
        .effects
        .iter()
        .position(|e| matches!(e, Effect::Replicas { .. }));
    assert!(write_at.is_some_and(|w| w > 0), "{:?}", plan.effects);
    // A paused scaler writes no route.
    let mut paused = holding_scaler();
    paused.metadata.annotations = Some(BTreeMap::from([(
        llmscaler_api::names::PAUSED_ANNOTATION.to_owned(),
        "true".to_owned(),
    )]));
    assert_eq!(routes(&route_step(&paused, (0, 0), None, (0, false))), []);
    // Without an activator view (none configured), nothing.
    let mut step = Scaler::new(&scaler.spec, None);
    let plan = step.step(&observation(
        &scaler,
        target(1, &["llmscaler"]),
        Some(0.0),
        0,
    ));
    assert_eq!(routes(&plan), []);
}
