//! The hold queue of one Service: pure, no I/O (docs/scaling.md#holding-requests-while-waking-from-zero).
//! Requests wait in arrival order, at most `max` at once; beyond it the next is refused (the
//! caller answers `503` with `Retry-After`). A request leaves when it is released (in arrival
//! order, once a replica is Ready), when its hold times out or when its client goes away.

use std::collections::VecDeque;

/// A held request's place in the queue.
pub(crate) type Ticket = u64;

/// Requests of one Service waiting for a Ready replica, in arrival order.
#[derive(Debug)]
pub(crate) struct HoldQueue<T> {
    waiting: VecDeque<(Ticket, T)>,
    max: usize,
    next: Ticket,
    /// Requests held since the start, for the operator's wake-up (monotonic).
    held_total: u64,
    /// Requests refused because the queue was full, since the start.
    refused_total: u64,
}

impl<T> HoldQueue<T> {
    /// An empty queue that holds at most `max` requests (at least 1).
    pub(crate) fn new(max: usize) -> Self {
        Self {
            waiting: VecDeque::new(),
            max: max.max(1),
            next: 0,
            held_total: 0,
            refused_total: 0,
        }
    }

    /// Changes the bound (requests already held stay).
    pub(crate) fn set_max(&mut self, max: usize) {
        self.max = max.max(1);
    }

    /// Holds `item` behind the others; `Err(item)` when `max` are held already.
    pub(crate) fn hold(&mut self, item: T) -> Result<Ticket, T> {
        if self.waiting.len() >= self.max {
            self.refused_total += 1;
            return Err(item);
        }
        let ticket = self.next;
        self.next += 1;
        self.held_total += 1;
        self.waiting.push_back((ticket, item));
        Ok(ticket)
    }

    /// Takes every held request out, in arrival order (a replica is Ready).
    pub(crate) fn release_all(&mut self) -> Vec<T> {
        self.waiting.drain(..).map(|(_, item)| item).collect()
    }

    /// Removes the request of `ticket` (timed out, or its client went away); whether it was
    /// still held.
    pub(crate) fn remove(&mut self, ticket: Ticket) -> bool {
        match self.waiting.iter().position(|(t, _)| *t == ticket) {
            Some(at) => self.waiting.remove(at).is_some(),
            None => false,
        }
    }

    /// Requests held now.
    pub(crate) fn len(&self) -> usize {
        self.waiting.len()
    }

    /// Requests held since the start (monotonic).
    pub(crate) fn held_total(&self) -> u64 {
        self.held_total
    }

    /// Requests refused since the start (monotonic).
    pub(crate) fn refused_total(&self) -> u64 {
        self.refused_total
    }
}

/// The `Retry-After` of a refused or timed-out request, whole seconds: the time a held
/// request waits at most, at least 1 (the fleet is waking; retrying sooner finds it asleep).
pub(crate) fn retry_after_seconds(hold_timeout_seconds: u64) -> u64 {
    hold_timeout_seconds.clamp(1, 30)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn holds_up_to_the_bound_and_releases_in_arrival_order() {
        let mut queue = HoldQueue::new(3);
        assert_eq!(queue.hold("a"), Ok(0));
        assert_eq!(queue.hold("b"), Ok(1));
        assert_eq!(queue.hold("c"), Ok(2));
        assert_eq!(queue.hold("d"), Err("d"));
        assert_eq!(
            (queue.len(), queue.held_total(), queue.refused_total()),
            (3, 3, 1)
        );
        assert_eq!(queue.release_all(), ["a", "b", "c"]);
        assert_eq!(queue.len(), 0);
        // Room again after the release.
        assert_eq!(queue.hold("e"), Ok(3));
        assert_eq!(queue.held_total(), 4);
    }

    #[test]
    fn a_timed_out_request_leaves_and_frees_its_place() {
        let mut queue = HoldQueue::new(2);
        let a = queue.hold("a").unwrap();
        queue.hold("b").unwrap();
        assert_eq!(queue.hold("c"), Err("c"));
        assert!(queue.remove(a));
        assert!(!queue.remove(a), "already gone");
        queue.hold("c").unwrap();
        assert_eq!(queue.release_all(), ["b", "c"]);
    }

    #[test]
    fn a_zero_bound_still_holds_one_and_shrinking_keeps_the_held() {
        let mut queue = HoldQueue::new(0);
        queue.hold(1).unwrap();
        assert_eq!(queue.hold(2), Err(2));
        queue.set_max(5);
        queue.hold(2).unwrap();
        queue.set_max(1);
        assert_eq!(queue.len(), 2);
        assert_eq!(queue.hold(3), Err(3));
    }

    #[test]
    fn retry_after_is_between_one_and_thirty_seconds() {
        assert_eq!(retry_after_seconds(0), 1);
        assert_eq!(retry_after_seconds(10), 10);
        assert_eq!(retry_after_seconds(300), 30);
    }
}
