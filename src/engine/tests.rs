//! The worked numbers of `docs/scaling.md#worked-numbers`, one test per row, plus the window
//! and guard edges.

use super::*;

fn policy(min: i32, max: i32) -> Policy {
    Policy {
        min_replicas: min,
        max_replicas: max,
        window_ms: 0,
        max_step_replicas: 0,
        scale_up: scale_up::ScaleUpRules::default(),
    }
}

fn settled(spec: i32) -> Observation {
    Observation {
        spec_replicas: spec,
        ready_replicas: spec,
        rollout_in_progress: false,
    }
}

fn one_metric(value: f64, target: &str) -> Signal<String> {
    Signal::Metrics(vec![MetricInput {
        guardrail: false,
        name: "metric0".into(),
        target: target.into(),
        value: Ok(value),
    }])
}

fn run(policy: &Policy, observed: &Observation, signal: &Signal<String>) -> Decision<String> {
    decide(policy, observed, signal, &mut History::default(), 0)
}

#[test]
fn ready_1_value_085_scales_to_2() {
    let d = run(&policy(1, 5), &settled(1), &one_metric(0.85, "0.5"));
    assert_eq!((d.replicas, d.desired, d.action), (2, 2, Action::ScaleUp));
    assert_eq!(d.reason, Reason::ScaledUp);
}

#[test]
fn spec_5_value_0_min_1_scales_to_1() {
    let d = run(&policy(1, 5), &settled(5), &one_metric(0.0, "0.5"));
    assert_eq!((d.replicas, d.desired, d.action), (1, 1, Action::ScaleDown));
    assert_eq!(d.limited, Some(Limit::Min));
}

#[test]
fn spec_2_value_0_min_0_scales_to_zero() {
    let d = run(&policy(0, 5), &settled(2), &one_metric(0.0, "0.5"));
    assert_eq!((d.replicas, d.desired), (0, 0));
    assert_eq!(d.limited, None);
}

#[test]
fn spec_0_value_085_wakes_with_baseline_1() {
    let d = run(&policy(0, 5), &settled(0), &one_metric(0.85, "0.5"));
    assert_eq!((d.replicas, d.action), (2, Action::ScaleUp));
}

#[test]
fn empty_metric_is_skipped_not_zero() {
    let signal = Signal::Metrics(vec![
        MetricInput {
            guardrail: false,
            name: "a".into(),
            target: "0.8".into(),
            value: Ok(0.9),
        },
        MetricInput {
            guardrail: false,
            name: "b".into(),
            target: "0.5".into(),
            value: Err("no data".into()),
        },
    ]);
    let d = run(&policy(1, 10), &settled(3), &signal);
    assert_eq!(d.replicas, 4);
    assert_eq!(
        d.metrics[1].recommendation,
        Err(Skip::Unavailable("no data".into()))
    );
}

#[test]
fn non_finite_values_hold() {
    for v in [f64::NAN, f64::INFINITY, f64::NEG_INFINITY] {
        let d = run(&policy(1, 10), &settled(4), &one_metric(v, "2"));
        assert_eq!(
            (d.replicas, d.desired, d.action),
            (4, 4, Action::None),
            "{v}"
        );
        assert_eq!(d.reason, Reason::MetricsUnavailable);
        assert_eq!(d.recommendation, None);
    }
}

#[test]
fn largest_metric_wins() {
    let signal = Signal::Metrics(vec![
        MetricInput {
            guardrail: false,
            name: "queue".into(),
            target: "2".into(),
            value: Ok(4.0),
        },
        MetricInput {
            guardrail: false,
            name: "kv".into(),
            target: "0.8".into(),
            value: Ok(0.9),
        },
    ]);
    let d = run(&policy(1, 20), &settled(2), &signal);
    assert_eq!(d.replicas, 4);
}

#[test]
fn bad_target_is_skipped_even_if_admission_was_bypassed() {
    let d = run(&policy(1, 10), &settled(3), &one_metric(9.0, "80%"));
    assert_eq!(d.reason, Reason::MetricsUnavailable);
    assert!(matches!(
        d.metrics[0].recommendation,
        Err(Skip::BadTarget(_))
    ));
}

