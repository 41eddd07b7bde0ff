//! The seeded request trace rebuilt from the history (docs/backtest.md#what-it-assumes):
//! each step gets exactly the arrivals its counter increase shows, in clusters whose mean size
//! follows the measured dispersion, at uniform times in the step; prompt and output sizes are
//! drawn from the observed histogram buckets, with the position inside a bucket chosen so that
//! the mean equals the histogram's exact `_sum / _count`.

use llmscaler_loadmodel::Request;

/// Seconds over which the members of one cluster of arrivals land (a burst, not one instant).
pub(crate) const CLUSTER_SPREAD_S: f64 = 1.0;

/// Largest mean cluster size used, requests.
const MAX_CLUSTER_MEAN: f64 = 50.0;

/// SplitMix64: small, seedable, the same on every platform.
#[derive(Clone, Debug)]
pub(crate) struct Rng(u64);

impl Rng {
    /// A generator seeded with `seed`.
    pub(crate) fn new(seed: u64) -> Self {
        Self(seed)
    }

    fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in `[0, 1)`.
    pub(crate) fn next_f64(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }
}

/// A size distribution of one window: cumulative bucket counts by upper bound (tokens, `+Inf`
/// last as `f64::INFINITY`) and the exact mean (`_sum / _count`), tokens.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Sizes {
    /// `(upper bound, requests in this bucket)` (not cumulative), bounds increasing.
    buckets: Vec<(f64, f64)>,
    /// Lower bound of each bucket.
    lows: Vec<f64>,
    /// Exponent of the position inside a bucket (`lo + (hi − lo) × u^alpha`).
    alpha: f64,
    total: f64,
}

impl Sizes {
    /// From cumulative `(le, count)` pairs (any order) and the mean; `None` when there is no
    /// observation. The `+Inf` bucket's upper bound is taken as twice the largest finite bound.
    pub(crate) fn from_cumulative(cumulative: &[(f64, f64)], mean: f64) -> Option<Self> {
        let mut sorted: Vec<(f64, f64)> = cumulative
            .iter()
            .copied()
            .filter(|(le, c)| !le.is_nan() && c.is_finite())
            .collect();
        sorted.sort_by(|a, b| a.0.total_cmp(&b.0));
        let largest_finite = sorted
            .iter()
            .map(|b| b.0)
            .filter(|b| b.is_finite())
            .fold(1.0, f64::max);
        let mut buckets = Vec::new();
        let mut lows = Vec::new();
        let (mut previous_count, mut low) = (0.0, 0.0);
        for (le, count) in sorted {
            let high = if le.is_finite() {
                le
            } else {
                largest_finite * 2.0
            };
            let n = (count - previous_count).max(0.0);
            previous_count = previous_count.max(count);
            buckets.push((high, n));
            lows.push(low);
            low = high;
        }
        let total: f64 = buckets.iter().map(|b| b.1).sum();
        if total <= 0.0 {
            return None;
        }
        // Mean with position x = 1 / (1 + alpha) inside each bucket: Σ p (lo + (hi − lo) x).
        let base: f64 = buckets
            .iter()
            .zip(&lows)
            .map(|((_, n), lo)| n / total * lo)
            .sum();
        let width: f64 = buckets
            .iter()
            .zip(&lows)
            .map(|((hi, n), lo)| n / total * (hi - lo))
            .sum();
        let x = if width > 0.0 && mean.is_finite() {
            ((mean - base) / width).clamp(0.02, 0.98)
        } else {
            0.5
        };
        Some(Self {
            buckets,
            lows,
            alpha: 1.0 / x - 1.0,
            total,
        })
    }

    /// One size, tokens (at least 1).
    pub(crate) fn draw(&self, rng: &mut Rng) -> u32 {
        let mut pick = rng.next_f64() * self.total;
        let mut chosen = self.buckets.len().saturating_sub(1);
        for (i, (_, n)) in self.buckets.iter().enumerate() {
            if pick < *n {
                chosen = i;
                break;
            }
            pick -= n;
        }
        let (hi, lo) = (
            self.buckets.get(chosen).map_or(1.0, |b| b.0),
            self.lows.get(chosen).copied().unwrap_or(0.0),
        );
        let value = lo + (hi - lo) * rng.next_f64().powf(self.alpha);
        #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
        let tokens = value.round().clamp(1.0, f64::from(u32::MAX)) as u32;
        tokens
    }
}

