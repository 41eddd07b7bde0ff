//! The worked examples of the Kubernetes documentation, "Horizontal Pod Autoscaling"
//! (kubernetes.io/docs/tasks/run-application/horizontal-pod-autoscale/): algorithm details,
//! missing metrics and unready pods, scaling policies and the default behavior.

use super::*;

fn running(names: &[&str]) -> Vec<Pod> {
    names
        .iter()
        .map(|n| Pod {
            name: (*n).to_string(),
            phase: Phase::Running,
            deleting: false,
        })
        .collect()
}

fn values(pairs: &[(&str, f64)]) -> BTreeMap<String, f64> {
    pairs.iter().map(|(k, v)| ((*k).to_string(), *v)).collect()
}

#[test]
fn ratio_doubles_at_200m_over_100m_and_halves_at_50m() {
    // "if the current metric value is 200m, and the desired value is 100m, the number of
    // replicas will be doubled ... If the current value is instead 50m, you'll halve".
    let pods = running(&["a", "b", "c", "d"]);
    let at = |v: f64| values(&[("a", v), ("b", v), ("c", v), ("d", v)]);
    assert_eq!(
        pods_metric_replicas(4, &pods, &at(0.2), 0.1, DEFAULT_TOLERANCE),
        Some(8)
    );
    assert_eq!(
        pods_metric_replicas(4, &pods, &at(0.05), 0.1, DEFAULT_TOLERANCE),
        Some(2)
    );
}

#[test]
fn a_ratio_within_the_tolerance_skips_scaling() {
    // "The control plane skips any scaling action if the ratio is sufficiently close to 1.0
    // (within a globally-configurable tolerance, 0.1 by default)."
    let pods = running(&["a", "b", "c", "d"]);
    let at = |v: f64| values(&[("a", v), ("b", v), ("c", v), ("d", v)]);
    assert_eq!(pods_metric_replicas(4, &pods, &at(1.09), 1.0, 0.1), Some(4));
    assert_eq!(pods_metric_replicas(4, &pods, &at(0.91), 1.0, 0.1), Some(4));
    assert_eq!(pods_metric_replicas(4, &pods, &at(1.2), 1.0, 0.1), Some(5));
}

#[test]
fn missing_metrics_count_as_target_on_scale_down_and_zero_on_scale_up() {
    // "assuming those pods were consuming 100% of the desired value in case of a scale down,
    // and 0% in case of a scale up"; "if the new ratio reverses the scale direction, or is
    // within the tolerance, the controller doesn't take any scaling action".
    let pods = running(&["a", "b", "c", "d"]);
    // Scale up: a, b at 3 × target, c, d without metrics (0): ratio 6/4 = 1.5 → 6.
    assert_eq!(
        pods_metric_replicas(4, &pods, &values(&[("a", 30.0), ("b", 30.0)]), 10.0, 0.1),
        Some(6)
    );
    // Scale down: a, b at 0.5 × target, c, d at target: ratio 0.75 → ceil(3) = 3.
    assert_eq!(
        pods_metric_replicas(4, &pods, &values(&[("a", 5.0), ("b", 5.0)]), 10.0, 0.1),
        Some(3)
    );
    // Up 1.15 on a alone, but c, d, b at 0 reverse the direction: no change.
    assert_eq!(
        pods_metric_replicas(4, &pods, &values(&[("a", 11.5)]), 10.0, 0.1),
        Some(4)
    );
    // No metric at all: invalid.
    assert_eq!(
        pods_metric_replicas(4, &pods, &values(&[]), 10.0, 0.1),
        None
    );
}

#[test]
fn unready_pods_count_zero_on_scale_up_and_are_left_out_otherwise() {
    let mut pods = running(&["a", "b"]);
    pods.push(Pod {
        name: "c".into(),
        phase: Phase::Pending,
        deleting: false,
    });
    pods.push(Pod {
        name: "gone".into(),
        phase: Phase::Running,
        deleting: true,
    });
    // Scale up with one unready pod: (20 + 20 + 0) / 3 / 10 = 1.33 → ceil(4) = 4.
    assert_eq!(
        pods_metric_replicas(3, &pods, &values(&[("a", 20.0), ("b", 20.0)]), 10.0, 0.1),
        Some(4)
    );
    // Scale down ignores the unready pod: 5/10 over 2 ready → 1.
    assert_eq!(
        pods_metric_replicas(3, &pods, &values(&[("a", 5.0), ("b", 5.0)]), 10.0, 0.1),
        Some(1)
    );
}

