//! Scale-up policy and tolerance (docs/guards.md#scale-up-policy): the HorizontalPodAutoscaler's
//! `behavior.scaleUp` rate cap and its tolerance band, both opt-in (without them scale-up is
//! immediate, as the reference operator does).
//!
//! Source: Kubernetes HPA, `calculateScaleUpLimitWithScalingRules` and "Configurable scaling
//! behavior" in the HorizontalPodAutoscaler documentation.

use llmscaler_api::{LLMScalerSpec, ScaleUpPolicyType, SelectPolicy, parse_tolerance};

use super::{History, MetricOutcome};

/// Longest policy period, ms (HPA: 1800 s); older changes are forgotten.
pub(crate) const MAX_PERIOD_MS: i64 = 1_800_000;

/// One rate cap.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RateCap {
    /// Pods or percent.
    pub kind: ScaleUpPolicyType,
    /// Pods, or percent of the replicas at the start of the period.
    pub value: i32,
    /// The period, ms.
    pub period_ms: i64,
}

/// The scale-up rules of a spec.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ScaleUpRules {
    /// The rate caps; empty = no cap.
    pub caps: Vec<RateCap>,
    /// Which cap applies among several.
    pub select: SelectPolicy,
    /// Tolerance band on `value / target`, 0..1; `None` = no band.
    pub tolerance: Option<f64>,
}

impl ScaleUpRules {
    /// The rules of a (validated) spec; an unparsable tolerance is ignored (admission refuses it).
    pub(crate) fn from_spec(spec: &LLMScalerSpec) -> Self {
        let Some(scale_up) = &spec.scale_up else {
            return Self::default();
        };
        Self {
            caps: scale_up
                .policies
                .iter()
                .flatten()
                .map(|p| RateCap {
                    kind: p.type_,
                    value: p.value.max(0),
                    period_ms: i64::from(p.period_seconds.clamp(1, 1800)) * 1000,
                })
                .collect(),
            select: scale_up.select_policy.unwrap_or_default(),
            tolerance: scale_up
                .tolerance
                .as_deref()
                .and_then(|t| parse_tolerance(t).ok()),
        }
    }

    /// The most replicas a scale-up from `current` may reach at `now_ms`, given the changes in
    /// `history` (HPA: for each cap, the replicas at the start of its period are `current` minus
    /// the pods added plus the pods removed within it; `Pods` allows `start + value`, `Percent`
    /// `ceil(start × (1 + value/100))`; `Max` picks the largest, `Min` the smallest; never below
    /// `current`). `None` without caps.
    pub fn limit(&self, current: i32, history: &History, now_ms: i64) -> Option<i32> {
        if self.caps.is_empty() {
            return None;
        }
        let proposals = self.caps.iter().map(|cap| {
            let (added, removed) = history.changes_within(now_ms, cap.period_ms);
            let start = i64::from(current) - added + removed;
            let proposed = match cap.kind {
                ScaleUpPolicyType::Pods => start + i64::from(cap.value),
                ScaleUpPolicyType::Percent => {
                    // Integer ceil(start * (100 + value) / 100), exact for every int32.
                    let numerator = start.max(0) * (100 + i64::from(cap.value));
                    (numerator + 99) / 100
                }
            };
            proposed.clamp(0, i64::from(i32::MAX))
        });
        let limit = match self.select {
            SelectPolicy::Max => proposals.max(),
            SelectPolicy::Min => proposals.min(),
        }?;
        Some(i32::try_from(limit).unwrap_or(i32::MAX).max(current))
    }

    /// The tolerance band: a metric whose `value / target` is within `tolerance` of 1 recommends
    /// `current` (no change). Returns whether any outcome changed.
    pub(crate) fn apply_tolerance<E>(
        &self,
        outcomes: &mut [MetricOutcome<E>],
        current: i32,
    ) -> bool {
        let Some(tolerance) = self.tolerance else {
            return false;
        };
        let mut changed = false;
        for outcome in outcomes.iter_mut() {
            if let (Some(ratio), Ok(r)) = (outcome.ratio, outcome.recommendation.as_mut())
                && (ratio - 1.0).abs() <= tolerance
                && *r != current
            {
                *r = current;
                changed = true;
            }
        }
        changed
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rules(caps: &[(ScaleUpPolicyType, i32, i64)], select: SelectPolicy) -> ScaleUpRules {
        ScaleUpRules {
            caps: caps
                .iter()
                .map(|&(kind, value, seconds)| RateCap {
                    kind,
                    value,
                    period_ms: seconds * 1000,
                })
                .collect(),
            select,
            tolerance: None,
        }
    }

    #[test]
    fn hpa_default_scale_up_is_max_of_100_percent_and_4_pods_per_15_s() {
        use ScaleUpPolicyType::{Percent, Pods};
        let hpa = rules(&[(Percent, 100, 15), (Pods, 4, 15)], SelectPolicy::Max);
        let none = History::default();
        // (current) -> limit
        for (current, want) in [(1, 5), (2, 6), (4, 8), (5, 10), (10, 20), (0, 4)] {
            assert_eq!(hpa.limit(current, &none, 0), Some(want), "from {current}");
        }
        let min = rules(&[(Percent, 100, 15), (Pods, 4, 15)], SelectPolicy::Min);
        assert_eq!(min.limit(10, &none, 0), Some(14));
        assert_eq!(ScaleUpRules::default().limit(3, &none, 0), None);
    }

    #[test]
    fn changes_inside_the_period_count_against_it() {
        use ScaleUpPolicyType::Pods;
        let cap = rules(&[(Pods, 2, 60)], SelectPolicy::Max);
        let mut history = History::default();
        history.note_change(0, 2); // 2 -> 4 at t=0
        // At t=30 s from 4: the period started at 2, so at most 4: no further scale-up.
        assert_eq!(cap.limit(4, &history, 30_000), Some(4));
        // A scale-down of 1 inside the period gives that pod back.
        history.note_change(40_000, -1);
        assert_eq!(cap.limit(3, &history, 45_000), Some(4));
        // Once the period has passed, from 3 the cap is 5.
        assert_eq!(cap.limit(3, &history, 100_001), Some(5));
    }

    #[test]
    fn tolerance_keeps_the_current_count_inside_the_band() {
        let band = ScaleUpRules {
            tolerance: Some(0.1),
            ..ScaleUpRules::default()
        };
        let outcome = |ratio: f64, r: i32| MetricOutcome::<String> {
            name: "m".into(),
            value: Some(ratio),
            ratio: Some(ratio),
            recommendation: Ok(r),
            guardrail: false,
        };
        let mut outcomes = [outcome(1.08, 6), outcome(0.9, 5), outcome(1.2, 7)];
        assert!(band.apply_tolerance(&mut outcomes, 5));
        let got: Vec<i32> = outcomes
            .iter()
            .map(|o| o.recommendation.clone().expect("ok"))
            .collect();
        assert_eq!(got, [5, 5, 7]);
    }
}
