//! The HorizontalPodAutoscaler v2 algorithm (kube-controller-manager's `replica_calculator.go`
//! and `horizontal.go`), the `hpa` and `keda` comparators of `llmscaler simulate --requests`
//! (`docs/simulate/README.md#comparators`).
//!
//! Pure: pods, metric values and time are passed in.

use std::collections::BTreeMap;

/// HPA's default `--horizontal-pod-autoscaler-tolerance`.
pub const DEFAULT_TOLERANCE: f64 = 0.1;
/// HPA's default `--horizontal-pod-autoscaler-sync-period`, milliseconds.
pub const DEFAULT_SYNC_MS: i64 = 15_000;

/// A pod of the target as the HPA lists it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Pod {
    /// Pod name (the key of its metric).
    pub name: String,
    /// Pod phase.
    pub phase: Phase,
    /// Being deleted (`deletionTimestamp` set): ignored.
    pub deleting: bool,
}

/// The phases the algorithm distinguishes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Phase {
    /// Not yet running: counted as unready.
    Pending,
    /// Running (ready or not: for non-CPU metrics only the metric's presence matters).
    Running,
    /// Failed: ignored.
    Failed,
}

/// One scaling policy of `behavior.scaleUp/scaleDown.policies`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ScalingPolicy {
    /// At most `value` pods per `period_s` seconds.
    Pods {
        /// Pods.
        value: i32,
        /// Seconds.
        period_s: i64,
    },
    /// At most `value` percent of the pods at the period's start per `period_s` seconds.
    Percent {
        /// Percent.
        value: i32,
        /// Seconds.
        period_s: i64,
    },
}

/// `selectPolicy`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Select {
    /// The policy allowing the largest change.
    Max,
    /// The policy allowing the smallest change.
    Min,
    /// No change in this direction.
    Disabled,
}

/// `behavior.scaleUp` or `behavior.scaleDown`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Rules {
    /// `stabilizationWindowSeconds`.
    pub stabilization_window_s: i64,
    /// `policies`.
    pub policies: Vec<ScalingPolicy>,
    /// `selectPolicy`.
    pub select: Select,
}

/// `spec.behavior`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Behavior {
    /// Scale-up rules.
    pub scale_up: Rules,
    /// Scale-down rules.
    pub scale_down: Rules,
}

impl Default for Behavior {
    /// The documented defaults: scale up by max(100 %, 4 pods) per 15 s without
    /// stabilization; scale down by up to 100 % per 15 s after a 300 s stabilization window.
    fn default() -> Self {
        Self {
            scale_up: Rules {
                stabilization_window_s: 0,
                policies: vec![
                    ScalingPolicy::Percent {
                        value: 100,
                        period_s: 15,
                    },
                    ScalingPolicy::Pods {
                        value: 4,
                        period_s: 15,
                    },
                ],
                select: Select::Max,
            },
            scale_down: Rules {
                stabilization_window_s: 300,
                policies: vec![ScalingPolicy::Percent {
                    value: 100,
                    period_s: 15,
                }],
                select: Select::Max,
            },
        }
    }
}

/// `ceil` with the HPA's own float-to-int32 conversion.
#[allow(clippy::cast_possible_truncation)]
fn ceil_i32(x: f64) -> i32 {
    if x.is_nan() {
        0
    } else {
        x.ceil().clamp(0.0, f64::from(i32::MAX)) as i32
    }
}