#[test]
fn window_with_step_cap_goes_to_3_and_stays_inside_the_window() {
    let p = Policy {
        window_ms: 300_000,
        max_step_replicas: 2,
        ..policy(1, 10)
    };
    let mut history = History::default();
    let d = decide(&p, &settled(5), &one_metric(0.0, "0.5"), &mut history, 0);
    assert_eq!(
        (d.replicas, d.desired, d.reason),
        (3, 1, Reason::StepCapped)
    );
    let d = decide(
        &p,
        &settled(3),
        &one_metric(0.0, "0.5"),
        &mut history,
        15_000,
    );
    assert_eq!((d.replicas, d.action), (3, Action::None));
    assert_eq!(d.reason, Reason::ScaleDownStabilized);
    // A full window after the write, the next step is allowed.
    let d = decide(
        &p,
        &settled(3),
        &one_metric(0.0, "0.5"),
        &mut history,
        300_000,
    );
    assert_eq!((d.replicas, d.action), (1, Action::ScaleDown));
}

#[test]
fn step_cap_without_window_waits_for_settle() {
    let p = Policy {
        max_step_replicas: 2,
        ..policy(1, 10)
    };
    let mut history = History::default();
    let d = decide(&p, &settled(5), &one_metric(0.0, "0.5"), &mut history, 0);
    assert_eq!((d.replicas, d.desired), (3, 1));
    let unsettled = Observation {
        spec_replicas: 3,
        ready_replicas: 5,
        rollout_in_progress: false,
    };
    let d = decide(
        &p,
        &unsettled,
        &one_metric(0.0, "0.5"),
        &mut history,
        15_000,
    );
    assert_eq!(
        (d.replicas, d.action, d.reason),
        (3, Action::Deferred, Reason::ScaleDownNotSettled)
    );
    assert_eq!(d.desired, 1);
    let d = decide(
        &p,
        &settled(3),
        &one_metric(0.0, "0.5"),
        &mut history,
        30_000,
    );
    assert_eq!((d.replicas, d.action), (1, Action::ScaleDown));
}

#[test]
fn step_cap_walks_10_8_6_4() {
    let p = Policy {
        max_step_replicas: 2,
        ..policy(1, 20)
    };
    let mut history = History::default();
    let mut spec = 10;
    let mut walk = vec![spec];
    for i in 0..6 {
        let d = decide(
            &p,
            &settled(spec),
            &one_metric(0.0, "1"),
            &mut history,
            i * 15_000,
        );
        spec = d.replicas;
        walk.push(spec);
    }
    assert_eq!(walk, vec![10, 8, 6, 4, 2, 1, 1]);
}

#[test]
fn scale_up_inside_the_window_is_immediate() {
    let p = Policy {
        window_ms: 300_000,
        ..policy(1, 20)
    };
    let mut history = History::default();
    decide(&p, &settled(5), &one_metric(0.4, "1"), &mut history, 0);
    let d = decide(&p, &settled(5), &one_metric(2.0, "1"), &mut history, 10_000);
    assert_eq!((d.replicas, d.action), (10, Action::ScaleUp));
}

#[test]
fn scale_down_waits_for_the_window_maximum() {
    let p = Policy {
        window_ms: 60_000,
        ..policy(1, 20)
    };
    let mut history = History::default();
    let d = decide(&p, &settled(6), &one_metric(1.0, "1"), &mut history, 0);
    assert_eq!(d.replicas, 6);
    let d = decide(&p, &settled(6), &one_metric(0.5, "1"), &mut history, 30_000);
    assert_eq!((d.replicas, d.reason), (6, Reason::ScaleDownStabilized));
    let d = decide(&p, &settled(6), &one_metric(0.5, "1"), &mut history, 60_000);
    assert_eq!((d.replicas, d.action), (3, Action::ScaleDown));
}

#[test]
fn a_rollout_defers_scale_down_but_not_scale_up() {
    let rolling = Observation {
        spec_replicas: 3,
        ready_replicas: 3,
        rollout_in_progress: true,
    };
    let d = run(&policy(1, 10), &rolling, &one_metric(0.0, "1"));
    assert_eq!(
        (d.replicas, d.action, d.reason),
        (3, Action::Deferred, Reason::RolloutInProgress)
    );
    // A traffic spike during a slow LLM rollout gets its replicas: 3 x 2 / 1 = 6.
    let d = run(&policy(1, 20), &rolling, &one_metric(2.0, "1"));
    assert_eq!(
        (d.replicas, d.action, d.reason),
        (6, Action::ScaleUp, Reason::ScaledUp)
    );
}

