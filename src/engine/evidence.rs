//! The evidence bound (docs/guards.md#evidence-bound): a metric's ratio measured on the Ready
//! replicas supports at most doubling them per sync, and a reading that fell since the previous
//! sync supports no scale-up at all.
//!
//! `ceil(ready × value / target)` assumes the value falls in proportion as replicas are added.
//! For a latency or a queue read far above its target this does not hold: once the Ready
//! replicas are saturated, TTFT and the queue grow with the time spent saturated, not with the
//! demand, so a TTFT 20× its target says "more replicas", not "20× the replicas". The bound is
//! HorizontalPodAutoscaler's default `Percent` step (100 %), measured from the **Ready**
//! replicas, not from `spec.replicas`: replicas still starting count as the coming capacity they
//! are, and the bound grows only as fast as replicas actually become Ready, so a metric that
//! stays high while they start cannot compound.
//!
//! The falling hold: a queue or a latency that is lower than at the previous sync is being
//! served faster than it builds, so the Ready replicas already exceed the arrivals. What remains
//! above the target is backlog (a queue piled up on the replicas that were Ready during a start-up
//! stays on them: vLLM queues per pod and requests are routed on arrival) or a lagging
//! quantile window; more replicas do not serve it sooner. Such a reading holds the fleet
//! (recommends at most `spec.replicas`); the next reading that rises again may step.
//!
//! The capacity recommender (`spec.capacity`) and the Custom provider's decision are not
//! bounded: both are estimates of demand in replicas, not a ratio of a reading of the Ready ones.
//! No bound depends on them either: a `replicaRequestsPerSecond` wrong for the model or the
//! request mix must not keep the metrics, the safety net for it, from raising the fleet.

use std::collections::BTreeMap;

use super::MetricOutcome;

/// The step, percent of the Ready replicas (HPA's default `Percent` policy).
pub const STEP_PERCENT: i64 = 100;

/// The most replicas a metric read on `ready` Ready replicas may recommend while `spec`
/// replicas are requested: `max(ceil(ready × (1 + STEP_PERCENT/100)), spec)` with `ready`
/// counted as at least 1 (as the ratio's baseline). Never below `spec`: a metric far above its
/// target never reads as a scale-down because it was bounded.
///
/// Worked numbers: 1 Ready of 1 → 2; 10 Ready of 10 → 20; 1 Ready of 5 requested → 5.
pub fn bound(ready: i32, spec: i32) -> i32 {
    let base = i64::from(ready.max(1));
    // Integer ceil(base × (100 + percent) / 100); base ≥ 1, so the numerator is positive.
    let step = (base * (100 + STEP_PERCENT) + 99) / 100;
    i32::try_from(step).unwrap_or(i32::MAX).max(spec)
}

/// Whether a reading `value` that fell below the `previous` sync's reading of the same metric
/// holds the fleet: both finite and `value < previous`. `None` (no previous reading: the first
/// sync, a restart, a skipped metric) never holds.
///
/// Worked numbers: 80.56 then 79.67 → holds; 0.76 then 1.50 → does not; 1.50 then 1.50 → does
/// not (a reading that stays high is a shortage that persists).
pub fn falling(value: f64, previous: Option<f64>) -> bool {
    previous.is_some_and(|p| p.is_finite() && value.is_finite() && value < p)
}

/// What [`apply`] did to the metric recommendations.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Bounded {
    /// The Ready step, when it lowered a recommendation ([`bound`]).
    pub step: Option<i32>,
    /// A falling reading was held at `spec.replicas` ([`falling`]).
    pub falling: bool,
}

/// Lowers every measured metric recommendation above [`bound`]`(ready, spec)` to it, and every
/// recommendation above `spec` whose reading fell since `previous` (the last sync's values by
/// metric name) to `spec`.
pub fn apply<E>(
    outcomes: &mut [MetricOutcome<E>],
    ready: i32,
    spec: i32,
    previous: &BTreeMap<String, f64>,
) -> Bounded {
    let limit = bound(ready, spec);
    let mut bounded = Bounded::default();
    for outcome in outcomes.iter_mut() {
        let was_falling = outcome
            .value
            .is_some_and(|v| falling(v, previous.get(&outcome.name).copied()));
        if let Ok(r) = outcome.recommendation.as_mut() {
            if *r > spec && was_falling {
                *r = spec;
                bounded.falling = true;
            } else if *r > limit {
                *r = limit;
                bounded.step = Some(limit);
            }
        }
    }
    bounded
}

