//! The leadership handle: every write of the controller (pod marks, `spec.replicas`, status,
//! Events) asks it right before the request, so a process that lost its Lease stops writing at
//! once, not when its in-flight syncs end (`docs/writing-replicas.md#leader-election`).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use tokio::sync::watch;

/// A write was refused because this process does not hold the Lease (any more).
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[error("this replica does not hold the leader Lease; the write was not sent")]
pub struct NotLeader;

/// Whether this process may write now. Cheap to clone; every clone sees the same state.
#[derive(Clone, Debug)]
pub struct Leadership {
    /// The election's view (`true` while it holds the Lease); `None` without election.
    lease: Option<watch::Receiver<bool>>,
    /// Turned off for good when the process stops leading (lost Lease, shutdown).
    term: Arc<AtomicBool>,
}

impl Leadership {
    /// Always leading: a single replica run with leader election turned off.
    pub fn always() -> Self {
        Self {
            lease: None,
            term: Arc::new(AtomicBool::new(true)),
        }
    }

    /// Leading while the election's channel says so and until [`Leadership::end`] is called:
    /// one handle per leadership term.
    pub fn term(lease: watch::Receiver<bool>) -> Self {
        Self {
            lease: Some(lease),
            term: Arc::new(AtomicBool::new(true)),
        }
    }

    /// Ends this term: every later [`Leadership::check`] fails, whatever the Lease says.
    pub fn end(&self) {
        self.term.store(false, Ordering::SeqCst);
    }

    /// Whether a write may be sent now.
    ///
    /// # Errors
    /// [`NotLeader`] when the term ended or the election no longer holds the Lease.
    pub fn check(&self) -> Result<(), NotLeader> {
        let leading = self.term.load(Ordering::SeqCst)
            && self.lease.as_ref().is_none_or(|lease| *lease.borrow());
        if leading { Ok(()) } else { Err(NotLeader) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_lost_lease_or_an_ended_term_refuses_writes_at_once() {
        assert_eq!(Leadership::always().check(), Ok(()));
        let (tx, rx) = watch::channel(true);
        let leadership = Leadership::term(rx);
        let clone = leadership.clone();
        assert_eq!(clone.check(), Ok(()));
        tx.send(false).expect("receiver alive");
        assert_eq!(clone.check(), Err(NotLeader));
        tx.send(true).expect("receiver alive");
        assert_eq!(clone.check(), Ok(()));
        leadership.end();
        assert_eq!(clone.check(), Err(NotLeader), "an ended term stays ended");
    }
}