#[test]
fn surge_pods_of_a_rollout_do_not_compound_a_scale_up() {
    // spec 4 with 25% surge: 5 ready while rolling. At the target (value = target per replica)
    // the surge pod must not ask for a 5th replica at every sync (kubernetes#72775).
    let surging = Observation {
        spec_replicas: 4,
        ready_replicas: 5,
        rollout_in_progress: true,
    };
    let d = run(&policy(1, 20), &surging, &one_metric(1.0, "1"));
    assert_eq!((d.replicas, d.reason), (4, Reason::Steady));
    // Not-yet-ready new pods: the ratio uses the ready ones, so the next sync does not add the
    // same replicas again.
    let starting = Observation {
        spec_replicas: 6,
        ready_replicas: 3,
        rollout_in_progress: true,
    };
    let d = run(&policy(1, 20), &starting, &one_metric(2.0, "1"));
    assert_eq!((d.replicas, d.action), (6, Action::None));
}

#[test]
fn the_rollout_predicate() {
    assert!(rollout_in_progress(2, 1, 3, 3, 3));
    assert!(rollout_in_progress(2, 2, 3, 3, 2));
    assert!(rollout_in_progress(2, 2, 3, 4, 3));
    assert!(!rollout_in_progress(2, 2, 3, 3, 3));
}

#[test]
fn saturating_value_is_bounded_then_clamped() {
    // ceil(3 × 1e300 / 0.5) saturates at i32::MAX; the evidence bound from 3 Ready is 6; the
    // clamp to maxReplicas 5 applies after it.
    let d = run(&policy(1, 5), &settled(3), &one_metric(1e300, "0.5"));
    assert_eq!(d.metrics[0].ratio, Some(2e300));
    assert_eq!(
        (d.replicas, d.recommendation, d.limited),
        (5, Some(6), Some(Limit::Max))
    );
}

#[test]
fn custom_provider_rows() {
    let cases = [(15, 1, 20, 15), (15, 1, 5, 5), (0, 2, 20, 2), (0, 0, 20, 0)];
    for (active, min, max, expected) in cases {
        let d = run(
            &policy(min, max),
            &settled(3),
            &Signal::Decision(Ok(active)),
        );
        assert_eq!(d.replicas, expected, "active {active} min {min} max {max}");
        assert_eq!(d.metrics[0].name, "decision");
    }
    let d = run(
        &policy(1, 20),
        &settled(3),
        &Signal::Decision(Err("503".into())),
    );
    assert_eq!((d.replicas, d.reason), (3, Reason::MetricsUnavailable));
    let d = run(&policy(1, 20), &settled(3), &Signal::Decision(Ok(i32::MAX)));
    assert_eq!(d.replicas, 20);
}

fn empty_metric() -> Signal<String> {
    Signal::Metrics(vec![MetricInput {
        guardrail: false,
        name: "metric0".into(),
        target: "0.5".into(),
        value: Err("no data".into()),
    }])
}

#[test]
fn held_sync_is_clamped_to_max() {
    // maxReplicas 5, the fleet at 8, the only metric empty: the held 8 is clamped to 5.
    let d = run(&policy(1, 5), &settled(8), &empty_metric());
    assert_eq!(
        (d.replicas, d.desired, d.action, d.reason),
        (5, 5, Action::ScaleDown, Reason::ScaledDown)
    );
    assert_eq!((d.recommendation, d.limited), (None, Some(Limit::Max)));
}

#[test]
fn held_sync_is_clamped_to_min() {
    let d = run(&policy(2, 5), &settled(0), &empty_metric());
    assert_eq!(
        (d.replicas, d.action, d.reason),
        (2, Action::ScaleUp, Reason::ScaledUp)
    );
    assert_eq!((d.recommendation, d.limited), (None, Some(Limit::Min)));
}

#[test]
fn held_sync_within_bounds_keeps_metrics_unavailable() {
    let d = run(&policy(1, 10), &settled(4), &empty_metric());
    assert_eq!(
        (d.replicas, d.desired, d.action, d.reason),
        (4, 4, Action::None, Reason::MetricsUnavailable)
    );
    assert_eq!((d.recommendation, d.limited), (None, None));
}

