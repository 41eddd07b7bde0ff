//! `reactive`: an upper bound on the attainment of any policy that keeps no spare replicas
//! (docs/simulate/README.md#comparators). It starts with the run's initial replicas and, at the
//! first sync where `ideal` (clairvoyant about the coming interval) needs more than it has, it
//! buys `ideal`'s peak for the rest of the run, written one scrape later (a real policy reads
//! metrics a scrape old). Every replica it adds takes the start-up time to become Ready, as for
//! every other policy of the run. No policy that reacts to the present can have more replicas
//! Ready sooner after that first need, so where `reactive` misses the SLO (a cold start, a flash
//! crowd), the target is out of reach without replicas kept in advance. Its cost is not a
//! target (it keeps the peak).

use super::IdealPolicy;
use crate::simulate::replay::{Autoscaler, View};

/// `ideal`'s peak, bought one scrape after `ideal` first needs more than the fleet has.
#[derive(Debug)]
pub struct ReactivePolicy {
    ideal: IdealPolicy,
    /// Milliseconds between seeing the need and writing (one scrape interval).
    delay_ms: i64,
    /// `ideal`'s peak, replicas.
    peak: i32,
    /// The replicas at the start.
    initial: i32,
    /// When `ideal` first needed more than `initial`, ms.
    needed_at: Option<i64>,
}

impl ReactivePolicy {
    /// The bound for `ideal`'s sizing and its `peak` (replicas), written `delay_ms`
    /// milliseconds after the first need.
    pub fn new(ideal: IdealPolicy, delay_ms: i64, peak: i32) -> Self {
        Self {
            ideal,
            delay_ms: delay_ms.max(0),
            peak,
            initial: 0,
            needed_at: None,
        }
    }

    /// The replicas at `now_ms` given `ideal`'s choice for the coming interval.
    fn replicas(&mut self, now_ms: i64, chosen: i32) -> i32 {
        if self.needed_at.is_none() && chosen > self.initial {
            self.needed_at = Some(now_ms);
        }
        match self.needed_at {
            Some(at) if now_ms >= at + self.delay_ms => self.peak.max(self.initial),
            Some(_) | None => self.initial,
        }
    }
}

impl Autoscaler for ReactivePolicy {
    fn period_ms(&self) -> i64 {
        self.ideal.period_ms
    }

    fn reads_metrics(&self) -> bool {
        false
    }

    fn warm_start(&mut self, replicas: i32) {
        self.initial = replicas;
    }

    fn decide(&mut self, now_ms: i64, view: &View<'_>) -> i32 {
        let chosen = self.ideal.decide(now_ms, view);
        self.replicas(now_ms, chosen)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buys_the_peak_one_scrape_after_the_first_need() {
        let ideal = IdealPolicy {
            min_replicas: 1,
            max_replicas: 128,
            period_ms: 15_000,
        };
        let mut policy = ReactivePolicy::new(ideal, 15_000, 64);
        policy.warm_start(2);
        // ideal needs 2, 2, then 5 at 30 s: the peak (64) is written at 45 s and kept.
        assert_eq!(policy.replicas(0, 2), 2);
        assert_eq!(policy.replicas(15_000, 1), 2);
        assert_eq!(policy.replicas(30_000, 5), 2);
        assert_eq!(policy.replicas(45_000, 3), 64);
        assert_eq!(policy.replicas(60_000, 1), 64);
    }
}
