//! The scale-down stabilization window (docs/guards.md#stabilization-window).

/// One recorded recommendation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Record {
    /// When it was made, milliseconds (same clock as `decide`'s `now_ms`).
    pub at_ms: i64,
    /// Clamped recommendation, replicas.
    pub replicas: i32,
}

/// Recommendations inside the window, oldest first. The controller persists it in the
/// LLMScaler's status so a restart cannot forget it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct History {
    records: Vec<Record>,
    /// Replica changes written, `(at_ms, new - old)`, for the scale-up rate cap; in memory only
    /// (as the HPA keeps its scale events), at most [`super::scale_up::MAX_PERIOD_MS`] old.
    changes: Vec<(i64, i32)>,
}

/// Most records kept, whatever the window: bounds the status size when a long window meets a
/// short sync period (a 1 h window at 1 s syncs would otherwise keep 3600 entries).
pub(crate) const MAX_RECORDS: usize = 512;

impl History {
    /// A history holding `records` (e.g. read back from status), sorted by time.
    pub(crate) fn from_records(mut records: Vec<Record>) -> Self {
        records.sort_by_key(|r| r.at_ms);
        Self {
            records,
            changes: Vec::new(),
        }
    }

    /// Drops the stabilization records (a window turned off), keeping the replica changes.
    pub(crate) fn clear_records(&mut self) {
        self.records.clear();
    }

    /// Notes a change of `delta` replicas written at `now_ms`, and forgets changes older than
    /// the longest scale-up period.
    pub(crate) fn note_change(&mut self, now_ms: i64, delta: i32) {
        let cutoff = now_ms.saturating_sub(super::scale_up::MAX_PERIOD_MS);
        self.changes.retain(|(at, _)| *at > cutoff);
        if delta != 0 {
            self.changes.push((now_ms, delta));
        }
    }

    /// Replicas added and removed by the changes strictly after `now_ms - period_ms`.
    pub(crate) fn changes_within(&self, now_ms: i64, period_ms: i64) -> (i64, i64) {
        let cutoff = now_ms.saturating_sub(period_ms);
        self.changes.iter().filter(|(at, _)| *at > cutoff).fold(
            (0, 0),
            |(added, removed), (_, delta)| {
                if *delta > 0 {
                    (added + i64::from(*delta), removed)
                } else {
                    (added, removed - i64::from(*delta))
                }
            },
        )
    }

    /// The records, oldest first.
    pub fn records(&self) -> &[Record] {
        &self.records
    }

    /// Records `(now_ms, replicas)`, drops entries that left the window, and returns the largest
    /// recommendation still inside it. An entry exactly `window_ms` old has left the window (as
    /// in the HorizontalPodAutoscaler, which keeps records strictly after `now - window`). When
    /// more than [`MAX_RECORDS`] remain, the smallest are merged away: the maximum is kept.
    pub fn record(&mut self, now_ms: i64, replicas: i32, window_ms: i64) -> i32 {
        let cutoff = now_ms.saturating_sub(window_ms);
        // Records stamped later than `now` (restored with a safety shift, or written by a node
        // whose clock runs ahead) are kept: they make the window last longer, never shorter.
        self.records.retain(|r| r.at_ms > cutoff);
        self.records.push(Record {
            at_ms: now_ms,
            replicas,
        });
        if self.records.len() > MAX_RECORDS {
            self.compact();
        }
        self.records
            .iter()
            .map(|r| r.replicas)
            .max()
            .unwrap_or(replicas)
    }

    /// Lowers every record above `max_replicas` to it (`docs/scaling.md#holding`): a lowered
    /// `maxReplicas`, or a history restored from status that was written under a higher one,
    /// never keeps the window maximum above the current bound.
    pub fn cap(&mut self, max_replicas: i32) {
        for record in &mut self.records {
            record.replicas = record.replicas.min(max_replicas);
        }
    }

    /// docs/guards.md#after-a-scale-down: after a scale-down, the history is only the value
    /// written, so the next
    /// step waits a full window.
    pub fn pin(&mut self, now_ms: i64, replicas: i32) {
        self.records.clear();
        self.records.push(Record {
            at_ms: now_ms,
            replicas,
        });
    }

    /// The records that can still be a window maximum, oldest first: a record is redundant when
    /// a later one is at least as large (it can never be the maximum again before that later one
    /// leaves). What the controller persists.
    pub(crate) fn dominant(&self) -> Vec<Record> {
        let mut kept: Vec<Record> = Vec::with_capacity(self.records.len());
        for record in self.records.iter().rev() {
            if kept.iter().all(|later| later.replicas < record.replicas) {
                kept.push(*record);
            }
        }
        kept.reverse();
        kept
    }

    /// Keeps the window maximum correct with fewer records (see [`History::dominant`]).
    fn compact(&mut self) {
        self.records = self.dominant();
        // Strictly decreasing records are all dominant; keep the newest, and the maximum.
        if self.records.len() > MAX_RECORDS {
            let max = self.records[0];
            let newest = self
                .records
                .split_off(self.records.len() - (MAX_RECORDS - 1));
            self.records = std::iter::once(max).chain(newest).collect();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entry_exactly_at_the_boundary_has_left_the_window() {
        let mut h = History::default();
        h.record(0, 5, 300_000);
        assert_eq!(h.record(299_999, 1, 300_000), 5, "inside the window");
        let mut h = History::default();
        h.record(0, 5, 300_000);
        assert_eq!(h.record(300_000, 1, 300_000), 1, "exactly window old: gone");
    }

    #[test]
    fn pin_replaces_the_history() {
        let mut h = History::default();
        h.record(0, 9, 60_000);
        h.pin(1_000, 4);
        assert_eq!(
            h.records(),
            &[Record {
                at_ms: 1_000,
                replicas: 4
            }]
        );
        assert_eq!(h.record(2_000, 1, 60_000), 4);
    }

    #[test]
    fn compaction_keeps_the_window_maximum() {
        let mut h = History::default();
        let window = 10_000_000;
        let mut expected_max = 0;
        for i in 0..2000i64 {
            let replicas = i32::try_from((i * 7919) % 97).expect("small");
            expected_max = expected_max.max(replicas);
            assert_eq!(h.record(i, replicas, window), expected_max);
            assert!(h.records().len() <= MAX_RECORDS);
        }
    }

    #[test]
    fn records_from_the_future_are_kept_until_they_leave_the_window() {
        // A history restored with a safety shift lies partly in the future: it must still count.
        let mut h = History::from_records(vec![Record {
            at_ms: 10_000,
            replicas: 9,
        }]);
        assert_eq!(h.record(5_000, 2, 60_000), 9);
        assert_eq!(
            h.record(70_000, 2, 60_000),
            2,
            "gone once 60 s past its own time"
        );
    }
}