#[test]
fn held_sync_clamp_goes_through_step_cap_and_guards() {
    let p = Policy {
        max_step_replicas: 2,
        ..policy(1, 5)
    };
    let d = run(&p, &settled(8), &empty_metric());
    assert_eq!(
        (d.replicas, d.desired, d.reason, d.limited),
        (6, 5, Reason::StepCapped, Some(Limit::Max))
    );
    let rolling = Observation {
        rollout_in_progress: true,
        ..settled(8)
    };
    let d = run(&policy(1, 5), &rolling, &empty_metric());
    assert_eq!(
        (d.replicas, d.desired, d.action, d.reason),
        (8, 5, Action::Deferred, Reason::RolloutInProgress)
    );
    let unsettled = Observation {
        ready_replicas: 7,
        ..settled(8)
    };
    let d = run(&policy(1, 5), &unsettled, &empty_metric());
    assert_eq!(
        (d.replicas, d.action, d.reason),
        (8, Action::Deferred, Reason::ScaleDownNotSettled)
    );
}

#[test]
fn held_sync_is_recorded_in_the_window() {
    // Window 60 s, the fleet at 5: t=0 the metric is empty (hold at 5, recorded), t=10 s it
    // reads 0: the window still holds 5, so the fleet stays.
    let p = Policy {
        window_ms: 60_000,
        ..policy(1, 10)
    };
    let mut history = History::default();
    let d = decide(&p, &settled(5), &empty_metric(), &mut history, 0);
    assert_eq!(
        (d.replicas, d.action, d.reason),
        (5, Action::None, Reason::MetricsUnavailable)
    );
    assert_eq!(
        history.records(),
        &[Record {
            at_ms: 0,
            replicas: 5
        }]
    );
    let d = decide(
        &p,
        &settled(5),
        &one_metric(0.0, "0.5"),
        &mut history,
        10_000,
    );
    assert_eq!(
        (d.replicas, d.desired, d.action, d.reason),
        (5, 5, Action::None, Reason::ScaleDownStabilized)
    );
    // Once the held record has left the window, the low reading scales down.
    let d = decide(
        &p,
        &settled(5),
        &one_metric(0.0, "0.5"),
        &mut history,
        60_000,
    );
    assert_eq!((d.replicas, d.action), (1, Action::ScaleDown));
}

fn two_metrics(a: Result<f64, String>, b: Result<f64, String>) -> Signal<String> {
    Signal::Metrics(vec![
        MetricInput {
            guardrail: false,
            name: "a".into(),
            target: "0.8".into(),
            value: a,
        },
        MetricInput {
            guardrail: false,
            name: "b".into(),
            target: "0.8".into(),
            value: b,
        },
    ])
}

#[test]
fn one_metric_unmeasurable_never_lowers_the_fleet() {
    // ready 10; a empty, b recommends ceil(10 × 0.56 / 0.8) = 7: stays 10 (HPA's rule).
    let d = run(
        &policy(1, 20),
        &settled(10),
        &two_metrics(Err("no data".into()), Ok(0.56)),
    );
    assert_eq!(
        (d.replicas, d.desired, d.action, d.reason),
        (10, 10, Action::None, Reason::MetricsUnavailable)
    );
    assert_eq!(d.recommendation, Some(7));
    // The same with a NaN or a negative reading standing in for the empty one.
    for bad in [f64::NAN, -1.0] {
        let d = run(
            &policy(1, 20),
            &settled(10),
            &two_metrics(Ok(bad), Ok(0.56)),
        );
        assert_eq!((d.replicas, d.action), (10, Action::None), "a = {bad}");
    }
}

#[test]
fn one_metric_unmeasurable_still_raises() {
    // ready 3; a 0.9 / 0.8 recommends 4, b empty: 4.
    let d = run(
        &policy(1, 10),
        &settled(3),
        &two_metrics(Ok(0.9), Err("no data".into())),
    );
    assert_eq!((d.replicas, d.action), (4, Action::ScaleUp));
}

