//! Turning range-query series into per-step figures (docs/backtest.md#what-it-reads): exact
//! counter increases with resets and new pods, gaps (a step with no sample is a gap, never zero
//! traffic), a step-aligned gauge, and the arrivals' dispersion between adjacent steps.

use std::collections::BTreeMap;

use super::BacktestError;
use super::query::Series;

/// The step grid: points `start + k × step` for `k = 0..=steps`; step `k` (1-based) is the
/// window `(start + (k − 1) × step, start + k × step]`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Grid {
    /// Unix seconds of point 0.
    pub(crate) start: i64,
    /// Seconds between points (> 0).
    pub(crate) step: i64,
    /// Windows (points − 1).
    pub(crate) steps: usize,
}

impl Grid {
    /// Unix seconds of point `k`.
    pub(crate) fn at(&self, k: usize) -> i64 {
        self.start + i64::try_from(k).unwrap_or(i64::MAX / 2) * self.step
    }

    fn index(&self, t: i64) -> Option<usize> {
        let off = t - self.start;
        if off < 0 || off % self.step != 0 {
            return None;
        }
        let k = usize::try_from(off / self.step).ok()?;
        (k <= self.steps).then_some(k)
    }
}

/// Per step (index `k − 1` for window `k`), the increase of the counters summed over series:
/// exact from the samples (a value below the previous one is a reset: the new value counts; a
/// series first seen after point 0 is a new pod whose counter started at 0: its value counts).
///
/// # Errors
/// [`BacktestError::BadValue`] for a NaN, infinite or negative counter value.
pub(crate) fn increases(
    query: &str,
    series: &[Series],
    grid: Grid,
) -> Result<Vec<f64>, BacktestError> {
    let mut out = vec![0.0; grid.steps];
    for s in series {
        let mut previous: Option<f64> = None;
        for &(t, v) in &s.points {
            let Some(k) = grid.index(t) else { continue };
            if !(v.is_finite() && v >= 0.0) {
                return Err(BacktestError::BadValue {
                    query: query.to_owned(),
                    time: t,
                    value: v,
                    why: "a counter is finite and never negative",
                });
            }
            let increase = match previous {
                Some(p) if v >= p => v - p,
                Some(_) => v,
                None if k == 0 => 0.0,
                None => v,
            };
            if k > 0
                && let Some(slot) = out.get_mut(k - 1)
            {
                *slot += increase;
            }
            previous = Some(v);
        }
    }
    Ok(out)
}

/// A gauge at every point of the grid (one series, or the largest where several answer); a
/// point without a sample takes the previous point's value (the first known one before it).
///
/// # Errors
/// [`BacktestError::BadValue`] for a NaN, infinite or negative value.
pub(crate) fn gauge(
    query: &str,
    series: &[Series],
    grid: Grid,
) -> Result<Option<Vec<f64>>, BacktestError> {
    let mut at: BTreeMap<usize, f64> = BTreeMap::new();
    for s in series {
        for &(t, v) in &s.points {
            let Some(k) = grid.index(t) else { continue };
            if !(v.is_finite() && v >= 0.0) {
                return Err(BacktestError::BadValue {
                    query: query.to_owned(),
                    time: t,
                    value: v,
                    why: "a replica count is finite and never negative",
                });
            }
            let slot = at.entry(k).or_insert(v);
            *slot = slot.max(v);
        }
    }
    let Some(first) = at.values().next().copied() else {
        return Ok(None);
    };
    let mut last = first;
    Ok(Some(
        (0..=grid.steps)
            .map(|k| {
                if let Some(v) = at.get(&k) {
                    last = *v;
                }
                last
            })
            .collect(),
    ))
}

/// Which steps saw a sample: from the points of a `count_over_time(…[step])` query (a point
/// with a value above 0 at the end of a window = a sample in it).
pub(crate) fn covered(series: &[Series], grid: Grid) -> Vec<bool> {
    let mut out = vec![false; grid.steps];
    for s in series {
        for &(t, v) in &s.points {
            if let Some(k) = grid.index(t)
                && k > 0
                && v > 0.0
                && let Some(slot) = out.get_mut(k - 1)
            {
                *slot = true;
            }
        }
    }
    out
}

