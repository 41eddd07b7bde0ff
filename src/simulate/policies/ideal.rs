//! `ideal`: for each sync interval, the fewest replicas that serve every request of the interval
//! as well as `maxReplicas` would (within the TTFT objective), with zero start-up time. It looks
//! at the coming arrivals, so no real policy can reach it: a lower bound.

use llmscaler_loadmodel::Fleet;

use crate::simulate::replay::{Autoscaler, View};

/// The clairvoyant lower bound.
#[derive(Debug)]
pub struct IdealPolicy {
    /// `spec.minReplicas`.
    pub min_replicas: i32,
    /// `spec.maxReplicas` (the best achievable is judged at this size).
    pub max_replicas: i32,
    /// Interval length, milliseconds.
    pub period_ms: i64,
}

impl IdealPolicy {
    /// Requests of the interval (and the backlog) served within the objective with `n`
    /// replicas: a copy of the fleet gets `n` Ready replicas, the interval's arrivals, and one
    /// objective's time after the interval to serve them. Negative when fewer replicas drop
    /// requests already served in time (a dropped request is a miss: docs/simulate/README.md).
    fn score(&self, view: &View<'_>, now_ms: i64, n: i32) -> i64 {
        let fleet: &Fleet = view.cluster.fleet();
        let (_, before) = fleet.served_within();
        let mut copy = fleet.probe_copy();
        let t_s = now_ms as f64 / 1000.0;
        copy.set_ready(t_s, &view.cluster.names_after_scale(n));
        for r in view.upcoming {
            copy.arrive(*r);
        }
        let slo = fleet.params().slo_ttft_s;
        copy.advance_to(t_s + self.period_ms as f64 / 1000.0 + slo);
        i64::try_from(copy.served_within().1).unwrap_or(i64::MAX)
            - i64::try_from(before).unwrap_or(i64::MAX)
    }
}

impl Autoscaler for IdealPolicy {
    fn period_ms(&self) -> i64 {
        self.period_ms
    }

    fn reads_metrics(&self) -> bool {
        false
    }

    fn decide(&mut self, now_ms: i64, view: &View<'_>) -> i32 {
        let busy = view.cluster.fleet().outstanding() > 0 || !view.upcoming.is_empty();
        let lower = self.min_replicas.max(i32::from(busy));
        let upper = self.max_replicas.max(lower);
        if lower == upper {
            return lower;
        }
        let best = self.score(view, now_ms, upper);
        let (mut lo, mut hi) = (lower, upper);
        while lo < hi {
            let mid = lo + (hi - lo) / 2;
            if self.score(view, now_ms, mid) >= best {
                hi = mid;
            } else {
                lo = mid + 1;
            }
        }
        lo
    }
}