#[test]
fn one_metric_unmeasurable_still_obeys_a_lowered_max() {
    let d = run(
        &policy(1, 5),
        &settled(8),
        &two_metrics(Err("no data".into()), Ok(0.1)),
    );
    assert_eq!(
        (d.replicas, d.action, d.limited),
        (5, Action::ScaleDown, Some(Limit::Max))
    );
}

#[test]
fn negative_value_is_not_measurable() {
    let d = run(&policy(1, 10), &settled(4), &one_metric(-0.5, "0.5"));
    assert_eq!(
        (d.replicas, d.action, d.reason),
        (4, Action::None, Reason::MetricsUnavailable)
    );
    assert_eq!(d.metrics[0].recommendation, Err(Skip::NotMeasurable(-0.5)));
}

#[test]
fn lowered_max_applies_at_the_next_sync_inside_the_window() {
    // Window 300 s, fleet at 8 with 8 recorded at t=0; maxReplicas lowered to 5 at t=15 s.
    let mut p = Policy {
        window_ms: 300_000,
        ..policy(1, 10)
    };
    let mut history = History::default();
    let d = decide(&p, &settled(8), &one_metric(0.5, "0.5"), &mut history, 0);
    assert_eq!(d.replicas, 8);
    p.max_replicas = 5;
    let d = decide(
        &p,
        &settled(8),
        &one_metric(0.5, "0.5"),
        &mut history,
        15_000,
    );
    assert_eq!(
        (d.replicas, d.desired, d.action, d.limited),
        (5, 5, Action::ScaleDown, Some(Limit::Max))
    );
    assert!(history.records().iter().all(|r| r.replicas <= 5));
}

#[test]
fn restored_history_never_exceeds_max() {
    // A status written under maxReplicas 20 holds 20 in the window; max is now 6.
    let p = Policy {
        window_ms: 300_000,
        ..policy(1, 6)
    };
    let mut history = History::from_records(vec![Record {
        at_ms: 0,
        replicas: 20,
    }]);
    let d = decide(
        &p,
        &settled(6),
        &one_metric(0.5, "0.5"),
        &mut history,
        10_000,
    );
    assert_eq!((d.replicas, d.desired), (6, 6));
    // Someone wrote 3 meanwhile and nothing is measurable: the window holds, it never raises
    // (docs/guards.md#stabilization-window), so the held 3 stays.
    let d = decide(&p, &settled(3), &empty_metric(), &mut history, 20_000);
    assert_eq!((d.replicas, d.desired, d.action), (3, 3, Action::None));
    assert!(history.records().iter().all(|r| r.replicas <= 6));
}

/// A queue metric (normal) and a TTFT guardrail, as docs/signals.md#guardrails pairs them.
fn queue_and_guardrail(queue: f64, ttft: Result<f64, String>) -> Signal<String> {
    Signal::Metrics(vec![
        MetricInput {
            name: "waiting".into(),
            target: "2".into(),
            value: Ok(queue),
            guardrail: false,
        },
        MetricInput {
            name: "ttft".into(),
            target: "1".into(),
            value: ttft,
            guardrail: true,
        },
    ])
}

/// docs/signals.md#guardrails, one row per case: (spec replicas, queue per replica, TTFT P90
/// seconds or why it is unmeasurable) → (replicas, reason).
#[test]
fn guardrail_raises_or_holds_but_never_lowers() {
    let nan = || Err::<f64, String>("returned NaN".into());
    type Row = (i32, f64, Result<f64, String>, i32, Reason);
    let rows: Vec<Row> = vec![
        // Queue low, TTFT above target: the scale-down the queue wants is held.
        (4, 0.5, Ok(1.2), 5, Reason::ScaledUp),
        (4, 1.0, Ok(1.01), 5, Reason::ScaledUp),
        // TTFT above target but its ratio asks for no more than now: held at 4.
        (4, 0.5, Ok(1.0 + 1e-12), 4, Reason::GuardrailHeld),
        // TTFT at or below its target never lowers by itself: the queue decides.
        (4, 0.5, Ok(1.0), 1, Reason::ScaledDown),
        (4, 0.5, Ok(0.1), 1, Reason::ScaledDown),
        (4, 4.0, Ok(0.1), 8, Reason::ScaledUp),
        // TTFT above target raises beyond the queue's wish...
        (4, 2.0, Ok(1.75), 7, Reason::ScaledUp),
        // ...by at most the evidence bound: 3× on 4 Ready asks 12, the bound is 2 × 4.
        (4, 2.0, Ok(3.0), 8, Reason::ScaleUpLimited),
        // Unmeasurable guardrail (NaN over an idle window): neither holds nor lowers.
        (4, 0.5, nan(), 1, Reason::ScaledDown),
        (4, 2.0, nan(), 4, Reason::Steady),
        (4, 4.0, nan(), 8, Reason::ScaledUp),
    ];
    for (spec, queue, ttft, want, reason) in rows {
        let label = format!("spec {spec} queue {queue} ttft {ttft:?}");
        let d = run(
            &policy(1, 20),
            &settled(spec),
            &queue_and_guardrail(queue, ttft),
        );
        assert_eq!((d.replicas, d.reason), (want, reason), "{label}");
    }
}