/// The steps' gaps, after [`spread_gaps`].
#[derive(Clone, Debug, Default, PartialEq)]
pub(crate) struct Gaps {
    /// Runs of steps without a sample inside the range, as `(first step, steps)` (0-based),
    /// whose arrivals (the counter's increase across the gap) were spread evenly over the gap
    /// and the step after it.
    pub(crate) inside: Vec<(usize, usize)>,
    /// Steps cut at the start (no sample yet).
    pub(crate) leading: usize,
    /// Steps cut at the end (no sample any more).
    pub(crate) trailing: usize,
}

/// Spreads the counts of each inside gap (steps with `covered` false where the fleet ran pods)
/// evenly over the gap and the step that ends it (the counter's increase across a gap is known
/// exactly, its timing is not). Steps where `replicas` is 0 are not gaps (no pods, no samples,
/// no traffic served). Returns the counts with leading and trailing gaps cut, and the gaps.
pub(crate) fn spread_gaps(
    counts: &[f64],
    covered: &[bool],
    replicas: Option<&[f64]>,
) -> (Vec<f64>, Gaps) {
    let n = counts.len();
    let no_pods = |k: usize| replicas.and_then(|r| r.get(k)).is_some_and(|r| *r <= 0.0);
    let gap = |k: usize| !covered.get(k).copied().unwrap_or(false) && !no_pods(k);
    let leading = (0..n).take_while(|k| gap(*k)).count();
    let trailing = (leading..n).rev().take_while(|k| gap(*k)).count();
    let mut out: Vec<f64> = counts.to_vec();
    let mut gaps = Gaps {
        inside: Vec::new(),
        leading,
        trailing,
    };
    let end = n - trailing;
    let mut k = leading;
    while k < end {
        if !gap(k) {
            k += 1;
            continue;
        }
        let first = k;
        while k < end && gap(k) {
            k += 1;
        }
        // k is the step that ends the gap (covered): spread over first..=k.
        let last = k.min(end - 1);
        let span = last - first + 1;
        let total: f64 = out[first..=last].iter().sum();
        let whole = (total / span as f64).floor();
        let mut rest = total - whole * span as f64;
        for slot in &mut out[first..=last] {
            *slot = whole;
            if rest >= 1.0 {
                *slot += 1.0;
                rest -= 1.0;
            }
        }
        gaps.inside.push((first, k - first));
        k = last + 1;
    }
    out.truncate(end);
    out.drain(..leading);
    (out, gaps)
}

/// The Allan factor of the arrivals at windows of `m` steps: `Σ (a − b)² / Σ (a + b)` over
/// adjacent windows' counts `a`, `b`; 1 for Poisson arrivals at a slowly changing rate, above 1
/// for bursty ones. `None` without two windows holding arrivals.
pub(crate) fn allan_factor(counts: &[f64], m: usize) -> Option<f64> {
    let m = m.max(1);
    let windows: Vec<f64> = counts.chunks_exact(m).map(|c| c.iter().sum()).collect();
    let (mut num, mut den) = (0.0, 0.0);
    for w in windows.windows(2) {
        num += (w[0] - w[1]).powi(2);
        den += w[0] + w[1];
    }
    (den > 0.0).then(|| num / den)
}

