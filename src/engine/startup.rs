//! Start-up awareness (docs/guards.md#start-up-awareness): the time from a scale-up to its
//! replicas Ready, measured from the target's `readyReplicas` at each sync and smoothed over
//! scale-ups, and the scale-down stabilization window that follows it.
//!
//! The measurement has the resolution of the observations (a sync period in the controller): a
//! scale-up written at `t0` whose count `readyReplicas` first reaches at the sync of `t1` gives
//! the sample `t1 − t0`, up to one sync period longer than the true time.

use llmscaler_api::{LLMScalerSpec, parse_window_multiple};

/// Weight of a new sample in the exponentially weighted moving average (0..1).
pub(crate) const SMOOTHING: f64 = 0.5;
/// Most scale-ups waiting for their replicas at once; older ones are dropped unmeasured.
pub(crate) const MAX_PENDING: usize = 16;

/// A scale-up waiting for its replicas.
#[derive(Clone, Copy, Debug, PartialEq)]
struct Pending {
    since_ms: i64,
    want: i32,
}

/// The measured start-up time of one target.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct StartupTracker {
    pending: Vec<Pending>,
    smoothed_s: Option<f64>,
}

impl StartupTracker {
    /// A tracker seeded with a measurement (e.g. `status.startupSeconds` read back after a
    /// restart), seconds.
    pub fn seeded(seconds: Option<f64>) -> Self {
        Self {
            pending: Vec::new(),
            smoothed_s: seconds.filter(|s| s.is_finite() && *s >= 0.0),
        }
    }

    /// The smoothed start-up time, seconds, once one scale-up was measured (or seeded).
    pub fn seconds(&self) -> Option<f64> {
        self.smoothed_s
    }

    /// Notes that `spec.replicas` was raised to `to` at `now_ms`.
    pub(crate) fn note_scale_up(&mut self, now_ms: i64, to: i32) {
        if self.pending.len() >= MAX_PENDING {
            self.pending.remove(0);
        }
        self.pending.push(Pending {
            since_ms: now_ms,
            want: to,
        });
    }

    /// Takes one observation of the target at `now_ms`: every pending scale-up whose count
    /// `ready` reaches gives a sample; one whose count `spec` no longer asks for (scaled down or
    /// overwritten) is dropped unmeasured. Returns whether the smoothed time changed.
    pub fn observe(&mut self, now_ms: i64, spec: i32, ready: i32) -> bool {
        let mut changed = false;
        let mut kept = Vec::with_capacity(self.pending.len());
        for p in std::mem::take(&mut self.pending) {
            if ready >= p.want {
                #[allow(clippy::cast_precision_loss)]
                let sample = (now_ms - p.since_ms).max(0) as f64 / 1000.0;
                self.smoothed_s = Some(match self.smoothed_s {
                    Some(old) => old + SMOOTHING * (sample - old),
                    None => sample,
                });
                changed = true;
            } else if spec >= p.want {
                kept.push(p);
            }
        }
        self.pending = kept;
        changed
    }

    /// Replicas requested by a scale-up that are not Ready yet, given the current counts: the
    /// coming capacity (0 when nothing is pending).
    pub fn starting(&self, spec: i32, ready: i32) -> i32 {
        if self.pending.is_empty() {
            0
        } else {
            spec.saturating_sub(ready).max(0)
        }
    }
}

/// Whether `metrics` may not raise `spec.replicas` at `now_ms` (`startup.countStartingReplicas`):
/// replicas of a scale-up younger than the start-up time in force are still starting
/// (`ready < spec`). `false` without `spec.startup` or with the option off.
pub(crate) fn holds_scale_up(
    spec: &LLMScalerSpec,
    tracker: &StartupTracker,
    now_ms: i64,
    spec_replicas: i32,
    ready: i32,
) -> bool {
    let on = spec
        .startup
        .as_ref()
        .and_then(|s| s.count_starting_replicas)
        .unwrap_or(false);
    let Some(seconds) = startup_seconds(spec, tracker) else {
        return false;
    };
    #[allow(clippy::cast_possible_truncation)]
    let startup_ms = (seconds * 1000.0).round().clamp(0.0, 1e15) as i64;
    on && ready < spec_replicas
        && tracker
            .pending
            .iter()
            .any(|p| now_ms - p.since_ms < startup_ms)
}

/// The start-up time in force, seconds: the measured one, else `startup.initialSeconds`
/// (default 0). `None` without `spec.startup`.
pub fn startup_seconds(spec: &LLMScalerSpec, tracker: &StartupTracker) -> Option<f64> {
    let startup = spec.startup.as_ref()?;
    Some(
        tracker
            .seconds()
            .unwrap_or_else(|| f64::from(startup.initial_seconds.unwrap_or(0).max(0))),
    )
}

