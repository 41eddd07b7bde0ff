//! When each scaler syncs (`docs/scaling.md#pacing`), pure. Every scaler has a stable phase in
//! its period, taken from a hash of `namespace/name`, and syncs when the wall clock (milliseconds
//! since the Unix epoch) is at that phase: N scalers with the same `syncPeriodSeconds` are spread
//! evenly over the period instead of firing in one burst, and the phase is the same on every
//! replica and after a restart. The delay from that due time to the sync's evaluation is the
//! evaluation lag (`llmscaler_evaluation_lag_seconds`).

/// A sync that starts this long (milliseconds) before its due time still counts as the due sync
/// (timer rounding); earlier than that, it was triggered by a change of the scaler and its lag is
/// not measured.
pub const EARLY_TOLERANCE_MS: i64 = 50;

/// FNV-1a, 64 bits: stable across Rust versions and processes (unlike the standard library's
/// `DefaultHasher`), so a scaler keeps its phase on every replica.
fn fnv1a(parts: &[&[u8]]) -> u64 {
    const OFFSET: u64 = 0xcbf2_9ce4_8422_2325;
    const PRIME: u64 = 0x0000_0100_0000_01b3;
    parts
        .iter()
        .flat_map(|part| part.iter())
        .fold(OFFSET, |hash, byte| {
            (hash ^ u64::from(*byte)).wrapping_mul(PRIME)
        })
}

/// MurmurHash3's 64-bit finalizer: spreads FNV's weak low bits (names that differ only in a
/// trailing digit) over the whole word before the modulo.
fn mix(mut h: u64) -> u64 {
    h ^= h >> 33;
    h = h.wrapping_mul(0xff51_afd7_ed55_8ccd);
    h ^= h >> 33;
    h = h.wrapping_mul(0xc4ce_b9fe_1a85_ec53);
    h ^ (h >> 33)
}

/// The phase of scaler `namespace/name` in a period of `period_ms` milliseconds: a whole number
/// of milliseconds in `0..period_ms` (0 when `period_ms` ≤ 1).
pub fn phase_ms(namespace: &str, name: &str, period_ms: i64) -> i64 {
    let Ok(period) = u64::try_from(period_ms) else {
        return 0;
    };
    if period <= 1 {
        return 0;
    }
    let hash = mix(fnv1a(&[namespace.as_bytes(), b"/", name.as_bytes()]));
    i64::try_from(hash % period).unwrap_or(0)
}

/// The next due time (milliseconds since the epoch) of a scaler with phase `phase_ms` in a period
/// of `period_ms` milliseconds, after a sync that started at `now_ms`: the first time at that
/// phase that is at least half a period after `now_ms`. So a sync on time is followed by the next
/// one exactly a period later, a late one (lag under half a period) still by the next slot, and a
/// sync triggered early by a change (a new spec) does not bring the next one closer than half a
/// period. A `period_ms` ≤ 0 is read as 1 ms.
pub fn next_due_ms(now_ms: i64, period_ms: i64, phase_ms: i64) -> i64 {
    let period = period_ms.max(1);
    let earliest = now_ms.saturating_add(period / 2);
    let phase = phase_ms.rem_euclid(period);
    // The first slot ≥ earliest: slots are phase + k × period.
    let offset = (earliest - phase).rem_euclid(period);
    if offset == 0 {
        earliest
    } else {
        earliest.saturating_add(period - offset)
    }
}

/// The evaluation lag, seconds, of a sync evaluated at `now_ms` that was due at `due_ms`: `None`
/// when it started more than [`EARLY_TOLERANCE_MS`] before its due time (a sync triggered by a
/// change, not by its schedule), otherwise the delay, never negative.
pub fn lag_seconds(due_ms: i64, now_ms: i64) -> Option<f64> {
    if now_ms < due_ms.saturating_sub(EARLY_TOLERANCE_MS) {
        return None;
    }
    #[allow(clippy::cast_precision_loss)] // milliseconds of lag, far below 2^52
    let lag = (now_ms - due_ms).max(0) as f64 / 1000.0;
    Some(lag)
}

#[cfg(test)]
mod tests {
    use super::*;

    const PERIOD: i64 = 15_000;