#[test]
fn guardrail_alone_never_lowers_and_a_skipped_queue_still_holds() {
    // The normal metric is skipped and the guardrail is below target: nothing counts, held.
    let signal = Signal::Metrics(vec![
        MetricInput {
            name: "waiting".into(),
            target: "2".into(),
            value: Err("no data".to_owned()),
            guardrail: false,
        },
        MetricInput {
            name: "ttft".into(),
            target: "1".into(),
            value: Ok(0.2),
            guardrail: true,
        },
    ]);
    let d = run(&policy(1, 20), &settled(6), &signal);
    assert_eq!(
        (d.replicas, d.recommendation, d.reason),
        (6, None, Reason::MetricsUnavailable)
    );
    // The same with the guardrail above target: it raises (partial data may only go up).
    let Signal::Metrics(mut inputs) = signal else {
        unreachable!()
    };
    inputs[1].value = Ok(1.5);
    let d = run(&policy(1, 20), &settled(6), &Signal::Metrics(inputs));
    assert_eq!((d.replicas, d.action), (9, Action::ScaleUp));
}

/// docs/guards.md#evidence-bound, worked numbers: one Ready replica, a TTFT guardrail at 20×
/// its target (17 s against 0.85 s), the queue below its target, a 300 s window.
#[test]
fn a_guardrail_20x_its_target_on_one_ready_replica_steps_to_2_not_20() {
    let p = Policy {
        window_ms: 300_000,
        ..policy(1, 128)
    };
    let signal: Signal<String> = Signal::Metrics(vec![
        MetricInput {
            name: "waiting".into(),
            target: "8".into(),
            value: Ok(3.0),
            guardrail: false,
        },
        MetricInput {
            name: "ttft-p90".into(),
            target: "0.85".into(),
            value: Ok(17.0),
            guardrail: true,
        },
    ]);
    let mut history = History::default();
    // t = 0: ceil(1 × 17 / 0.85) = 20 unbounded; the bound is 2 × 1 = 2.
    let d = decide(&p, &settled(1), &signal, &mut history, 0);
    assert_eq!(d.metrics[1].ratio, Some(20.0));
    assert_eq!(
        (d.replicas, d.recommendation, d.action, d.reason),
        (2, Some(2), Action::ScaleUp, Reason::ScaleUpLimited)
    );
    // t = 15 s..75 s: 1 Ready of 2, still 20×: the one starting counts as coming capacity
    // (the queue alone would lower the fleet; the guardrail above its target holds it).
    let starting = Observation {
        spec_replicas: 2,
        ready_replicas: 1,
        rollout_in_progress: false,
    };
    for t in [15_000, 45_000, 75_000] {
        let d = decide(&p, &starting, &signal, &mut history, t);
        assert_eq!((d.replicas, d.reason), (2, Reason::GuardrailHeld), "t {t}");
    }
    // t = 90 s: both Ready and the reading still 20× (ceil(2 × 20) = 40): the next step, 4.
    let d = decide(&p, &settled(2), &signal, &mut history, 90_000);
    assert_eq!((d.replicas, d.reason), (4, Reason::ScaleUpLimited));
    // The window never held more than was written.
    assert!(history.records().iter().all(|r| r.replicas <= 4));
}

