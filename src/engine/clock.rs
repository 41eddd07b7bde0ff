//! The time source of a sync, injectable so windows, throttles and contest memory are testable
//! without sleeping (one reading per sync: the controller reads the clock once and passes the
//! time down).

use std::sync::atomic::{AtomicI64, Ordering};

use k8s_openapi::jiff::Timestamp;

/// Source of the current time.
pub trait Clock: Send + Sync {
    /// Now.
    fn now(&self) -> Timestamp;
}

/// The wall clock.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct SystemClock;

impl Clock for SystemClock {
    fn now(&self) -> Timestamp {
        Timestamp::now()
    }
}

/// A clock that only moves when told to: tests set it and advance it.
#[derive(Debug, Default)]
pub struct ManualClock {
    ms: AtomicI64,
}

impl ManualClock {
    /// A clock reading `ms` milliseconds after the Unix epoch.
    pub fn at_ms(ms: i64) -> Self {
        Self {
            ms: AtomicI64::new(ms),
        }
    }

    /// Moves the clock `ms` milliseconds forward (backward when negative).
    pub fn advance_ms(&self, ms: i64) {
        self.ms.fetch_add(ms, Ordering::SeqCst);
    }
}

impl Clock for ManualClock {
    /// The set time; a value outside jiff's range reads as the Unix epoch.
    fn now(&self) -> Timestamp {
        Timestamp::from_millisecond(self.ms.load(Ordering::SeqCst)).unwrap_or(Timestamp::UNIX_EPOCH)
    }
}

/// The wall clock moved by a fixed offset: `llmscaler run --test-clock-offset-seconds` runs an
/// operator whose clock is skewed against its peers (the clock-skew fault of
/// `e2e/tests/faults.rs`, docs/writing-replicas.md#leader-election), as a node with a drifting
/// clock would.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct OffsetClock {
    /// Milliseconds added to the wall clock (negative: behind).
    pub(crate) offset_ms: i64,
}

impl Clock for OffsetClock {
    /// The wall clock plus the offset; out of jiff's range, the wall clock.
    fn now(&self) -> Timestamp {
        let now = Timestamp::now();
        Timestamp::from_millisecond(now.as_millisecond().saturating_add(self.offset_ms))
            .unwrap_or(now)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_offset_clock_reads_the_wall_clock_moved_by_its_offset() {
        let before = Timestamp::now().as_millisecond();
        let skewed = OffsetClock { offset_ms: -30_000 }.now().as_millisecond();
        let after = Timestamp::now().as_millisecond();
        assert!(skewed >= before - 30_000 && skewed <= after - 30_000);
    }
}