    #[test]
    fn the_phase_is_stable_and_within_the_period() {
        let a = phase_ms("team-a", "llama", PERIOD);
        assert_eq!(a, phase_ms("team-a", "llama", PERIOD));
        assert!((0..PERIOD).contains(&a));
        // The separator keeps `a/bc` and `ab/c` apart.
        assert_ne!(phase_ms("a", "bc", PERIOD), phase_ms("ab", "c", PERIOD));
        assert_eq!(phase_ms("ns", "x", 1), 0);
        assert_eq!(phase_ms("ns", "x", 0), 0);
        assert_eq!(phase_ms("ns", "x", -5), 0);
        // FNV-1a of the empty input is its offset basis; a pinned value guards the algorithm.
        assert_eq!(fnv1a(&[]), 0xcbf2_9ce4_8422_2325);
        assert_eq!(fnv1a(&[b"a"]), 0xaf63_dc4c_8601_ec8c);
    }

    #[test]
    fn scalers_with_the_same_period_are_spread_over_it() {
        // 1,000 scalers named like a fleet: every tenth of the period holds about a tenth of
        // them, and no 150 ms window holds more than a few times its share (10).
        let phases: Vec<i64> = (0..1000)
            .map(|i| phase_ms("bench", &format!("scaler-{i}"), PERIOD))
            .collect();
        let mut deciles = [0usize; 10];
        for p in &phases {
            deciles[usize::try_from(p * 10 / PERIOD).expect("small")] += 1;
        }
        for (i, n) in deciles.iter().enumerate() {
            assert!((60..=140).contains(n), "decile {i} holds {n} of 1000");
        }
        let mut windows = vec![0usize; 100];
        for p in &phases {
            windows[usize::try_from(p / 150).expect("small")] += 1;
        }
        let busiest = windows.iter().max().copied().unwrap_or_default();
        assert!(busiest <= 30, "a 150 ms window holds {busiest} of 1000");
    }

    #[test]
    fn syncs_on_time_follow_each_other_one_period_apart() {
        let phase = 4_321;
        let first = next_due_ms(1_000_000, PERIOD, phase);
        assert_eq!((first - phase).rem_euclid(PERIOD), 0);
        assert!(first >= 1_000_000 + PERIOD / 2);
        assert!(first < 1_000_000 + PERIOD / 2 + PERIOD);
        // On time, and 3 s late: the next slot, one period after the due one.
        assert_eq!(next_due_ms(first, PERIOD, phase), first + PERIOD);
        assert_eq!(next_due_ms(first + 3_000, PERIOD, phase), first + PERIOD);
        // Half a period late is the latest that still keeps the next slot.
        assert_eq!(
            next_due_ms(first + PERIOD / 2, PERIOD, phase),
            first + PERIOD
        );
        assert_eq!(
            next_due_ms(first + PERIOD / 2 + 1, PERIOD, phase),
            first + 2 * PERIOD
        );
    }

    #[test]
    fn an_early_sync_does_not_bring_the_next_one_closer_than_half_a_period() {
        let phase = 0;
        // A spec change 1 s before the slot at 30 000 ms: the next sync is at 45 000, not 30 000.
        assert_eq!(next_due_ms(29_000, PERIOD, phase), 45_000);
        // Right after a slot: the next slot is a full period away.
        assert_eq!(next_due_ms(30_001, PERIOD, phase), 45_000);
        // The earliest allowed time on a slot is that slot.
        assert_eq!(next_due_ms(22_500, PERIOD, phase), 30_000);
    }

    #[test]
    fn degenerate_periods_and_phases_stay_in_range() {
        assert_eq!(next_due_ms(100, 0, 0), 100);
        assert_eq!(next_due_ms(100, 1, 0), 100);
        // A phase outside 0..period is taken modulo the period.
        assert_eq!(
            next_due_ms(0, PERIOD, PERIOD + 10),
            next_due_ms(0, PERIOD, 10)
        );
        assert_eq!(
            next_due_ms(0, PERIOD, -10),
            next_due_ms(0, PERIOD, PERIOD - 10)
        );
        assert_eq!(next_due_ms(i64::MAX - 5, PERIOD, 0), i64::MAX);
    }

    #[test]
    fn the_lag_counts_from_the_due_time_and_skips_early_syncs() {
        assert_eq!(lag_seconds(10_000, 10_250), Some(0.25));
        assert_eq!(lag_seconds(10_000, 10_000), Some(0.0));
        // Timer rounding: a few milliseconds early counts as on time.
        assert_eq!(lag_seconds(10_000, 9_990), Some(0.0));
        // Triggered by a change, seconds before its slot: no lag to measure.
        assert_eq!(lag_seconds(10_000, 4_000), None);
    }
}
