use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use k8s_openapi::jiff::Timestamp;
use llmscaler_api::names::{ConditionType as T, Reason as R};

use super::*;
use crate::engine::Reason as Why;
use crate::engine::clock::{Clock, ManualClock};

fn report<'a>(
    write: &'a WriteOutcome,
    ownership: &'a Ownership,
    skipped: &'a [(String, String)],
) -> SyncReport<'a> {
    SyncReport {
        recommendation: Some(4),
        decision_reason: Why::Steady,
        limited: None,
        spec_replicas: 4,
        replicas: 4,
        ready_replicas: 4,
        bounds: (1, 8),
        skipped,
        write,
        ownership,
        target: ("Deployment", "vllm"),
        schedules: &[],
        passive: None,
        competing: None,
    }
}

/// (type, status, reason) of each derived condition, in order.
fn summary(conditions: &[ConditionSpec]) -> Vec<(T, bool, R)> {
    conditions
        .iter()
        .map(|c| (c.type_, c.status, c.reason))
        .collect()
}

#[test]
fn five_conditions_for_each_kind_of_sync() {
    let skipped = vec![("kv".to_owned(), "no data".to_owned())];
    let none: Vec<(String, String)> = Vec::new();
    let owned = Ownership::Owned;
    let not_needed = WriteOutcome::NotNeeded;
    type Case<'a> = (&'a str, SyncReport<'a>, [(T, bool, R); 5]);
    let contested = Ownership::Contested("kubectl".to_owned());
    let recent = Ownership::RecentlyContested(ConditionSpec::new(
        T::ReplicasContested,
        true,
        R::OtherFieldManager,
        "earlier",
    ));
    let not_claimed = Ownership::NotClaimed;
    let wrote = WriteOutcome::Wrote;
    let mark_failed = WriteOutcome::MarkFailed("pods: forbidden".to_owned());
    let write_failed = WriteOutcome::WriteFailed("conflict".to_owned());
    let healthy_tail = |limited: (bool, R), contested: (bool, R)| {
        [
            (T::ScalingLimited, limited.0, limited.1),
            (T::ReplicasContested, contested.0, contested.1),
        ]
    };
    let within = (false, R::DesiredWithinRange);
    let ours = (false, R::OwnedByLLMScaler);
    let row = |ready: (bool, R), active: (bool, R), able: (bool, R), tail: [(T, bool, R); 2]| {
        [
            (T::Ready, ready.0, ready.1),
            (T::ScalingActive, active.0, active.1),
            (T::AbleToScale, able.0, able.1),
            tail[0],
            tail[1],
        ]
    };
    let ok = (true, R::AsExpected);
    let valid = (true, R::ValidMetrics);
    let able = (true, R::ReadyForNewScale);
    let cases: Vec<Case<'_>> = vec![
        (
            "steady",
            report(&not_needed, &owned, &none),
            row(ok, valid, able, healthy_tail(within, ours)),
        ),
        (
            "hold",
            SyncReport {
                recommendation: None,
                decision_reason: Why::MetricsUnavailable,
                ..report(&not_needed, &owned, &skipped)
            },
            row(
                (false, R::MetricsUnavailable),
                (false, R::MetricsUnavailable),
                able,
                healthy_tail(within, ours),
            ),
        ),
        (
            "one metric skipped",
            report(&not_needed, &owned, &skipped),
            row(
                ok,
                (true, R::SomeMetricsSkipped),
                able,
                healthy_tail(within, ours),
            ),
        ),
        (
            "rollout",
            SyncReport {
                decision_reason: Why::RolloutInProgress,
                ..report(&not_needed, &owned, &none)
            },
            row(
                (false, R::RolloutInProgress),
                valid,
                (false, R::RolloutInProgress),
                healthy_tail(within, ours),
            ),
        ),
        (
            "not settled",
            SyncReport {
                decision_reason: Why::ScaleDownNotSettled,
                ready_replicas: 3,
                ..report(&not_needed, &owned, &none)
            },
            row(
                (false, R::ScaleDownNotSettled),
                valid,
                (false, R::ScaleDownNotSettled),
                healthy_tail(within, ours),
            ),
        ),
        (
            "marking failed",
            report(&mark_failed, &owned, &none),
            row(
                (false, R::DeletionCostFailed),
                valid,
                (false, R::DeletionCostFailed),
                healthy_tail(within, ours),
            ),
        ),
        (
            "write failed",
            report(&write_failed, &owned, &none),
            row(
                (false, R::WriteFailed),
                valid,
                (false, R::WriteFailed),
                healthy_tail(within, ours),
            ),
        ),
        (
            "clamped to max",
            SyncReport {
                limited: Some(Limit::Max),
                ..report(&not_needed, &owned, &none)
            },
            row(
                ok,
                valid,
                able,
                healthy_tail((true, R::TooManyReplicas), ours),
            ),
        ),
        (
            "clamped to min",
            SyncReport {
                limited: Some(Limit::Min),
                ..report(&not_needed, &owned, &none)
            },
            row(
                ok,
                valid,
                able,
                healthy_tail((true, R::TooFewReplicas), ours),
            ),
        ),
        (
            "contested",
            report(&wrote, &contested, &none),
            row(
                ok,
                valid,
                able,
                healthy_tail(within, (true, R::OtherFieldManager)),
            ),
        ),
        (
            "recently contested",
            report(&not_needed, &recent, &none),
            row(
                ok,
                valid,
                able,
                healthy_tail(within, (true, R::OtherFieldManager)),
            ),
        ),
        (
            "paused",
            SyncReport {
                passive: Some((R::Paused, "paused".to_owned())),
                ..report(&not_needed, &owned, &none)
            },
            row(
                (true, R::Paused),
                valid,
                (false, R::Paused),
                healthy_tail(within, ours),
            ),
        ),
        (
            "advisory while metrics fail",
            SyncReport {
                recommendation: None,
                passive: Some((R::AdvisoryMode, "advisory".to_owned())),
                ..report(&not_needed, &owned, &skipped)
            },
            row(
                (false, R::AdvisoryMode),
                (false, R::MetricsUnavailable),
                (false, R::AdvisoryMode),
                healthy_tail(within, ours),
            ),
        ),
        (
            "an HPA scales the same target",
            SyncReport {
                competing: Some("HorizontalPodAutoscaler vllm"),
                ..report(&not_needed, &contested, &none)
            },
            row(
                (false, R::CompetingAutoscaler),
                valid,
                (false, R::CompetingAutoscaler),
                healthy_tail(within, (true, R::CompetingAutoscaler)),
            ),
        ),
        (
            "never written",
            report(&not_needed, &not_claimed, &none),
            row(
                ok,
                valid,
                able,
                healthy_tail(within, (false, R::NotClaimed)),
            ),
        ),
        (
            "first claim",
            report(&wrote, &not_claimed, &none),
            row(ok, valid, able, healthy_tail(within, ours)),
        ),
    ];
    for (name, report, want) in cases {
        assert_eq!(summary(&derive(&report)), want, "{name}");
    }
}