/// What the rebuild takes.
pub(crate) struct Plan<'a> {
    /// Arrivals per step (exact counter increases, gaps spread).
    pub(crate) counts: &'a [f64],
    /// Step length, seconds.
    pub(crate) step_s: f64,
    /// Mean cluster size, requests (≥ 1; 1 = Poisson).
    pub(crate) cluster_mean: f64,
    /// Prompt and output size distributions of the window holding each step.
    pub(crate) sizes: &'a dyn Fn(usize) -> Option<(&'a Sizes, &'a Sizes)>,
    /// Seed.
    pub(crate) seed: u64,
}

/// The mean cluster size of arrivals whose index of dispersion is `dispersion`: clusters of
/// geometric size with mean `m` have `E[S²] / E[S] = 2m − 1`.
pub(crate) fn cluster_mean(dispersion: f64) -> f64 {
    ((dispersion.max(1.0) + 1.0) / 2.0).min(MAX_CLUSTER_MEAN)
}

/// The trace, sorted by arrival (seconds from the start of the range); steps without a size
/// distribution get none (the caller checks there is one overall).
pub(crate) fn rebuild(plan: &Plan<'_>) -> Vec<Request> {
    let mut rng = Rng::new(plan.seed);
    let mut out = Vec::new();
    // P(size = k) = (1 − q) q^(k−1): mean 1 / (1 − q).
    let q = 1.0 - 1.0 / plan.cluster_mean.max(1.0);
    for (k, count) in plan.counts.iter().enumerate() {
        #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
        let mut left = count.round().max(0.0) as u64;
        let Some((prompt, output)) = (plan.sizes)(k) else {
            continue;
        };
        let start = k as f64 * plan.step_s;
        while left > 0 {
            let mut size = 1u64;
            while size < left && rng.next_f64() < q {
                size += 1;
            }
            let at = start + rng.next_f64() * plan.step_s;
            for _ in 0..size {
                let offset = if size > 1 {
                    rng.next_f64() * CLUSTER_SPREAD_S
                } else {
                    0.0
                };
                out.push(Request {
                    arrival_s: (at + offset).min(start + plan.step_s - 1e-3),
                    prompt_tokens: prompt.draw(&mut rng),
                    output_tokens: output.draw(&mut rng).max(1),
                });
            }
            left -= size;
        }
    }
    out.sort_by(|a, b| a.arrival_s.total_cmp(&b.arrival_s));
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_follow_the_buckets_and_the_exact_mean() {
        // 100 requests: 50 in (0, 100], 50 in (100, 1000]; exact mean 400.
        let s = Sizes::from_cumulative(
            &[(100.0, 50.0), (1000.0, 100.0), (f64::INFINITY, 100.0)],
            400.0,
        )
        .unwrap();
        let mut rng = Rng::new(3);
        let draws: Vec<u32> = (0..200_000).map(|_| s.draw(&mut rng)).collect();
        let mean = draws.iter().map(|d| f64::from(*d)).sum::<f64>() / draws.len() as f64;
        assert!((mean - 400.0).abs() / 400.0 < 0.01, "mean {mean}");
        let low = draws.iter().filter(|d| **d <= 100).count() as f64 / draws.len() as f64;
        assert!((low - 0.5).abs() < 0.01, "share in the first bucket {low}");
        assert!(Sizes::from_cumulative(&[(10.0, 0.0)], 5.0).is_none());
    }

    #[test]
    fn every_step_gets_exactly_its_arrivals_in_the_step() {
        let s = Sizes::from_cumulative(&[(10.0, 1.0), (f64::INFINITY, 1.0)], 5.0).unwrap();
        let sizes = |_k: usize| Some((&s, &s));
        let counts = [3.0, 0.0, 40.0, 7.0];
        for mean in [1.0, 4.0] {
            let plan = Plan {
                counts: &counts,
                step_s: 60.0,
                cluster_mean: mean,
                sizes: &sizes,
                seed: 9,
            };
            let trace = rebuild(&plan);
            for (k, want) in counts.iter().enumerate() {
                let lo = k as f64 * 60.0;
                let got = trace
                    .iter()
                    .filter(|r| r.arrival_s >= lo && r.arrival_s < lo + 60.0)
                    .count() as f64;
                assert_eq!(got, *want, "step {k} (mean {mean})");
            }
            assert_eq!(trace.len(), 50);
            assert_eq!(rebuild(&plan), trace, "seeded");
        }
        assert_eq!(cluster_mean(1.0), 1.0);
        assert_eq!(cluster_mean(5.0), 3.0);
    }
}