#[test]
fn default_scale_up_is_max_of_100_percent_and_4_pods_per_15_seconds() {
    // "For scaling up ... add either 4 Pods or 100% of the currently running replicas every
    // 15 seconds, whichever is greater."
    let mut hpa = Hpa::new(1, 100, Behavior::default());
    assert_eq!(hpa.reconcile(0, 1, Some(50)), 5, "4 pods beat 100 % of 1");
    assert_eq!(
        hpa.reconcile(5_000, 5, Some(50)),
        5,
        "inside the same 15 s period"
    );
    assert_eq!(hpa.reconcile(15_000, 5, Some(50)), 10, "100 % of 5");
    assert_eq!(hpa.reconcile(30_000, 10, Some(50)), 20);
}

#[test]
fn default_scale_down_waits_for_the_300_second_window() {
    // "For scaling down the stabilization window is 300 seconds ... the highest recommendation
    // within that window is used", then up to 100 % of the pods may go at once.
    let mut hpa = Hpa::new(1, 100, Behavior::default());
    assert_eq!(hpa.reconcile(0, 10, Some(10)), 10);
    assert_eq!(hpa.reconcile(15_000, 10, Some(2)), 10);
    assert_eq!(hpa.reconcile(299_000, 10, Some(2)), 10);
    assert_eq!(
        hpa.reconcile(300_000, 10, Some(2)),
        2,
        "the 10 left the window"
    );
}

#[test]
fn scale_down_policies_pods_4_or_percent_10_per_minute() {
    // The documentation's example: Pods 4 / 60 s and Percent 10 / 60 s, selectPolicy Max. "if
    // there are 80 replicas and the target has to be scaled down to 10 replicas then during
    // the first step 8 replicas will be reduced. In the next iteration when the number of
    // replicas is 72, 10% of the pods is 7.2 but the number is rounded up to 8. ... when the
    // number of replicas falls below 40, the first policy (Pods) is applied and 4 replicas will
    // be reduced at a time."
    let behavior = Behavior {
        scale_down: Rules {
            stabilization_window_s: 0,
            policies: vec![
                ScalingPolicy::Pods {
                    value: 4,
                    period_s: 60,
                },
                ScalingPolicy::Percent {
                    value: 10,
                    period_s: 60,
                },
            ],
            select: Select::Max,
        },
        ..Behavior::default()
    };
    let mut hpa = Hpa::new(1, 100, behavior);
    assert_eq!(hpa.reconcile(0, 80, Some(10)), 72);
    assert_eq!(
        hpa.reconcile(30_000, 72, Some(10)),
        72,
        "one step per minute"
    );
    assert_eq!(hpa.reconcile(60_000, 72, Some(10)), 64);
    let mut replicas = 64;
    let mut t = 60_000;
    while replicas > 40 {
        t += 60_000;
        replicas = hpa.reconcile(t, replicas, Some(10));
    }
    t += 60_000;
    let next = hpa.reconcile(t, replicas, Some(10));
    assert_eq!(replicas - next, 4, "below 40 the Pods policy removes 4");
}

#[test]
fn external_metric_targets() {
    // AverageValue: ceil(total / target), unless within the tolerance of current.
    assert_eq!(external_average_replicas(2, 30.0, 10.0, 0.1), 3);
    assert_eq!(external_average_replicas(3, 31.0, 10.0, 0.1), 3);
    assert_eq!(external_average_replicas(0, 5.0, 10.0, 0.1), 1);
    // Value: ratio × ready pods.
    assert_eq!(external_value_replicas(4, 4, 2.0, 1.0, 0.1), 8);
    assert_eq!(external_value_replicas(0, 0, 2.5, 1.0, 0.1), 3);
}