#[test]
fn messages_name_what_happened() {
    let skipped = vec![
        ("waiting".to_owned(), "no data".to_owned()),
        ("kv".to_owned(), "NaN".to_owned()),
    ];
    let (write, owned) = (WriteOutcome::NotNeeded, Ownership::Owned);
    let hold = SyncReport {
        recommendation: None,
        ..report(&write, &owned, &skipped)
    };
    assert_eq!(
        derive(&hold)[1].message,
        "holding at 4 replicas: waiting: no data; kv: NaN"
    );
    // A held fleet above maxReplicas is clamped: the message names where it is held.
    let clamped = SyncReport {
        recommendation: None,
        spec_replicas: 8,
        replicas: 5,
        limited: Some(Limit::Max),
        ..report(&write, &owned, &skipped)
    };
    assert!(
        derive(&clamped)[1]
            .message
            .starts_with("holding at 5 replicas")
    );
    let contested = Ownership::Contested("helm".to_owned());
    let message = &derive(&report(&write, &contested, &[]))[4].message;
    assert!(message.starts_with("field manager \"helm\" wrote spec.replicas of Deployment vllm"));
    assert_eq!(invalid_spec("spec.minReplicas: bad").len(), 3);
    assert!(
        target_failed(false, "forbidden")
            .iter()
            .all(|c| c.reason == R::TargetUnreadable)
    );
    assert!(
        target_failed(true, "gone")
            .iter()
            .all(|c| c.reason == R::TargetNotFound)
    );
    assert_eq!(source_failed("bad address")[1].type_, T::ScalingActive);
}

fn condition(type_: T, status: &str, at: Timestamp) -> Condition {
    Condition {
        type_: type_.as_str().to_owned(),
        status: status.to_owned(),
        reason: "Whatever".to_owned(),
        message: String::new(),
        observed_generation: Some(1),
        last_transition_time: Time(at),
    }
}

