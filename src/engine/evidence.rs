//! The evidence bound (docs/guards.md#evidence-bound): a metric's ratio measured on the Ready
//! replicas supports at most doubling them per sync, and, when `spec.capacity` sizes the demand,
//! at most doubling what that demand needs.
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
//! The demand anchor: with `spec.capacity`, the request rate (plus the backlog) gives the
//! replicas the demand needs, `C`; a metric may then recommend at most the same 100 % step above
//! `C`. A reading that the demand does not explain (a queue piled up on the replicas that were
//! Ready during a start-up, which vLLM does not hand to new replicas; a lagging 1-minute TTFT
//! quantile after a burst has passed) is not multiplied into replicas the demand never needed.
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
    step(ready).max(spec)
}

/// The bound with the demand anchor: `max(min(step(ready), step(demand)), spec)`, where
/// `demand` is the capacity recommender's replicas for this sync (`None` without
/// `spec.capacity` or when its reading was skipped: then [`bound`]). `demand` counts as at least
/// 1 replica, so a metric can always ask for 2 while the request rate reads 0.
///
/// Worked numbers (docs/guards.md#evidence-bound): 10 Ready of 10, demand 6 → `min(20, 12)` =
/// 12; 61 Ready of 61, demand 37 → `min(122, 74)` = 74; 61 Ready of 61, demand 20 →
/// `max(min(122, 40), 61)` = 61 (hold).
pub fn anchored_bound(ready: i32, spec: i32, demand: Option<i32>) -> i32 {
    match demand {
        Some(d) => step(ready).min(step(d)).max(spec),
        None => bound(ready, spec),
    }
}

/// One 100 % step above `base` replicas (`base` counted as at least 1).
fn step(base: i32) -> i32 {
    let base = i64::from(base.max(1));
    // Integer ceil(base × (100 + percent) / 100); base ≥ 1, so the numerator is positive.
    let step = (base * (100 + STEP_PERCENT) + 99) / 100;
    i32::try_from(step).unwrap_or(i32::MAX)
}

/// Lowers every measured metric recommendation above [`anchored_bound`]`(ready, spec,
/// demand)` to it. Returns the bound when any recommendation was lowered.
pub fn apply<E>(
    outcomes: &mut [MetricOutcome<E>],
    ready: i32,
    spec: i32,
    demand: Option<i32>,
) -> Option<i32> {
    let limit = anchored_bound(ready, spec, demand);
    let mut lowered = false;
    for outcome in outcomes.iter_mut() {
        if let Ok(r) = outcome.recommendation.as_mut()
            && *r > limit
        {
            *r = limit;
            lowered = true;
        }
    }
    lowered.then_some(limit)
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
        assert_eq!(apply(&mut outcomes, 1, 1, None), Some(2));
        assert_eq!(outcomes[0].recommendation, Ok(2));
        assert_eq!(outcomes[1].recommendation, Ok(2));
        assert_eq!(apply(&mut outcomes, 1, 1, None), None);
    }

    #[test]
    fn the_demand_lowers_what_it_does_not_explain() {
        let outcome = |r: i32| MetricOutcome::<String> {
            name: "m".into(),
            value: None,
            ratio: None,
            recommendation: Ok(r),
            guardrail: false,
        };
        // The conversation trace at scale 16, cold: avg(waiting) 79.7 against 8 on 61 Ready
        // (ceil(61 × 9.96) = 608), demand 37: lowered to 74; a metric at 30 is left alone.
        let mut outcomes = [outcome(608), outcome(30)];
        assert_eq!(apply(&mut outcomes, 61, 61, Some(37)), Some(74));
        assert_eq!(outcomes[0].recommendation, Ok(74));
        assert_eq!(outcomes[1].recommendation, Ok(30));
        // The code trace at scale 1, warm: TTFT p90 1.50 s against 0.85 s on 10 Ready
        // (ceil(10 × 1.76) = 18), demand 6: 12.
        let mut outcomes = [outcome(18)];
        assert_eq!(apply(&mut outcomes, 10, 10, Some(6)), Some(12));
        assert_eq!(outcomes[0].recommendation, Ok(12));
    }

    #[test]
    fn the_demand_anchor_bounds_what_the_request_rate_does_not_explain() {
        // (ready, spec, demand) -> bound
        for (ready, spec, demand, want) in [
            // No capacity model (or its reading skipped): the Ready step alone.
            (10, 10, None, 20),
            // The code trace at scale 1, warm (docs/guards.md): a burst has passed, the
            // 1-minute TTFT p90 still reads 1.50 s against 0.85 s on 10 Ready replicas
            // (ceil(10 × 1.76) = 18), the request rate sizes 6: 12, not 18.
            (10, 10, Some(6), 12),
            // The conversation trace at scale 16, cold: the queue that piled up on the first
            // replica keeps avg(waiting) at 80 on 61 Ready (ratio 10), the demand sizes 37.
            (61, 61, Some(37), 74),
            // The demand needs fewer than spec: the metrics hold, they never lower.
            (61, 61, Some(20), 61),
            // A cold start: 1 Ready, demand 14: the Ready step (2) is the tighter one.
            (1, 10, Some(14), 10),
            (1, 1, Some(14), 2),
            // A demand of 0 (nothing completes yet) still lets a metric ask for 2.
            (1, 1, Some(0), 2),
            (i32::MAX, i32::MAX, Some(i32::MAX), i32::MAX),
        ] {
            assert_eq!(
                anchored_bound(ready, spec, demand),
                want,
                "ready {ready} spec {spec} demand {demand:?}"
            );
        }
    }
}