/// The readings of `outcomes` to remember for the next sync's [`apply`] (the measured values by
/// metric name).
pub fn readings<E>(outcomes: &[MetricOutcome<E>]) -> BTreeMap<String, f64> {
    outcomes
        .iter()
        .filter_map(|o| {
            o.value
                .filter(|v| v.is_finite())
                .map(|v| (o.name.clone(), v))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn outcome(name: &str, value: f64, r: i32) -> MetricOutcome<String> {
        MetricOutcome::<String> {
            name: name.into(),
            value: Some(value),
            ratio: None,
            recommendation: Ok(r),
            guardrail: false,
        }
    }

    #[test]
    fn doubles_the_ready_replicas() {
        // (ready, spec) -> bound
        for (ready, spec, want) in [
            (1, 1, 2),
            (0, 0, 2),
            (0, 3, 3),
            (2, 2, 4),
            (4, 4, 8),
            (5, 5, 10),
            (10, 10, 20),
            (1, 5, 5),
            (1, 12, 12),
            (100, 100, 200),
            (i32::MAX, i32::MAX, i32::MAX),
        ] {
            assert_eq!(bound(ready, spec), want, "ready {ready} spec {spec}");
        }
    }

    #[test]
    fn only_recommendations_above_the_bound_are_lowered() {
        let none = BTreeMap::new();
        let mut outcomes = [outcome("a", 1.0, 2), outcome("b", 20.0, 24)];
        let b = apply(&mut outcomes, 1, 1, &none);
        assert_eq!(
            b,
            Bounded {
                step: Some(2),
                falling: false
            }
        );
        assert_eq!(outcomes[0].recommendation, Ok(2));
        assert_eq!(outcomes[1].recommendation, Ok(2));
        assert_eq!(apply(&mut outcomes, 1, 1, &none), Bounded::default());
    }

    #[test]
    fn a_falling_reading_is_held_and_a_rising_one_steps() {
        // The conversation trace at scale 16, cold (docs/guards.md#evidence-bound): 61 Ready of
        // 61, the queue piled up on the first replica reads avg(waiting) 79.67 against 8
        // (ceil(61 × 9.96) = 608, bounded to 122) after 80.56 at the previous sync: it drains,
        // so it holds at 61. The TTFT p90 at 0.33 s asks for 24: below spec, left alone.
        let previous = BTreeMap::from([("waiting".to_owned(), 80.56), ("ttft".to_owned(), 0.37)]);
        let mut outcomes = [outcome("waiting", 79.67, 608), outcome("ttft", 0.33, 24)];
        let b = apply(&mut outcomes, 61, 61, &previous);
        assert_eq!(
            b,
            Bounded {
                step: None,
                falling: true
            }
        );
        assert_eq!(outcomes[0].recommendation, Ok(61));
        assert_eq!(outcomes[1].recommendation, Ok(24));
        // The code trace at scale 4, warm: TTFT p90 0.66 s then 0.85 s on 42 Ready (target
        // 0.85 s, 43): rising, it steps.
        let previous = BTreeMap::from([("ttft".to_owned(), 0.66)]);
        let mut outcomes = [outcome("ttft", 0.85, 43)];
        assert_eq!(apply(&mut outcomes, 42, 42, &previous), Bounded::default());
        assert_eq!(outcomes[0].recommendation, Ok(43));
        // Still falling but the step is larger than the Ready replicas support: held at spec
        // (the hold wins, it is lower).
        let previous = BTreeMap::from([("ttft".to_owned(), 20.0)]);
        let mut outcomes = [outcome("ttft", 17.0, 20)];
        let b = apply(&mut outcomes, 1, 1, &previous);
        assert_eq!(
            (b.falling, outcomes[0].recommendation.clone()),
            (true, Ok(1))
        );
    }

    #[test]
    fn falling_needs_two_finite_readings() {
        for (value, previous, want) in [
            (79.67, Some(80.56), true),
            (1.50, Some(0.76), false),
            (1.50, Some(1.50), false),
            (1.0, None, false),
            (f64::NAN, Some(2.0), false),
            (1.0, Some(f64::NAN), false),
            (1.0, Some(f64::INFINITY), false),
        ] {
            assert_eq!(falling(value, previous), want, "{value} after {previous:?}");
        }
    }

    #[test]
    fn readings_keep_the_finite_values_by_name() {
        let mut nan = outcome("b", f64::NAN, 0);
        nan.value = Some(f64::NAN);
        let mut skipped = outcome("c", 0.0, 0);
        skipped.value = None;
        let got = readings(&[outcome("a", 1.5, 3), nan, skipped]);
        assert_eq!(got, BTreeMap::from([("a".to_owned(), 1.5)]));
    }
}