/// `GetMetricReplicas` for a `Pods` metric with an `AverageValue` target: the average of the
/// pods' values against `target`, with the rules for unready pods and missing metrics (a
/// pending pod counts 0 on a scale-up and is left out otherwise; a pod without a metric counts
/// as `target` on a scale-down and 0 on a scale-up; if that reverses the direction or lands
/// within the tolerance, no change). `None` when no pod has a metric (an invalid metric).
pub fn pods_metric_replicas(
    current_replicas: i32,
    pods: &[Pod],
    metrics: &BTreeMap<String, f64>,
    target: f64,
    tolerance: f64,
) -> Option<i32> {
    let mut ready = 0usize;
    let mut unready = Vec::new();
    let mut missing = Vec::new();
    let mut values: BTreeMap<&str, f64> = BTreeMap::new();
    for pod in pods {
        if pod.deleting || pod.phase == Phase::Failed {
            continue;
        }
        if pod.phase == Phase::Pending {
            unready.push(pod.name.as_str());
            continue;
        }
        match metrics.get(&pod.name) {
            Some(&v) => {
                values.insert(pod.name.as_str(), v);
                ready += 1;
            }
            None => missing.push(pod.name.as_str()),
        }
    }
    if values.is_empty() {
        return None;
    }
    let ratio_of = |vals: &BTreeMap<&str, f64>| {
        let sum: f64 = vals.values().sum();
        sum / vals.len() as f64 / target
    };
    let usage_ratio = ratio_of(&values);
    let scale_up_with_unready = !unready.is_empty() && usage_ratio > 1.0;
    if !scale_up_with_unready && missing.is_empty() {
        if (1.0 - usage_ratio).abs() <= tolerance {
            return Some(current_replicas);
        }
        return Some(ceil_i32(usage_ratio * ready as f64));
    }
    for name in &missing {
        values.insert(name, if usage_ratio < 1.0 { target } else { 0.0 });
    }
    if scale_up_with_unready {
        for name in &unready {
            values.insert(name, 0.0);
        }
    }
    let new_ratio = ratio_of(&values);
    if (1.0 - new_ratio).abs() <= tolerance
        || (usage_ratio < 1.0 && new_ratio > 1.0)
        || (usage_ratio > 1.0 && new_ratio < 1.0)
    {
        return Some(current_replicas);
    }
    let new_replicas = ceil_i32(new_ratio * values.len() as f64);
    if (new_ratio < 1.0 && new_replicas > current_replicas)
        || (new_ratio > 1.0 && new_replicas < current_replicas)
    {
        return Some(current_replicas);
    }
    Some(new_replicas)
}

/// `GetExternalMetricReplicas` with an `AverageValue` target (KEDA's default metric type):
/// `ceil(total / target)`, unless `total / (target × current)` is within the tolerance.
pub fn external_average_replicas(
    current_replicas: i32,
    total: f64,
    target: f64,
    tolerance: f64,
) -> i32 {
    let usage_ratio = total / (target * f64::from(current_replicas));
    if current_replicas != 0 && (1.0 - usage_ratio).abs() <= tolerance {
        return current_replicas;
    }
    ceil_i32(total / target)
}

/// `GetExternalMetricReplicas` with a `Value` target: `ceil(value / target × ready pods)`, or
/// `ceil(value / target)` from zero replicas; no change within the tolerance.
pub fn external_value_replicas(
    current_replicas: i32,
    ready_pods: i32,
    value: f64,
    target: f64,
    tolerance: f64,
) -> i32 {
    let usage_ratio = value / target;
    if current_replicas == 0 {
        return ceil_i32(usage_ratio);
    }
    if (1.0 - usage_ratio).abs() <= tolerance {
        return current_replicas;
    }
    ceil_i32(usage_ratio * f64::from(ready_pods))
}

/// A scale event kept for the rate policies.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Event {
    at_ms: i64,
    change: i32,
}

/// The HPA controller's memory for one HPA: recommendations for stabilization and scale events
/// for the rate policies.
#[derive(Clone, Debug)]
pub struct Hpa {
    /// `minReplicas` (at least 1 for a plain HPA; KEDA handles 0).
    pub min_replicas: i32,
    /// `maxReplicas`.
    pub max_replicas: i32,
    /// `behavior`.
    pub behavior: Behavior,
    recommendations: Vec<(i64, i32)>,
    up_events: Vec<Event>,
    down_events: Vec<Event>,
}

impl Hpa {
    /// An HPA with no history.
    pub fn new(min_replicas: i32, max_replicas: i32, behavior: Behavior) -> Self {
        Self {
            min_replicas,
            max_replicas,
            behavior,
            recommendations: Vec::new(),
            up_events: Vec::new(),
            down_events: Vec::new(),
        }
    }

    /// Records `replicas` as the recommendation made at `at_ms` (a warm start: the controller
    /// had been running before).
    pub fn remember(&mut self, at_ms: i64, replicas: i32) {
        self.recommendations.push((at_ms, replicas));
    }

    /// One reconcile at `now_ms` with `spec.replicas = current` and the largest per-metric
    /// recommendation `metric_desired` (`None` when the metrics are invalid: no change). Returns
    /// the replicas to write (equal to `current` for no change) and records the scale event.
    pub fn reconcile(&mut self, now_ms: i64, current: i32, metric_desired: Option<i32>) -> i32 {
        let desired = if current == 0 && self.min_replicas != 0 {
            // Autoscaling is disabled for a target scaled to zero.
            0
        } else if current > self.max_replicas {
            self.max_replicas
        } else if current < self.min_replicas {
            self.min_replicas
        } else {
            match metric_desired {
                Some(d) => self.normalize(now_ms, current, d),
                None => current,
            }
        };
        if desired != current {
            self.store_event(now_ms, desired - current);
        }
        desired
    }

