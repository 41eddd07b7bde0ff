//! Scheduled floors and ceilings applied to the policy (docs/guards.md#schedules): while active,
//! a schedule raises `minReplicas` and/or lowers `maxReplicas`; overlapping schedules combine as
//! the highest floor and the lowest ceiling. When a floor exceeds a ceiling the ceiling wins (a
//! GPU cap is never exceeded), as in [`super::Policy::clamp`].

use k8s_openapi::jiff::Timestamp;
use llmscaler_api::LLMScalerSpec;
use llmscaler_api::schedule::Schedule;

use super::Policy;

/// The spec's schedules, compiled; schedules that do not compile are left out (admission and
/// the controller's re-check refuse such a spec).
pub fn compile(spec: &LLMScalerSpec) -> Vec<Schedule> {
    spec.schedules()
        .iter()
        .filter_map(|s| Schedule::compile(s).ok())
        .collect()
}

/// Applies the schedules active at `now` to `policy`'s bounds and returns their names, in spec
/// order.
pub fn apply(policy: &mut Policy, schedules: &[Schedule], now: Timestamp) -> Vec<String> {
    let mut active = Vec::new();
    for schedule in schedules.iter().filter(|s| s.is_active(now)) {
        if let Some(floor) = schedule.min_replicas {
            policy.min_replicas = policy.min_replicas.max(floor);
        }
        if let Some(ceiling) = schedule.max_replicas {
            policy.max_replicas = policy.max_replicas.min(ceiling);
        }
        active.push(schedule.name.clone());
    }
    active
}

#[cfg(test)]
mod tests {
    use llmscaler_api::ScheduleSpec;

    use super::*;

    fn schedule(
        name: &str,
        start: &str,
        hours: i32,
        floor: Option<i32>,
        ceiling: Option<i32>,
    ) -> Schedule {
        Schedule::compile(&ScheduleSpec {
            name: name.into(),
            start: start.into(),
            end: None,
            duration_seconds: Some(hours * 3600),
            time_zone: Some("Europe/Berlin".into()),
            min_replicas: floor,
            max_replicas: ceiling,
        })
        .expect("valid")
    }

    fn policy() -> Policy {
        Policy {
            min_replicas: 1,
            max_replicas: 10,
            window_ms: 0,
            max_step_replicas: 0,
            scale_up: super::super::scale_up::ScaleUpRules::default(),
        }
    }

    #[test]
    fn overlapping_schedules_take_the_highest_floor_and_the_lowest_ceiling() {
        let schedules = [
            schedule("warm", "0 8 * * Mon-Fri", 12, Some(4), None),
            schedule("peak", "0 12 * * Mon-Fri", 2, Some(6), Some(8)),
            schedule("night-cap", "0 22 * * *", 8, None, Some(3)),
        ];
        // 2026-12-01 is a Tuesday; Berlin is UTC+1.
        let table: [(&str, (i32, i32), &[&str]); 5] = [
            ("2026-12-01T06:00:00Z", (1, 10), &[]),
            ("2026-12-01T08:00:00Z", (4, 10), &["warm"]),
            ("2026-12-01T11:30:00Z", (6, 8), &["warm", "peak"]),
            ("2026-12-01T22:00:00Z", (1, 3), &["night-cap"]),
            ("2026-12-05T11:30:00Z", (1, 10), &[]),
        ];
        for (now, (min, max), names) in table {
            let mut p = policy();
            let active = apply(&mut p, &schedules, now.parse().expect("time"));
            assert_eq!((p.min_replicas, p.max_replicas), (min, max), "{now}");
            assert_eq!(active, names, "{now}");
        }
    }

    #[test]
    fn a_floor_above_a_ceiling_yields_to_the_ceiling() {
        let schedules = [
            schedule("warm", "0 8 * * *", 12, Some(6), None),
            schedule("cap", "0 8 * * *", 12, None, Some(3)),
        ];
        let mut p = policy();
        apply(
            &mut p,
            &schedules,
            "2026-12-01T08:00:00Z".parse().expect("time"),
        );
        assert_eq!(p.clamp(9), (3, Some(super::super::Limit::Max)));
        assert_eq!(p.clamp(1).0, 3, "the floor 6 cannot exceed the cap 3");
    }
}
