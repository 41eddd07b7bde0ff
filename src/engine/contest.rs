//! Who owns the target's `spec.replicas`: contest detection, the re-assert throttle and how long a
//! contest stays visible (`docs/writing-replicas.md#contest`). Pure: the previous conditions and
//! the time come in as arguments.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use llmscaler_api::names::{ConditionType, Reason};

use super::conditions::ConditionSpec;

/// How long `ReplicasContested` stays True after the latest contest, milliseconds (5 minutes),
/// so a contest is visible in `kubectl get`/`describe` and not only for one sync.
pub(crate) const CONTEST_MEMORY_MS: i64 = 300_000;

/// Whether the operator held `spec.replicas` before this sync, as the previous status says
/// (`ReplicasContested` with reason `OwnedByLLMScaler` or `OtherFieldManager`). Survives restarts.
pub(crate) fn claimed_before(previous: &[Condition]) -> bool {
    previous.iter().any(|c| {
        c.type_ == ConditionType::ReplicasContested.as_str()
            && (c.reason == Reason::OwnedByLLMScaler.as_str()
                || c.reason == Reason::OtherFieldManager.as_str())
    })
}

/// The field manager that took `spec.replicas` from the operator, if any: the operator had
/// claimed the field before, no longer owns it, and another manager does. An apply of the same
/// value by another manager only shares ownership (`owns_replicas` stays true): no contest.
pub(crate) fn contested_by(
    claimed_before: bool,
    owns_replicas: bool,
    other_managers: &[String],
) -> Option<String> {
    if claimed_before && !owns_replicas {
        other_managers.first().cloned()
    } else {
        None
    }
}

/// Per-scaler memory of the contest rules (in memory; a new leader starts empty).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ContestMemory {
    /// When `spec.replicas` was last claimed or re-asserted, ms.
    pub last_reassert_ms: Option<i64>,
    /// When the latest contest was seen, ms.
    pub last_contest_ms: Option<i64>,
}

impl ContestMemory {
    /// Notes a contest seen at `now_ms`.
    pub(crate) fn saw_contest(&mut self, now_ms: i64) {
        self.last_contest_ms = Some(now_ms);
    }

    /// The re-assert throttle: whether to write `spec.replicas` (unchanged value) to claim or
    /// re-claim it. Only when the operator does not own the field and is not holding (a held
    /// sync asserts nothing), at most once per `period_ms` (the sync period). A `true` answer is
    /// recorded as a re-assert at `now_ms`.
    pub(crate) fn reassert_due(
        &mut self,
        owns_replicas: bool,
        holding: bool,
        now_ms: i64,
        period_ms: i64,
    ) -> bool {
        if owns_replicas || holding {
            return false;
        }
        let due = self
            .last_reassert_ms
            .is_none_or(|t| now_ms.saturating_sub(t) >= period_ms);
        if due {
            self.last_reassert_ms = Some(now_ms);
        }
        due
    }
}

/// The previous `ReplicasContested=True` condition, kept for [`CONTEST_MEMORY_MS`] after the
/// latest contest (this process's memory, or the condition's transition after a restart).
pub(crate) fn recent_contest(
    previous: &[Condition],
    now_ms: i64,
    last_contest_ms: Option<i64>,
) -> Option<ConditionSpec> {
    let condition = previous
        .iter()
        .find(|c| c.type_ == ConditionType::ReplicasContested.as_str() && c.status == "True")?;
    let since = condition
        .last_transition_time
        .0
        .as_millisecond()
        .max(last_contest_ms.unwrap_or(i64::MIN));
    (now_ms.saturating_sub(since) < CONTEST_MEMORY_MS).then(|| {
        ConditionSpec::new(
            ConditionType::ReplicasContested,
            true,
            Reason::OtherFieldManager,
            condition.message.clone(),
        )
    })
}

#[cfg(test)]
mod tests {
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
    use k8s_openapi::jiff::Timestamp;

    use super::*;
    use crate::engine::clock::{Clock, ManualClock};