/// The arrivals' dispersion below the step (docs/backtest.md#what-it-assumes): bursts shorter
/// than a window give the same Allan factor at every window length, while the rate's own
/// changes raise it with the length; the factor at one and two steps, extrapolated linearly to
/// a zero-length window, keeps the first and drops the second: `max(1, 2 A(1) − A(2))`.
/// Returns `(A(1), A(2), estimate)`; 1 where there is nothing to measure.
pub(crate) fn dispersion(counts: &[f64]) -> (f64, f64, f64) {
    let one = allan_factor(counts, 1).unwrap_or(1.0);
    let two = allan_factor(counts, 2).unwrap_or(one);
    (one, two, (2.0 * one - two).max(1.0))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn series(points: &[(i64, f64)]) -> Series {
        Series {
            labels: BTreeMap::new(),
            points: points.to_vec(),
        }
    }

    const GRID: Grid = Grid {
        start: 1000,
        step: 60,
        steps: 4,
    };

    #[test]
    fn increases_are_exact_across_resets_and_new_pods() {
        // Pod a: 10 at point 0 (baseline), 15, reset to 3, 8, 8.
        let a = series(&[
            (1000, 10.0),
            (1060, 15.0),
            (1120, 3.0),
            (1180, 8.0),
            (1240, 8.0),
        ]);
        // Pod b appears at point 2 with 4 (counted: a new pod starts at 0), then 6.
        let b = series(&[(1120, 4.0), (1180, 6.0)]);
        let inc = increases("q", &[a, b], GRID).unwrap();
        assert_eq!(inc, vec![5.0, 3.0 + 4.0, 5.0 + 2.0, 0.0]);
    }

    #[test]
    fn nan_or_negative_counters_are_refused_with_the_query() {
        for bad in [f64::NAN, -1.0, f64::INFINITY] {
            let err = increases("my_q", &[series(&[(1000, 1.0), (1060, bad)])], GRID)
                .unwrap_err()
                .to_string();
            assert!(err.contains("my_q"), "{err}");
        }
    }

    #[test]
    fn gaps_are_spread_never_zero_and_the_ends_are_cut() {
        // Steps 0..6: no sample in 0, 3, 4 and 6; 30 counted at step 5 after the gap.
        let counts = [0.0, 10.0, 10.0, 0.0, 0.0, 30.0, 0.0];
        let covered = [false, true, true, false, false, true, false];
        let (out, gaps) = spread_gaps(&counts, &covered, None);
        assert_eq!(out, vec![10.0, 10.0, 10.0, 10.0, 10.0]);
        assert_eq!(gaps.inside, vec![(3, 2)]);
        assert_eq!((gaps.leading, gaps.trailing), (1, 1));
        // With no pods at steps 3 and 4, they are not gaps: nothing was served there.
        let replicas = [1.0, 1.0, 1.0, 0.0, 0.0, 1.0, 1.0];
        let (out, gaps) = spread_gaps(&counts, &covered, Some(&replicas));
        assert_eq!(out, vec![10.0, 10.0, 0.0, 0.0, 30.0]);
        assert!(gaps.inside.is_empty());
    }

    #[test]
    fn a_gauge_holds_its_last_value_and_takes_the_largest_series() {
        let a = series(&[(1060, 2.0), (1180, 3.0)]);
        let b = series(&[(1060, 1.0), (1240, 4.0)]);
        let g = gauge("q", &[a, b], GRID).unwrap().unwrap();
        assert_eq!(g, vec![2.0, 2.0, 2.0, 3.0, 4.0]);
        assert_eq!(gauge("q", &[], GRID).unwrap(), None);
    }

    #[test]
    fn dispersion_keeps_short_bursts_and_drops_slow_rate_changes() {
        assert_eq!(dispersion(&[10.0; 50]).2, 1.0);
        // Clusters of 5 arriving as a Poisson process: A ≈ E[S²]/E[S] = 5 at every length.
        let mut rng = super::super::rebuild::Rng::new(4);
        let clustered: Vec<f64> = (0..4000)
            .map(|_| {
                // Poisson(4) clusters per step by inversion, 5 requests each.
                let (mut k, mut p, u) = (0.0, (-4.0f64).exp(), rng.next_f64());
                let mut cdf = p;
                while u > cdf {
                    k += 1.0;
                    p *= 4.0 / k;
                    cdf += p;
                }
                5.0 * k
            })
            .collect();
        let (one, two, est) = dispersion(&clustered);
        assert!(
            (one - 5.0).abs() < 0.5 && (two - 5.0).abs() < 0.6,
            "{one} {two}"
        );
        assert!((est - 5.0).abs() < 1.0, "{est}");
        // A rate ramping slowly with exact counts: no bursts below the step.
        let ramp: Vec<f64> = (0..400).map(|i| 10.0 + f64::from(i % 40)).collect();
        assert_eq!(dispersion(&ramp).2, 1.0);
    }
}
