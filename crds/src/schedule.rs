//! Scheduled floors and ceilings (`spec.schedules[]`, docs/guards.md#schedules): standard
//! 5-field cron expressions in an IANA time zone, active from each `start` for `durationSeconds`
//! (elapsed time) or until the next `end` (local time). Across daylight-saving changes a start
//! inside the spring gap is skipped that day, and a start in the repeated autumn hour fires once.

use std::str::FromStr;

use jiff::tz::TimeZone;
use jiff::{SignedDuration, Timestamp};

use crate::types::ScheduleSpec;

/// The time zone of a schedule without `timeZone`.
pub(crate) const DEFAULT_TIME_ZONE: &str = "UTC";

/// A schedule ready to be evaluated.
#[derive(Clone, Debug)]
pub struct Schedule {
    /// `spec.schedules[].name`.
    pub name: String,
    start: jiff_cron::Schedule,
    until: Until,
    zone: TimeZone,
    /// The floor while active, replicas.
    pub min_replicas: Option<i32>,
    /// The ceiling while active, replicas.
    pub max_replicas: Option<i32>,
}

#[derive(Clone, Debug)]
enum Until {
    End(Box<jiff_cron::Schedule>),
    Lasting(SignedDuration),
}

/// Parses a standard 5-field cron expression (`minute hour day-of-month month day-of-week`;
/// names like `Mon-Fri`, ranges, lists and steps allowed).
///
/// # Errors
/// A message for another number of fields or an unparsable field.
pub(crate) fn parse_cron(expression: &str) -> Result<jiff_cron::Schedule, String> {
    let fields = expression.split_whitespace().count();
    if fields != 5 {
        return Err(format!(
            "{expression:?} has {fields} fields; write 5: minute hour day-of-month month day-of-week (e.g. \"0 8 * * Mon-Fri\")"
        ));
    }
    jiff_cron::Schedule::from_str(&format!("0 {expression}"))
        .map_err(|err| format!("{expression:?} is not a cron expression: {err}"))
}

/// Resolves an IANA time zone name (`Europe/Berlin`), or `UTC`.
///
/// # Errors
/// A message naming the zone when it is unknown.
pub(crate) fn parse_time_zone(name: &str) -> Result<TimeZone, String> {
    TimeZone::get(name)
        .map_err(|_| format!("{name:?} is not an IANA time zone name (e.g. \"Europe/Berlin\")"))
}

impl Schedule {
    /// Compiles `spec`. Every problem is returned as `(field, message)` with the field relative
    /// to the schedule (`start`, `end`, `timeZone`, `durationSeconds`).
    ///
    /// # Errors
    /// The list of problems.
    pub fn compile(spec: &ScheduleSpec) -> Result<Self, Vec<(&'static str, String)>> {
        let mut problems = Vec::new();
        let zone = parse_time_zone(spec.time_zone.as_deref().unwrap_or(DEFAULT_TIME_ZONE))
            .map_err(|e| problems.push(("timeZone", e)))
            .ok();
        let start = parse_cron(&spec.start)
            .map_err(|e| problems.push(("start", e)))
            .ok();
        let until = match (&spec.end, spec.duration_seconds) {
            (Some(end), None) => parse_cron(end)
                .map(|end| Until::End(Box::new(end)))
                .map_err(|e| problems.push(("end", e)))
                .ok(),
            (None, Some(seconds)) if seconds >= 60 => Some(Until::Lasting(
                SignedDuration::from_secs(i64::from(seconds)),
            )),
            (None, Some(seconds)) => {
                problems.push((
                    "durationSeconds",
                    format!("{seconds} is too short; at least 60 seconds"),
                ));
                None
            }
            (Some(_), Some(_)) => {
                problems.push((
                    "durationSeconds",
                    "set either end or durationSeconds, not both".to_owned(),
                ));
                None
            }
            (None, None) => {
                problems.push((
                    "end",
                    "set end (a cron expression) or durationSeconds".to_owned(),
                ));
                None
            }
        };
        match (zone, start, until) {
            (Some(zone), Some(start), Some(until)) if problems.is_empty() => Ok(Self {
                name: spec.name.clone(),
                start,
                until,
                zone,
                min_replicas: spec.min_replicas,
                max_replicas: spec.max_replicas,
            }),
            _ => Err(problems),
        }
    }

    /// Whether the schedule is active at `now`: a `start` occurred at or before `now` and its
    /// duration has not elapsed (or no `end` occurred since).
    pub fn is_active(&self, now: Timestamp) -> bool {
        match &self.until {
            Until::Lasting(duration) => {
                let Ok(from) = now.checked_sub(*duration) else {
                    return false;
                };
                // Starts in (now - duration, now].
                self.start
                    .after(from.to_zoned(self.zone.clone()))
                    .next()
                    .is_some_and(|s| s.timestamp() <= now)
            }
            Until::End(end) => {
                let Some(last_start) = previous(&self.start, &self.zone, now) else {
                    return false;
                };
                previous(end, &self.zone, now).is_none_or(|last_end| last_end < last_start)
            }
        }
    }

    /// The next time the schedule starts after `now` (the tests' check of jiff-cron's forward
    /// iteration across daylight-saving changes).
    #[cfg(test)]
    fn next_start(&self, now: Timestamp) -> Option<Timestamp> {
        self.start
            .after(now.to_zoned(self.zone.clone()))
            .next()
            .map(|z| z.timestamp())
    }
}