    /// `normalizeDesiredReplicasWithBehaviors`: stabilization, then the rate policies and the
    /// bounds.
    pub fn normalize(&mut self, now_ms: i64, current: i32, desired: i32) -> i32 {
        let stabilized = self.stabilize(now_ms, current, desired);
        self.rate_limit(now_ms, current, stabilized)
    }

    fn stabilize(&mut self, now_ms: i64, current: i32, desired: i32) -> i32 {
        let up_cutoff = now_ms - self.behavior.scale_up.stabilization_window_s * 1000;
        let down_cutoff = now_ms - self.behavior.scale_down.stabilization_window_s * 1000;
        let mut up = desired;
        let mut down = desired;
        let mut old = None;
        for (i, &(at, rec)) in self.recommendations.iter().enumerate() {
            if at > up_cutoff {
                up = up.min(rec);
            }
            if at > down_cutoff {
                down = down.max(rec);
            }
            if at < up_cutoff && at < down_cutoff {
                old = Some(i);
            }
        }
        let mut recommendation = current;
        if recommendation < up {
            recommendation = up;
        }
        if recommendation > down {
            recommendation = down;
        }
        match old {
            Some(i) => self.recommendations[i] = (now_ms, desired),
            None => self.recommendations.push((now_ms, desired)),
        }
        recommendation
    }

    fn change_in_period(events: &[Event], now_ms: i64, period_s: i64) -> i32 {
        let cutoff = now_ms - period_s * 1000;
        events
            .iter()
            .filter(|e| e.at_ms > cutoff)
            .map(|e| e.change)
            .sum()
    }

    fn limit(&self, now_ms: i64, current: i32, up: bool) -> i32 {
        let rules = if up {
            &self.behavior.scale_up
        } else {
            &self.behavior.scale_down
        };
        let pick = |a: i32, b: i32| match (rules.select, up) {
            (Select::Max, true) | (Select::Min, false) => a.max(b),
            _ => a.min(b),
        };
        let mut result = match (rules.select, up) {
            (Select::Disabled, _) => return current,
            (Select::Max, true) | (Select::Min, false) => i32::MIN,
            _ => i32::MAX,
        };
        for policy in &rules.policies {
            let period_s = match *policy {
                ScalingPolicy::Pods { period_s, .. } | ScalingPolicy::Percent { period_s, .. } => {
                    period_s
                }
            };
            let added = Self::change_in_period(&self.up_events, now_ms, period_s);
            let deleted = Self::change_in_period(&self.down_events, now_ms, period_s);
            let start = current - added + deleted;
            let proposed = match (*policy, up) {
                (ScalingPolicy::Pods { value, .. }, true) => start.saturating_add(value),
                (ScalingPolicy::Pods { value, .. }, false) => start - value,
                (ScalingPolicy::Percent { value, .. }, true) => {
                    ceil_i32(f64::from(start) * (1.0 + f64::from(value) / 100.0))
                }
                #[allow(clippy::cast_possible_truncation)]
                (ScalingPolicy::Percent { value, .. }, false) => {
                    (f64::from(start) * (1.0 - f64::from(value) / 100.0)) as i32
                }
            };
            result = pick(result, proposed);
        }
        result
    }

    fn rate_limit(&self, now_ms: i64, current: i32, desired: i32) -> i32 {
        if desired > current {
            let up_limit = self.limit(now_ms, current, true).max(current);
            let maximum = self.max_replicas.min(up_limit);
            desired.min(maximum)
        } else if desired < current {
            let down_limit = self.limit(now_ms, current, false).min(current);
            let minimum = self.min_replicas.max(down_limit);
            desired.max(minimum)
        } else {
            desired
        }
    }

    fn store_event(&mut self, now_ms: i64, change: i32) {
        let longest = |rules: &Rules| {
            rules
                .policies
                .iter()
                .map(|p| match *p {
                    ScalingPolicy::Pods { period_s, .. }
                    | ScalingPolicy::Percent { period_s, .. } => period_s,
                })
                .max()
                .unwrap_or(0)
        };
        let up_keep = now_ms - longest(&self.behavior.scale_up) * 1000;
        let down_keep = now_ms - longest(&self.behavior.scale_down) * 1000;
        self.up_events.retain(|e| e.at_ms > up_keep);
        self.down_events.retain(|e| e.at_ms > down_keep);
        if change > 0 {
            self.up_events.push(Event {
                at_ms: now_ms,
                change,
            });
        } else if change < 0 {
            self.down_events.push(Event {
                at_ms: now_ms,
                change: -change,
            });
        }
    }
}

#[cfg(test)]
mod tests;
