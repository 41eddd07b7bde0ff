//! The evidence bound (docs/guards.md#evidence-bound): a metric's ratio measured on the Ready
//! replicas supports at most doubling them per sync.
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
//! The capacity recommender (`spec.capacity`) and the Custom provider's decision are not
//! bounded: both are estimates of demand in replicas, not a ratio of a reading of the Ready ones.

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

/// Lowers every measured metric recommendation above [`bound`] to it. Returns whether any
/// was lowered.
pub fn apply<E>(outcomes: &mut [MetricOutcome<E>], ready: i32, spec: i32) -> bool {
    let limit = bound(ready, spec);
    let mut lowered = false;
    for outcome in outcomes.iter_mut() {
        if let Ok(r) = outcome.recommendation.as_mut()
            && *r > limit
        {
            *r = limit;
            lowered = true;
        }
    }
    lowered
}

#[cfg(test)]
mod tests {
    use super::*;

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
        let outcome = |r: i32| MetricOutcome::<String> {
            name: "m".into(),
            value: None,
            ratio: None,
            recommendation: Ok(r),
            guardrail: false,
        };
        let mut outcomes = [outcome(2), outcome(24)];
        assert!(apply(&mut outcomes, 1, 1));
        assert_eq!(outcomes[0].recommendation, Ok(2));
        assert_eq!(outcomes[1].recommendation, Ok(2));
        assert!(!apply(&mut outcomes, 1, 1));
    }
}