/// The latest occurrence of `schedule` at or before `now`, searched forward from growing
/// look-back windows (an hour, a day, a week, a month, a year, five years): jiff-cron's backward
/// iteration is wrong across a daylight-saving change, its forward iteration is not.
fn previous(schedule: &jiff_cron::Schedule, zone: &TimeZone, now: Timestamp) -> Option<Timestamp> {
    const LOOK_BACK_HOURS: [i64; 6] = [1, 24, 8 * 24, 32 * 24, 367 * 24, 5 * 367 * 24];
    LOOK_BACK_HOURS.iter().find_map(|hours| {
        let from = now.checked_sub(SignedDuration::from_hours(*hours)).ok()?;
        schedule
            .after(from.to_zoned(zone.clone()))
            .map(|z| z.timestamp())
            .take_while(|t| *t <= now)
            .last()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(start: &str, end: Option<&str>, duration: Option<i32>, zone: &str) -> ScheduleSpec {
        ScheduleSpec {
            name: "s".into(),
            start: start.into(),
            end: end.map(Into::into),
            duration_seconds: duration,
            time_zone: Some(zone.into()),
            min_replicas: Some(4),
            max_replicas: None,
        }
    }

    fn at(text: &str) -> Timestamp {
        text.parse().expect("timestamp")
    }

    #[test]
    fn weekday_business_hours_in_berlin() {
        let s = Schedule::compile(&spec(
            "0 8 * * Mon-Fri",
            Some("0 20 * * Mon-Fri"),
            None,
            "Europe/Berlin",
        ))
        .expect("valid");
        // 2026-12-01 is a Tuesday; Berlin is UTC+1 in winter.
        let table = [
            ("2026-12-01T06:59:59Z", false),
            ("2026-12-01T07:00:00Z", true),
            ("2026-12-01T18:59:59Z", true),
            ("2026-12-01T19:00:00Z", false),
            ("2026-12-05T10:00:00Z", false), // Saturday
        ];
        for (now, want) in table {
            assert_eq!(s.is_active(at(now)), want, "{now}");
        }
    }

    #[test]
    fn a_dst_change_moves_an_end_by_local_time_and_a_duration_by_elapsed_time() {
        // Europe/Berlin springs forward on 2026-03-29 at 02:00 (UTC+1 -> UTC+2).
        let by_end = Schedule::compile(&spec(
            "0 0 * * *",
            Some("0 12 * * *"),
            None,
            "Europe/Berlin",
        ))
        .expect("valid");
        let lasting = Schedule::compile(&spec("0 0 * * *", None, Some(12 * 3600), "Europe/Berlin"))
            .expect("valid");
        // Local midnight was 23:00 UTC on the 28th; local noon is 10:00 UTC on the 29th.
        let table = [
            ("2026-03-28T22:59:59Z", false, false),
            ("2026-03-28T23:00:00Z", true, true),
            ("2026-03-29T09:59:59Z", true, true),
            ("2026-03-29T10:00:00Z", false, true), // 12:00 local: `end` fires
            ("2026-03-29T10:59:59Z", false, true), // 12 h elapsed only at 11:00 UTC (13:00 local)
            ("2026-03-29T11:00:00Z", false, false),
        ];
        for (now, end_active, duration_active) in table {
            assert_eq!(by_end.is_active(at(now)), end_active, "end mode at {now}");
            assert_eq!(
                lasting.is_active(at(now)),
                duration_active,
                "duration mode at {now}"
            );
        }
    }

    #[test]
    fn a_start_inside_the_spring_gap_is_skipped_that_day() {
        // 02:30 does not exist in Berlin on 2026-03-29: the next start is 02:30 on the 30th.
        let s = Schedule::compile(&spec("30 2 * * *", None, Some(3600), "Europe/Berlin"))
            .expect("valid");
        let next = s.next_start(at("2026-03-28T23:00:00Z")).expect("fires");
        assert_eq!(next, at("2026-03-30T00:30:00Z"));
        assert!(!s.is_active(at("2026-03-29T01:45:00Z")));
    }

    #[test]
    fn a_repeated_autumn_hour_starts_once() {
        // Berlin falls back on 2026-10-25: 02:00-03:00 happens twice (UTC+2, then UTC+1).
        let s = Schedule::compile(&spec("30 2 * * *", None, Some(600), "Europe/Berlin"))
            .expect("valid");
        assert!(
            s.is_active(at("2026-10-25T00:35:00Z")),
            "first 02:30 (UTC+2)"
        );
        assert_eq!(
            s.next_start(at("2026-10-25T00:31:00Z")),
            Some(at("2026-10-26T01:30:00Z")),
            "no second start in the repeated hour"
        );
    }

    #[test]
    fn bad_input_names_the_field() {
        let problems = |s: ScheduleSpec| Schedule::compile(&s).expect_err("invalid");
        let p = problems(spec("0 8 * *", None, Some(3600), "UTC"));
        assert_eq!(p[0].0, "start");
        assert!(p[0].1.contains("has 4 fields"), "{}", p[0].1);
        let p = problems(spec("0 8 * * *", Some("99 * * * *"), None, "UTC"));
        assert_eq!(p[0].0, "end");
        let p = problems(spec("0 8 * * *", None, Some(3600), "Mars/Olympus"));
        assert_eq!(p[0].0, "timeZone");
        let p = problems(spec("0 8 * * *", None, None, "UTC"));
        assert_eq!(p[0].0, "end");
        let p = problems(spec("0 8 * * *", Some("0 9 * * *"), Some(3600), "UTC"));
        assert_eq!(p[0].0, "durationSeconds");
        let p = problems(spec("0 8 * * *", None, Some(0), "UTC"));
        assert_eq!(p[0].0, "durationSeconds");
    }
}