/// docs/guards.md#evidence-bound, the falling hold: the same 20× guardrail, read again once the
/// first step's replica is Ready. Rising (17 s → 20 s) it steps 2 → 4; falling (20 s → 12 s,
/// still 14× its target) it holds 4: the Ready replicas serve faster than the backlog builds.
/// Rising again (12 s → 13 s) on 4 Ready it steps to 8, not to `ceil(4 × 15.3)` = 62.
#[test]
fn a_falling_reading_holds_and_a_rising_one_steps_by_the_ready_replicas() {
    let p = Policy {
        window_ms: 300_000,
        ..policy(1, 128)
    };
    let ttft = |seconds: f64| -> Signal<String> {
        Signal::Metrics(vec![MetricInput {
            name: "ttft-p90".into(),
            target: "0.85".into(),
            value: Ok(seconds),
            guardrail: true,
        }])
    };
    let after = |seconds: f64| Extras {
        previous: std::collections::BTreeMap::from([("ttft-p90".to_owned(), seconds)]),
        ..Extras::default()
    };
    let mut history = History::default();
    let d = decide_with(
        &p,
        &settled(2),
        &ttft(20.0),
        &after(17.0),
        &mut history,
        90_000,
    );
    assert_eq!((d.replicas, d.reason), (4, Reason::ScaleUpLimited));
    let d = decide_with(
        &p,
        &settled(4),
        &ttft(12.0),
        &after(20.0),
        &mut history,
        180_000,
    );
    assert_eq!(d.metrics[0].recommendation, Ok(4));
    assert_eq!((d.replicas, d.action), (4, Action::None));
    let d = decide_with(
        &p,
        &settled(4),
        &ttft(13.0),
        &after(12.0),
        &mut history,
        195_000,
    );
    assert_eq!(d.metrics[0].recommendation, Ok(8));
    assert_eq!((d.replicas, d.reason), (8, Reason::ScaleUpLimited));
}

/// Coming capacity holds the metrics, not the floor: `minReplicas` raised while the hold runs
/// (a scale-up a minute ago, its replicas Ready or not) is written at once. Found against real
/// vLLM (e2e/tests/real_vllm.rs): minReplicas 1 -> 2 waited 2 x 560 s for the hold to end.
#[test]
fn a_raised_min_replicas_is_not_held_by_coming_capacity() {
    let p = policy(2, 3);
    let hold = Extras {
        capacity: None,
        objective: None,
        hold_metric_scale_up: true,
        previous: std::collections::BTreeMap::new(),
    };
    let mut history = History::default();
    // spec 1, 1 Ready, the metric reads 0: only the floor asks for 2.
    let d = decide_with(
        &p,
        &settled(1),
        &one_metric(0.0, "1"),
        &hold,
        &mut history,
        0,
    );
    assert_eq!(d.replicas, 2);
    assert_ne!(d.reason, Reason::ScaleUpLimited);
    // The metric asking for 3 is still held at the floor while replicas start.
    let d = decide_with(
        &p,
        &settled(1),
        &one_metric(3.0, "1"),
        &hold,
        &mut history,
        15_000,
    );
    assert_eq!((d.replicas, d.reason), (2, Reason::ScaleUpLimited));
}

/// The window holds, it never raises: a recommendation held back by coming capacity is not
/// replayed once its replicas are Ready.
#[test]
fn a_held_back_recommendation_is_not_replayed_by_the_window() {
    let p = Policy {
        window_ms: 300_000,
        ..policy(1, 20)
    };
    let hold = Extras {
        capacity: None,
        objective: None,
        hold_metric_scale_up: true,
        previous: std::collections::BTreeMap::new(),
    };
    let mut history = History::default();
    // 3 Ready of 4: the metric asks for 6 (ceil(3 × 2 / 1), within the bound 2 × 3); held at 4
    // while the fourth starts.
    let starting = Observation {
        spec_replicas: 4,
        ready_replicas: 3,
        rollout_in_progress: false,
    };
    let d = decide_with(&p, &starting, &one_metric(2.0, "1"), &hold, &mut history, 0);
    assert_eq!((d.replicas, d.reason), (4, Reason::ScaleUpLimited));
    // 4 Ready, the metric now asks for 3: the recorded 6 does not raise the fleet.
    let d = decide(
        &p,
        &settled(4),
        &one_metric(0.75, "1"),
        &mut history,
        15_000,
    );
    assert_eq!(
        (d.replicas, d.desired, d.reason),
        (4, 4, Reason::ScaleDownStabilized)
    );
}