/// The scale-down stabilization window in force, milliseconds: the larger of
/// `scaleDown.stabilizationWindowSeconds` and `startup.windowMultiple` × the start-up time in
/// force ([`startup_seconds`]); the configured window when `windowMultiple` is unset.
pub(crate) fn window_ms(spec: &LLMScalerSpec, configured_ms: i64, tracker: &StartupTracker) -> i64 {
    let Some(multiple) = spec
        .startup
        .as_ref()
        .and_then(|s| s.window_multiple.as_deref())
        .and_then(|m| parse_window_multiple(m).ok())
    else {
        return configured_ms;
    };
    let seconds = startup_seconds(spec, tracker).unwrap_or(0.0);
    // At most 20 × 1 h (validated range), so the cast is exact enough and in range.
    #[allow(clippy::cast_possible_truncation)]
    let follow_ms = (multiple * seconds * 1000.0).round().clamp(0.0, 1e15) as i64;
    configured_ms.max(follow_ms)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::clock::{Clock, ManualClock};

    fn now(clock: &ManualClock) -> i64 {
        clock.now().as_millisecond()
    }

    #[test]
    fn measures_and_smooths_scale_up_to_ready() {
        let clock = ManualClock::at_ms(1_000_000);
        let mut t = StartupTracker::default();
        // 2 -> 4 at t0; Ready 3 after 45 s, 4 after 90 s.
        t.note_scale_up(now(&clock), 4);
        clock.advance_ms(45_000);
        assert!(!t.observe(now(&clock), 4, 3));
        assert_eq!(t.starting(4, 3), 1);
        clock.advance_ms(45_000);
        assert!(t.observe(now(&clock), 4, 4));
        assert_eq!(t.seconds(), Some(90.0));
        assert_eq!(t.starting(4, 4), 0);
        // A second scale-up takes 60 s: EWMA with weight 0.5 → 75 s.
        t.note_scale_up(now(&clock), 6);
        clock.advance_ms(60_000);
        assert!(t.observe(now(&clock), 6, 6));
        assert_eq!(t.seconds(), Some(75.0));
    }

    #[test]
    fn a_scale_up_taken_back_is_not_measured() {
        let clock = ManualClock::at_ms(0);
        let mut t = StartupTracker::seeded(Some(30.0));
        t.note_scale_up(now(&clock), 8);
        clock.advance_ms(15_000);
        // Scaled back to 5 before the 8 were Ready: dropped.
        assert!(!t.observe(now(&clock), 5, 5));
        clock.advance_ms(600_000);
        assert!(!t.observe(now(&clock), 8, 8));
        assert_eq!(t.seconds(), Some(30.0));
    }

    #[test]
    fn overlapping_scale_ups_are_measured_each_from_its_own_start() {
        let clock = ManualClock::at_ms(0);
        let mut t = StartupTracker::default();
        t.note_scale_up(now(&clock), 3);
        clock.advance_ms(30_000);
        t.note_scale_up(now(&clock), 5);
        clock.advance_ms(60_000);
        // At 90 s: 3 Ready (first scale-up: 90 s), the second not yet.
        assert!(t.observe(now(&clock), 5, 3));
        assert_eq!(t.seconds(), Some(90.0));
        clock.advance_ms(30_000);
        // At 120 s: 5 Ready (second: 90 s after its own start).
        assert!(t.observe(now(&clock), 5, 5));
        assert_eq!(t.seconds(), Some(90.0));
    }

    fn spec(startup: Option<llmscaler_api::Startup>) -> LLMScalerSpec {
        let mut spec: LLMScalerSpec = serde_json::from_value(serde_json::json!({
            "targetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "vllm"},
            "serverAddress": "http://prometheus:9090",
            "minReplicas": 1, "maxReplicas": 10,
            "metrics": [{"query": "avg(x)", "target": "1"}]
        }))
        .expect("spec");
        spec.startup = startup;
        spec
    }

    #[test]
    fn the_window_follows_the_measured_start_up() {
        let mut t = StartupTracker::default();
        let none = spec(None);
        assert_eq!(window_ms(&none, 300_000, &t), 300_000);
        assert_eq!(startup_seconds(&none, &t), None);
        let follow = spec(Some(llmscaler_api::Startup {
            initial_seconds: Some(90),
            window_multiple: Some("2".into()),
            count_starting_replicas: None,
        }));
        // Nothing measured yet: 2 × initialSeconds; the configured window is a floor.
        assert_eq!(window_ms(&follow, 0, &t), 180_000);
        assert_eq!(window_ms(&follow, 240_000, &t), 240_000);
        t.note_scale_up(0, 2);
        t.observe(40_000, 2, 2);
        assert_eq!(startup_seconds(&follow, &t), Some(40.0));
        assert_eq!(window_ms(&follow, 0, &t), 80_000);
    }

    #[test]
    fn starting_replicas_hold_metric_scale_up_for_one_start_up_time() {
        let mut on = spec(Some(llmscaler_api::Startup {
            initial_seconds: Some(90),
            window_multiple: None,
            count_starting_replicas: Some(true),
        }));
        let mut t = StartupTracker::default();
        assert!(!holds_scale_up(&on, &t, 0, 4, 2), "nothing pending");
        t.note_scale_up(0, 4);
        assert!(holds_scale_up(&on, &t, 15_000, 4, 2));
        assert!(!holds_scale_up(&on, &t, 15_000, 4, 4), "all Ready");
        assert!(
            !holds_scale_up(&on, &t, 90_000, 4, 2),
            "start-up time passed"
        );
        on.startup
            .as_mut()
            .expect("startup")
            .count_starting_replicas = Some(false);
        assert!(!holds_scale_up(&on, &t, 15_000, 4, 2), "option off");
    }
}
