//! `reactive`: the attainment of a policy that keeps no spare replicas and buys nothing for a
//! backlog (docs/simulate/README.md#comparators). It starts with the run's initial replicas and keeps
//! every replica `ideal` (clairvoyant about the coming interval only) has needed so far: at each
//! sync it asks the most replicas `ideal` chose up to one scrape ago (a real policy reads
//! metrics a scrape old), and never scales down. Every replica it adds takes the start-up time
//! to become Ready, as for every other policy of the run. It is not an upper bound: a policy
//! that also buys replicas for the queue piled up while others start serves it sooner (the
//! recommended scaler passes it on cold starts of the conversation trace). Its cost is not a
//! target (it never scales down).

use std::collections::VecDeque;

use super::IdealPolicy;
use crate::simulate::replay::{Autoscaler, View};

/// The most replicas `ideal` has needed so far, written one scrape after each need.
#[derive(Debug)]
pub struct ReactivePolicy {
    ideal: IdealPolicy,
    /// Milliseconds between seeing a need and writing it (one scrape interval).
    delay_ms: i64,
    /// The replicas at the start.
    initial: i32,
    /// `ideal`'s choices not yet seen, (ms, replicas), oldest first.
    pending: VecDeque<(i64, i32)>,
    /// The most replicas `ideal` chose among the choices seen.
    held: i32,
}

impl ReactivePolicy {
    /// The bound for `ideal`'s sizing, writing each need `delay_ms` milliseconds after it.
    pub fn new(ideal: IdealPolicy, delay_ms: i64) -> Self {
        Self {
            ideal,
            delay_ms: delay_ms.max(0),
            initial: 0,
            pending: VecDeque::new(),
            held: 0,
        }
    }

    /// The replicas at `now_ms` given `ideal`'s choice for the coming interval.
    fn replicas(&mut self, now_ms: i64, chosen: i32) -> i32 {
        self.pending.push_back((now_ms, chosen));
        while let Some(&(at, n)) = self.pending.front() {
            if at + self.delay_ms > now_ms {
                break;
            }
            self.held = self.held.max(n);
            self.pending.pop_front();
        }
        self.held.max(self.initial)
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
    fn keeps_the_most_needed_so_far_one_scrape_late() {
        let ideal = IdealPolicy {
            min_replicas: 1,
            max_replicas: 128,
            period_ms: 15_000,
        };
        let mut policy = ReactivePolicy::new(ideal, 15_000);
        policy.warm_start(2);
        // ideal needs 2, 1, then 5 at 30 s, 3, then 9 at 60 s (a flash crowd): each need is
        // written one scrape (15 s) later and kept; nothing is bought before it is needed.
        assert_eq!(policy.replicas(0, 2), 2);
        assert_eq!(policy.replicas(15_000, 1), 2);
        assert_eq!(policy.replicas(30_000, 5), 2);
        assert_eq!(policy.replicas(45_000, 3), 5);
        assert_eq!(policy.replicas(60_000, 9), 5);
        assert_eq!(policy.replicas(75_000, 1), 9);
        assert_eq!(policy.replicas(90_000, 1), 9);
    }
}