    fn contested(reason: Reason, status: &str, at_ms: i64) -> Condition {
        Condition {
            type_: ConditionType::ReplicasContested.as_str().to_owned(),
            status: status.to_owned(),
            reason: reason.as_str().to_owned(),
            message: "field manager \"kubectl\" wrote spec.replicas".to_owned(),
            observed_generation: None,
            last_transition_time: Time(Timestamp::from_millisecond(at_ms).expect("valid")),
        }
    }

    #[test]
    fn contest_needs_an_earlier_claim_and_lost_ownership() {
        let others = ["kubectl-client-side-apply".to_owned()];
        // (claimed before, owns now, others) -> contested by
        let table: [(bool, bool, &[String], Option<&str>); 5] = [
            (true, false, &others, Some("kubectl-client-side-apply")),
            (true, true, &others, None), // same value applied: shared, not taken
            (false, false, &others, None), // never claimed: first contact is not a contest
            (true, false, &[], None),    // nobody else: the field was dropped, not taken
            (false, true, &[], None),
        ];
        for (claimed, owns, others, want) in table {
            assert_eq!(
                contested_by(claimed, owns, others).as_deref(),
                want,
                "claimed={claimed} owns={owns} others={others:?}"
            );
        }
        assert!(claimed_before(&[contested(
            Reason::OwnedByLLMScaler,
            "False",
            0
        )]));
        assert!(claimed_before(&[contested(
            Reason::OtherFieldManager,
            "True",
            0
        )]));
        assert!(!claimed_before(&[contested(
            Reason::NotClaimed,
            "False",
            0
        )]));
        assert!(!claimed_before(&[]));
    }

    #[test]
    fn reassert_at_most_once_per_sync_period_on_a_substituted_clock() {
        let clock = ManualClock::at_ms(1_000_000);
        let mut memory = ContestMemory::default();
        let period = 15_000;
        // (advance ms, owns, holding) -> due
        let table = [
            (0, false, false, true),      // first contact: claim
            (5_000, false, false, false), // 5 s later: throttled
            (9_999, false, false, false), // 14.999 s: still throttled
            (1, false, false, true),      // 15 s: due again
            (20_000, true, false, false), // owning: nothing to re-assert
            (0, false, true, false),      // holding: asserts nothing
            (0, false, false, true),      // 20 s after the last: due
        ];
        for (i, (advance, owns, holding, want)) in table.into_iter().enumerate() {
            clock.advance_ms(advance);
            let now = clock.now().as_millisecond();
            assert_eq!(
                memory.reassert_due(owns, holding, now, period),
                want,
                "row {i}"
            );
        }
    }

    #[test]
    fn contest_stays_visible_five_minutes_after_the_latest_one() {
        let clock = ManualClock::at_ms(10_000_000);
        let t0 = clock.now().as_millisecond();
        let previous = [contested(Reason::OtherFieldManager, "True", t0)];
        let mut memory = ContestMemory::default();
        clock.advance_ms(200_000);
        memory.saw_contest(clock.now().as_millisecond());
        // (advance, want still visible)
        let table = [(99_000, true), (200_000, true), (999, true), (1, false)];
        let mut since_contest = 0;
        for (advance, want) in table {
            clock.advance_ms(advance);
            since_contest += advance;
            let got = recent_contest(
                &previous,
                clock.now().as_millisecond(),
                memory.last_contest_ms,
            );
            assert_eq!(
                got.is_some(),
                want,
                "{since_contest} ms after the latest contest"
            );
        }
        // After a restart (no memory) the transition time counts.
        assert!(recent_contest(&previous, t0 + CONTEST_MEMORY_MS - 1, None).is_some());
        assert!(recent_contest(&previous, t0 + CONTEST_MEMORY_MS, None).is_none());
        let healthy = [contested(Reason::OwnedByLLMScaler, "False", t0)];
        assert!(recent_contest(&healthy, t0, None).is_none());
    }
}