#[test]
fn transition_time_changes_only_on_a_flip_on_a_substituted_clock() {
    let clock = ManualClock::at_ms(1_000_000);
    let t0 = clock.now();
    let wanted = [ConditionSpec::new(T::Ready, true, R::AsExpected, "ok")];
    let (first, flipped) = merge(&[], &wanted, Some(1), clock.now());
    assert_eq!(flipped.len(), 1);
    clock.advance_ms(60_000);
    let reworded = [ConditionSpec::new(
        T::Ready,
        true,
        R::AsExpected,
        "still ok",
    )];
    let (second, flipped) = merge(&first, &reworded, Some(1), clock.now());
    assert!(flipped.is_empty());
    assert_eq!(second[0].last_transition_time, Time(t0));
    assert_eq!(second[0].message, "still ok");
    clock.advance_ms(1_000);
    let down = [ConditionSpec::new(
        T::Ready,
        false,
        R::MetricsUnavailable,
        "no data",
    )];
    let (third, flipped) = merge(&second, &down, Some(1), clock.now());
    assert_eq!(flipped.len(), 1);
    assert_eq!(third[0].last_transition_time, Time(clock.now()));
    let other = [ConditionSpec::new(
        T::AbleToScale,
        false,
        R::TargetNotFound,
        "gone",
    )];
    let (fourth, _) = merge(&third, &other, Some(1), clock.now());
    let types: Vec<&str> = fourth.iter().map(|c| c.type_.as_str()).collect();
    assert_eq!(
        types,
        ["AbleToScale", "Ready"],
        "undecided conditions are kept"
    );
}

#[test]
fn flips_become_events_except_a_healthy_first_appearance() {
    let t = Timestamp::UNIX_EPOCH;
    let previous = [condition(T::Ready, "True", t)];
    // (previous, flip) -> (event?, warning)
    let table = [
        (
            &[][..],
            ConditionSpec::new(T::Ready, true, R::AsExpected, ""),
            None,
        ),
        (
            &[][..],
            ConditionSpec::new(T::Ready, false, R::InvalidSpec, ""),
            Some(true),
        ),
        (
            &[][..],
            ConditionSpec::new(T::ScalingLimited, false, R::DesiredWithinRange, ""),
            None,
        ),
        (
            &[][..],
            ConditionSpec::new(T::ReplicasContested, true, R::OtherFieldManager, ""),
            Some(true),
        ),
        (
            &previous[..],
            ConditionSpec::new(T::Ready, false, R::MetricsUnavailable, ""),
            Some(true),
        ),
        (
            &previous[..],
            ConditionSpec::new(T::Ready, true, R::AsExpected, ""),
            Some(false),
        ),
    ];
    for (previous, flip, want) in table {
        let events = flip_events(previous, std::slice::from_ref(&flip));
        assert_eq!(events.first().map(|e| e.warning), want, "{flip:?}");
        if let Some(event) = events.first() {
            assert_eq!(event.reason, flip.reason);
            assert_eq!(event.action, "Sync");
        }
    }
}

#[test]
fn replicas_events() {
    let target = ("Deployment", "vllm");
    let up = replicas_event(target, (2, 4), Action::ScaleUp, Why::ScaledUp, None).expect("event");
    assert_eq!((up.reason, up.warning), (R::ScaledUp, false));
    assert_eq!(up.note, "Deployment vllm: 2 -> 4 replicas (ScaledUp)");
    let down =
        replicas_event(target, (5, 3), Action::ScaleDown, Why::StepCapped, None).expect("event");
    assert_eq!(down.note, "Deployment vllm: 5 -> 3 replicas (StepCapped)");
    let reassert = replicas_event(
        target,
        (1, 3),
        Action::ScaleUp,
        Why::ScaledUp,
        Some("kubectl"),
    )
    .expect("event");
    assert_eq!(
        (reassert.reason, reassert.warning),
        (R::ReplicasReasserted, true)
    );
    assert!(replicas_event(target, (3, 3), Action::None, Why::Steady, None).is_none());
}

/// Issue 11 (`docs/security.md#messages`): messages are stripped of control and bidi-override
/// characters and capped: conditions at 32 KiB, Event notes at 1 KiB.
#[test]
fn messages_are_cleaned_and_capped() {
    assert_eq!(
        clean_message("a\u{1b}[31mred\r\n\tb\u{202e}c\u{0}", 100),
        "a [31mred b c"
    );
    let long = "é".repeat(40_000);
    let cut = clean_message(&long, CONDITION_MESSAGE_MAX_BYTES);
    assert!(cut.len() <= CONDITION_MESSAGE_MAX_BYTES, "{}", cut.len());
    assert!(cut.ends_with('…'));
    let note = clean_message(&long, EVENT_NOTE_MAX_BYTES);
    assert!(note.len() <= EVENT_NOTE_MAX_BYTES && note.len() > EVENT_NOTE_MAX_BYTES - 8);
    assert_eq!(clean_message("short", EVENT_NOTE_MAX_BYTES), "short");
    // merge writes the cleaned, capped message into the condition.
    let wanted = [ConditionSpec::new(
        ConditionType::Ready,
        false,
        Reason::MetricsUnavailable,
        format!("x\u{7}{}", "y".repeat(50_000)),
    )];
    let (conditions, _) = merge(&[], &wanted, Some(1), Timestamp::UNIX_EPOCH);
    assert!(conditions[0].message.len() <= CONDITION_MESSAGE_MAX_BYTES);
    assert!(conditions[0].message.starts_with("x y"));
}
