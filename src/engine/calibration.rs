//! The per-replica capacity of `spec.objective`, learned online from the fleet's own vLLM
//! metrics (docs/objective.md#calibration). No I/O: one sync's [`Evidence`] in, an
//! [`Estimate`] out.
//!
//! A vLLM replica runs a batch of at most `N` sequences (`--max-num-seqs`); each engine step
//! gives every decoding sequence one token and takes `base + per_seq × running + prefill
//! tokens / prefill rate`. With Little's law (`running = λ × output × step`) the prefill share
//! folds into the slope, so the mean inter-token latency is linear in the running batch:
//! `T(r) = a + b·r`. The estimator fits that line on `(running per replica, inter-token
//! latency)` pairs of unsaturated syncs too, and extrapolates it to the batch limit:
//! `μ = N / (output × T(N))` requests per second per replica, at the current mean output
//! length. `N` is the batch limit the pod template states (`--max-num-seqs`, within the KV
//! cache's batch), or else the running count of a replica seen with a queue (a full batch).
//!
//! Evidence ranks: `saturated` (completions per replica of the pods that each queued through
//! two rate windows, or before any did, while every replica queued through one; smoothed) wins
//! over `calibrated` (the fit at a known batch limit), which wins over `lowerBound` (the
//! best of the fit at the largest batch seen and the best throughput per replica observed; a
//! throughput a replica was seen to complete, though a 1 min window in which a replica
//! completes its shortest requests first can read above what it sustains).
//!
//! Source: the continuous-batching step model of docs/load-model.md; the extrapolation is
//! ordinary least squares on a line.

use std::collections::VecDeque;

/// Most `(running, latency)` pairs kept: one hour at a 15 s sync period.
pub(crate) const MAX_SAMPLES: usize = 240;
/// Fewest pairs, and the running spread (replica-sequences, and share of the largest), before
/// a line is fitted.
pub(crate) const MIN_SAMPLES: usize = 8;
const MIN_SPREAD: f64 = 0.2;
const MIN_SPREAD_SHARE: f64 = 0.25;
/// The queries' rate window (`objective::WINDOW`, 1 min), ms: a rate is a saturated throughput
/// (or a line pair) only once a run of queued (or calm) syncs on the same replicas spans it.
/// At the usual 15 s period that is 5 syncs; at 3 s, 21.
pub(crate) const WINDOW_MS: i64 = 60_000;
/// Smoothing of the request mix and of the saturated throughput, per sync.
const SMOOTHING: f64 = 0.2;
/// The correction factor's bounds and steps (docs/objective.md#correction).
pub(crate) const MAX_CORRECTION: f64 = 2.0;
const CORRECTION_UP: f64 = 1.05;
const CORRECTION_DOWN: f64 = 0.99;

/// How an estimate was obtained, as `status.capacity.basis` spells it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Basis {
    /// Completions per replica of the pods that queued through two rate windows, or while
    /// every replica queued through one.
    Saturated,
    /// The step-time line extrapolated to the batch limit: the pod template's `--max-num-seqs`
    /// (at most the KV cache's batch), or else a running count seen with a queue.
    Calibrated,
    /// The step-time line extrapolated to the batch the KV cache holds (no `--max-num-seqs`
    /// stated and no queue seen yet).
    Extrapolated,
    /// Not enough evidence: a value the truth is at least.
    LowerBound,
    /// Taken from the status of an earlier process, not yet confirmed.
    Restored,
}

impl Basis {
    /// The status spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            Basis::Saturated => "saturated",
            Basis::Calibrated => "calibrated",
            Basis::Extrapolated => "extrapolated",
            Basis::LowerBound => "lowerBound",
            Basis::Restored => "restored",
        }
    }
}

/// One sync's fleet readings, every value finite and non-negative (`None`: not measurable).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub(crate) struct Evidence {
    /// Completions, requests/s over the fleet.
    pub completions: f64,
    /// Prompt tokens/s over the fleet.
    pub prompt_tokens: f64,
    /// Generated tokens/s over the fleet.
    pub generation_tokens: f64,
    /// Requests waiting over the fleet.
    pub waiting: f64,
    /// Requests running over the fleet.
    pub running: f64,
    /// Replicas reporting, replicas.
    pub replicas: f64,
    /// The largest running count of one replica.
    pub max_running: f64,
    /// The largest queue of one replica.
    pub max_waiting: f64,
    /// The smallest queue of one replica.
    pub min_waiting: f64,
    /// The mean inter-token latency, seconds.
    pub inter_token: Option<f64>,
    /// The mean TTFT, seconds.
    pub ttft_mean: Option<f64>,
    /// The KV-cache usage summed over the replicas (each 0..1).
    pub kv_usage: f64,
    /// Completions per replica, requests/s, of the pods that queued through two rate windows
    /// (`None` when no pod did).
    pub pod_saturated: Option<f64>,
}

/// The capacity of one Ready replica, as estimated at one sync.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Estimate {
    /// How it was obtained.
    pub basis: Basis,
    /// Requests per second one replica completes at full load (`μ`).
    pub requests_per_second: f64,
    /// Prompt tokens per second one replica processes at full load (`μ` × mean prompt).
    pub prompt_tokens_per_second: Option<f64>,
    /// The best throughput per replica observed, requests/s.
    pub lower_bound: f64,
    /// The demand correction factor, 1..=2.
    pub correction: f64,
    /// Syncs of evidence.
    pub samples: i32,
    /// The fitted line `(a seconds, b seconds per sequence)` and the batch limit used.
    pub line: Option<(f64, f64, f64)>,
    /// The pod template's `--max-num-seqs`, sequences, when it states one (the batch limit is
    /// then that, or the KV cache's batch when smaller; else a running count seen with a queue).
    pub stated_limit: Option<f64>,
}

/// The estimator's memory (see the module documentation).
#[derive(Clone, Debug, Default, PartialEq)]
pub(crate) struct Calibration {
    pairs: VecDeque<(f64, f64)>,
    batch_limit: Option<f64>,
    /// The batch limit the pod template states (`--max-num-seqs`), sequences: known without a
    /// queue, it replaces `batch_limit`.
    stated_limit: Option<f64>,
    max_running: f64,
    best_throughput: f64,
    saturated: Option<f64>,
    /// The per-pod saturated throughput (pods that queued through two windows), smoothed: ranks
    /// above `saturated`, whose first queued window reads high.
    pod_saturated: Option<f64>,
    /// When this calibration saw its first evidence, ms: a per-pod reading counts only two
    /// windows later, so that after a rollout (a new calibration) the pods of the old template
    /// that had queued do not calibrate the new one at once.
    started_ms: Option<i64>,
    /// Since when (ms) every replica has queued, and no replica has, on how many replicas: the
    /// start of the current run (see [`WINDOW_MS`]).
    queued_since: Option<(i64, f64)>,
    calm_since: Option<(i64, f64)>,
    /// The busiest replica's running count at the last sync, when it had a queue.
    queued_running: Option<f64>,
    /// The sequences the KV cache holds per replica (running over usage), smoothed.
    kv_limit: Option<f64>,
    /// Mean prompt and output tokens per request, smoothed.
    mix: Option<(f64, f64)>,
    /// The TTFT of a request that did not queue, seconds, smoothed.
    floor: Option<f64>,
    correction: Option<f64>,
    syncs: i32,
    restored: Option<Estimate>,
}

impl Calibration {
    /// A calibration that starts from an estimate of an earlier process (`status.capacity`):
    /// used until fresh evidence of at least the same rank replaces it.
    pub(crate) fn restored(estimate: Estimate) -> Self {
        Self {
            correction: Some(estimate.correction.clamp(1.0, MAX_CORRECTION)),
            restored: Some(Estimate {
                basis: Basis::Restored,
                ..estimate
            }),
            ..Self::default()
        }
    }

    /// Takes the batch limit the target's pod template states (vLLM's `--max-num-seqs`,
    /// sequences per replica; `None`: not stated, learned from a queue instead).
    pub(crate) fn state_batch_limit(&mut self, max_num_seqs: Option<u32>) {
        self.stated_limit = max_num_seqs.map(f64::from);
    }

    /// The mean prompt and output tokens per request, when known.
    pub(crate) fn mix(&self) -> Option<(f64, f64)> {
        self.mix
    }

    /// The TTFT of an unqueued request, seconds, when known.
    pub(crate) fn floor(&self) -> Option<f64> {
        self.floor
    }

    /// Takes one sync's evidence, read at `now_ms`. `sized`: the Ready replicas were at least
    /// the objective's last recommendation without the probe (docs/objective.md#probing);
    /// `ttft_over`: the TTFT quantile was above the objective (`Some` when measured). The
    /// correction rises only when a fleet of the recommended size still misses the objective
    /// (a fleet still catching up says nothing about the model).
    pub(crate) fn observe(
        &mut self,
        e: &Evidence,
        now_ms: i64,
        sized: bool,
        ttft_over: Option<bool>,
    ) {
        if e.replicas < 1.0 {
            return;
        }
        self.syncs = self.syncs.saturating_add(1);
        let per_replica = e.completions / e.replicas;
        if per_replica.is_finite() {
            self.best_throughput = self.best_throughput.max(per_replica);
        }
        if e.completions > 0.0 {
            let prompt = e.prompt_tokens / e.completions;
            let output = e.generation_tokens / e.completions;
            if prompt.is_finite() && output.is_finite() && output > 0.0 {
                self.mix = Some(match self.mix {
                    None => (prompt, output),
                    Some((p, o)) => (smooth(p, prompt), smooth(o, output)),
                });
            }
        }
        self.max_running = self.max_running.max(e.max_running);
        let queued = (e.max_waiting > 0.0 && e.max_running > 0.0).then_some(e.max_running);
        if let (Some(now), Some(before)) = (queued, self.queued_running) {
            // A queue at two syncs in a row means a full batch (or a full KV cache): the
            // limit. One alone may be a request that arrived during a step.
            let limit = now.min(before);
            self.batch_limit = Some(self.batch_limit.unwrap_or(0.0).max(limit));
        }
        self.queued_running = queued;
        // A rate over the 1 min window is a saturated throughput only once the whole window
        // was saturated on the replicas reporting now; a line pair only once the whole window
        // was free of queues. Counted in time, not syncs: at a 3 s period five syncs cover a
        // quarter of the window, whose rate still holds the light load before the queue (an
        // overloaded replica read as 0.7 requests/s instead of 7.6, kept as `saturated`).
        self.queued_since = run(self.queued_since, e.min_waiting > 0.0, e.replicas, now_ms);
        self.calm_since = run(self.calm_since, e.max_waiting == 0.0, e.replicas, now_ms);
        let spans = |since: Option<(i64, f64)>| {
            since.is_some_and(|(t, _)| now_ms.saturating_sub(t) >= WINDOW_MS)
        };
        if spans(self.queued_since) && per_replica > 0.0 {
            self.saturated = Some(
                self.saturated
                    .map_or(per_replica, |s| smooth(s, per_replica)),
            );
        }
        let started = *self.started_ms.get_or_insert(now_ms);
        if let Some(v) = e.pod_saturated.filter(|v| v.is_finite() && *v > 0.0)
            && now_ms.saturating_sub(started) >= 2 * WINDOW_MS
        {
            self.pod_saturated = Some(self.pod_saturated.map_or(v, |s| smooth(s, v)));
        }
        if e.max_waiting == 0.0
            && let Some(ttft) = e.ttft_mean
        {
            self.floor = Some(self.floor.map_or(ttft, |f| smooth(f, ttft)));
        }
        if e.kv_usage > 0.01 && e.running > 0.0 {
            let limit = e.running / e.kv_usage;
            if limit.is_finite() {
                self.kv_limit = Some(self.kv_limit.map_or(limit, |k| smooth(k, limit)));
            }
        }
        // The decoding batch over the window by Little's law: tokens/s × seconds per token
        // (smooth where the running gauge, read at an instant, is not).
        let tokens = e.generation_tokens / e.replicas;
        if let Some(t) = e.inter_token
            && t > 0.0
            && spans(self.calm_since)
            && tokens * t >= 0.05
        {
            let running = tokens * t;
            if self.pairs.len() >= MAX_SAMPLES {
                self.pairs.pop_front();
            }
            self.pairs.push_back((running, t));
        }
        let correction = self.correction.unwrap_or(1.0);
        self.correction = Some(match ttft_over {
            Some(true) if sized => (correction * CORRECTION_UP).min(MAX_CORRECTION),
            Some(false) => (correction * CORRECTION_DOWN).max(1.0),
            _ => correction,
        });
    }

    /// The estimate now; `None` before any completion was seen and nothing was restored.
    pub(crate) fn estimate(&self) -> Option<Estimate> {
        let correction = self.correction.unwrap_or(1.0);
        let output = self.mix.map(|(_, o)| o);
        let line = fit(&self.pairs);
        // A replica prefills its prompts one after another (chunk by chunk), so it completes
        // at most one request per unqueued TTFT: the line, which sees the decoders only, may
        // not extrapolate past that (a prefill-bound mix of long prompts and short outputs).
        let prefill_bound = self.floor.map_or(f64::INFINITY, |f| 1.0 / f);
        let at = |n: f64| -> Option<f64> {
            let (a, b) = line?;
            let step = a + b * n;
            let mu = (n / (output? * step)).min(prefill_bound);
            (mu.is_finite() && mu > 0.0).then_some(mu)
        };
        // The pods' reading replaces the fleet's first windows, which read high; a lower fleet
        // reading (the mix moved to longer requests since) still counts.
        let saturated = match (self.pod_saturated, self.saturated) {
            (Some(p), Some(f)) => Some(p.min(f)),
            (p, f) => p.or(f),
        };
        // A stated limit holds within what the KV cache holds (vLLM preempts past it); without
        // a KV-cache reading (no `vllm:kv_cache_usage_perc`) it only caps a learned one, a
        // running count seen with a queue (`--max-num-seqs 1024` alone would otherwise stretch
        // the line to 1,024 sequences the cache may not hold).
        let limit = match (self.stated_limit, self.kv_limit) {
            (Some(n), Some(k)) => Some(k.max(self.max_running).min(n)),
            (Some(n), None) => self.batch_limit.map(|b| b.min(n)),
            (None, _) => self.batch_limit,
        };
        let fresh = if let Some(s) = saturated {
            Some((Basis::Saturated, s, limit))
        } else if let Some(n) = limit
            && let Some(mu) = at(n)
        {
            Some((Basis::Calibrated, mu.max(self.best_throughput), Some(n)))
        } else if let Some(n) = self.kv_limit.map(|k| k.max(self.max_running))
            && let Some(mu) = at(n)
        {
            Some((Basis::Extrapolated, mu.max(self.best_throughput), Some(n)))
        } else if self.best_throughput > 0.0 {
            let mu = at(self.max_running)
                .unwrap_or(0.0)
                .max(self.best_throughput);
            Some((Basis::LowerBound, mu, Some(self.max_running)))
        } else {
            None
        };
        let fresh = fresh.map(|(basis, mu, n)| Estimate {
            basis,
            requests_per_second: mu,
            prompt_tokens_per_second: self.mix.map(|(p, _)| p * mu),
            lower_bound: self.best_throughput,
            correction,
            samples: self.syncs,
            line: line.zip(n).map(|((a, b), n)| (a, b, n)),
            stated_limit: self.stated_limit,
        });
        match (fresh, self.restored) {
            (Some(f), Some(r)) if f.basis == Basis::LowerBound => Some(Estimate {
                requests_per_second: r.requests_per_second.max(f.requests_per_second),
                correction,
                ..r
            }),
            (Some(f), _) => Some(f),
            (None, r) => r.map(|r| Estimate { correction, ..r }),
        }
    }
}

/// The run `since` (start ms, replicas) after a sync at `now_ms` where the condition is `holds`
/// on `replicas`: kept while it holds on the same replicas, started anew at `now_ms` when it
/// holds on other replicas, ended when it does not hold.
fn run(since: Option<(i64, f64)>, holds: bool, replicas: f64, now_ms: i64) -> Option<(i64, f64)> {
    match since {
        _ if !holds => None,
        Some((t, r)) if (r - replicas).abs() < 0.5 => Some((t, r)),
        Some(_) | None => Some((now_ms, replicas)),
    }
}

fn smooth(old: f64, new: f64) -> f64 {
    old + SMOOTHING * (new - old)
}

/// The least-squares line `T = a + b·r` through the pairs, when there are enough of them,
/// spread enough, with a positive slope; `a` is floored at 0.
fn fit(pairs: &VecDeque<(f64, f64)>) -> Option<(f64, f64)> {
    if pairs.len() < MIN_SAMPLES {
        return None;
    }
    let (lo, hi) = pairs
        .iter()
        .fold((f64::INFINITY, 0.0_f64), |(lo, hi), &(r, _)| {
            (lo.min(r), hi.max(r))
        });
    if hi - lo < MIN_SPREAD.max(MIN_SPREAD_SHARE * hi) {
        return None;
    }
    #[allow(clippy::cast_precision_loss)]
    let n = pairs.len() as f64;
    let mean_r = pairs.iter().map(|p| p.0).sum::<f64>() / n;
    let mean_t = pairs.iter().map(|p| p.1).sum::<f64>() / n;
    let (sxy, sxx) = pairs.iter().fold((0.0, 0.0), |(sxy, sxx), &(r, t)| {
        (
            sxy + (r - mean_r) * (t - mean_t),
            sxx + (r - mean_r) * (r - mean_r),
        )
    });
    let b = sxy / sxx;
    if !(b.is_finite() && b > 0.0) {
        return None;
    }
    let a = mean_t - b * mean_r;
    if a >= 0.0 {
        return Some((a, b));
    }
    // A negative intercept: the line through the origin instead (never a faster step than
    // the data show at the batch limit).
    let (srt, srr) = pairs
        .iter()
        .fold((0.0, 0.0), |(srt, srr), &(r, t)| (srt + r * t, srr + r * r));
    let b = srt / srr;
    (b.is_finite() && b > 0.0).then_some((0.0, b))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The sync times of a 15 s period: 15 000, 30 000, ... ms.
    fn every_15_s() -> impl FnMut() -> i64 {
        let mut t = 0;
        move || {
            t += 15_000;
            t
        }
    }

    /// The default load-model profile on the conversation mix: step 0.012 + 0.00035·r s,
    /// prefill 12,000 tokens/s, 1,155 prompt and 211 output tokens per request. With Little's
    /// law the inter-token latency is `0.012 + (0.00035 + 1155 / (211 × 12000))·r`
    /// = `0.012 + 0.000806·r` s, so at the batch limit of 64: T = 0.0636 s and
    /// μ = 64 / (211 × 0.0636) = 4.77 requests/s.
    fn conv(running: f64, waiting: f64) -> Evidence {
        let t = 0.012 + (0.000_35 + 1155.0 / (211.0 * 12_000.0)) * running;
        let replicas = 2.0;
        let completions = replicas * running / (211.0 * t);
        Evidence {
            completions,
            prompt_tokens: completions * 1155.0,
            generation_tokens: completions * 211.0,
            waiting: waiting * replicas,
            running: running * replicas,
            replicas,
            max_running: running,
            max_waiting: waiting,
            min_waiting: waiting,
            inter_token: Some(t),
            ttft_mean: Some(0.2),
            kv_usage: 0.0,
            pod_saturated: None,
        }
    }

    /// Running sequences per replica at the syncs of an unqueued run: the first four fill the
    /// rate window, then one `(r, T)` pair per sync at r = 4 … 20.
    const CALM_RUNNING: [f64; 13] = [
        4.0, 4.0, 4.0, 4.0, 4.0, 6.0, 8.0, 10.0, 12.0, 14.0, 16.0, 18.0, 20.0,
    ];

    /// `e` with one replica queued at `max_running` running sequences.
    fn queued(e: Evidence, max_running: f64) -> Evidence {
        Evidence {
            max_waiting: 1.0,
            max_running,
            ..e
        }
    }

    #[test]
    fn extrapolates_unsaturated_evidence_to_the_batch_limit() {
        let mut next = every_15_s();
        let mut c = Calibration::default();
        // The first four syncs fill the rate window; then one pair per sync.
        for r in CALM_RUNNING {
            c.observe(&conv(r, 0.0), next(), true, Some(false));
        }
        // No queue seen yet: a lower bound, the line at the largest batch seen (20):
        // 20 / (211 × (0.012 + 0.000806 × 20)) = 3.37 requests/s.
        let e = c.estimate().unwrap();
        assert_eq!(e.basis, Basis::LowerBound);
        assert!((e.requests_per_second - 3.37).abs() < 0.02, "{e:?}");
        // One replica seen with a queue at 64 running, twice in a row: the batch limit, and
        // μ = 4.77 (once is not enough: a request may have arrived during a step).
        let queued = queued(conv(20.0, 0.0), 64.0);
        c.observe(&queued, next(), true, None);
        assert_eq!(c.estimate().unwrap().basis, Basis::LowerBound);
        c.observe(&queued, next(), true, None);
        let e = c.estimate().unwrap();
        assert_eq!(e.basis, Basis::Calibrated);
        assert!((e.requests_per_second - 4.77).abs() < 0.02, "{e:?}");
        // Prompt tokens per second at that mix: 4.77 × 1155 = 5,506.
        let tokens = e.prompt_tokens_per_second.unwrap();
        assert!((tokens - 5506.0).abs() < 30.0, "{tokens}");
    }

    #[test]
    fn a_stated_batch_limit_calibrates_without_a_queue_within_the_kv_cache() {
        // The pairs of `conv` at r = 4 … 20, never a queue, on a template stating
        // `--max-num-seqs 64`: the line at 64 at once, 4.77 requests/s (the learned limit of
        // the test above, here known from the first fit).
        // The KV cache holds 185 sequences (`r` running per replica at `r / 185` usage).
        let mut next = every_15_s();
        let mut c = Calibration::default();
        c.state_batch_limit(Some(64));
        let with_kv = |r: f64, kv: f64| Evidence {
            kv_usage: 2.0 * r / kv,
            ..conv(r, 0.0)
        };
        for r in CALM_RUNNING {
            c.observe(&with_kv(r, 185.0), next(), true, Some(false));
        }
        let e = c.estimate().unwrap();
        assert_eq!(e.basis, Basis::Calibrated);
        assert!((e.requests_per_second - 4.77).abs() < 0.02, "{e:?}");
        assert_eq!(e.line.map(|l| l.2), Some(64.0));
        assert_eq!(e.stated_limit, Some(64.0));
        // Without a KV-cache reading the stated limit only caps a learned one: a lower bound
        // (the line at 20, 3.37) until a queue shows one, here 128 running, capped to 64.
        let mut c = Calibration::default();
        c.state_batch_limit(Some(64));
        for r in CALM_RUNNING {
            c.observe(&conv(r, 0.0), next(), true, Some(false));
        }
        let e = c.estimate().unwrap();
        assert_eq!(e.basis, Basis::LowerBound);
        assert!((e.requests_per_second - 3.37).abs() < 0.02, "{e:?}");
        let queued = queued(conv(20.0, 0.0), 128.0);
        c.observe(&queued, next(), true, None);
        c.observe(&queued, next(), true, None);
        let e = c.estimate().unwrap();
        assert_eq!(
            (e.basis, e.line.map(|l| l.2)),
            (Basis::Calibrated, Some(64.0))
        );
        // `--max-num-seqs 256` where the KV cache holds 40 sequences (20 running at 50 %
        // usage): the limit is 40, μ = 40 / (211 × (0.012 + 0.000806 × 40)) = 4.29.
        let mut c = Calibration::default();
        c.state_batch_limit(Some(256));
        for r in CALM_RUNNING {
            c.observe(&with_kv(r, 40.0), next(), true, Some(false));
        }
        let e = c.estimate().unwrap();
        assert_eq!(e.basis, Basis::Calibrated);
        assert!((e.requests_per_second - 4.29).abs() < 0.02, "{e:?}");
        assert_eq!(e.line.map(|l| l.2.round()), Some(40.0));
        // Not stated, and no queue seen: the line goes to the KV cache's batch instead.
        c.state_batch_limit(None);
        assert_eq!(c.estimate().unwrap().basis, Basis::Extrapolated);
    }

    #[test]
    fn a_prefill_bound_mix_is_not_extrapolated_past_one_request_per_unqueued_ttft() {
        // The code mix: 2,048-token prompts, 28 output tokens, on the step line of `conv`.
        // Two replicas with `r` decoders each complete `2 × r / (28 × T(r))` requests/s
        // (Little's law); r = 0.2 … 1.0 gives at most 2.79 per replica. The decoders alone
        // extrapolate to 64 / (28 × 0.0636) = 35.9 requests/s at the batch limit; but a replica
        // prefills one prompt after another, and an unqueued request takes 0.25 s to its
        // first token: at most 1 / 0.25 = 4 requests/s.
        let code = |running: f64, waiting: f64| {
            let t = 0.012 + 0.000_806 * running;
            let completions = 2.0 * running / (28.0 * t);
            Evidence {
                completions,
                prompt_tokens: completions * 2048.0,
                generation_tokens: completions * 28.0,
                waiting: 2.0 * waiting,
                running: 2.0 * running,
                replicas: 2.0,
                max_running: running,
                max_waiting: waiting,
                min_waiting: waiting,
                inter_token: Some(t),
                ttft_mean: Some(0.25),
                kv_usage: 0.0,
                pod_saturated: None,
            }
        };
        let mut next = every_15_s();
        let mut c = Calibration::default();
        for r in [
            0.2, 0.2, 0.2, 0.2, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0,
        ] {
            c.observe(&code(r, 0.0), next(), true, Some(false));
        }
        let queued = queued(code(1.0, 0.0), 64.0);
        c.observe(&queued, next(), true, None);
        c.observe(&queued, next(), true, None);
        let e = c.estimate().unwrap();
        assert_eq!(e.basis, Basis::Calibrated);
        assert!((e.lower_bound - 2.79).abs() < 0.01, "{e:?}");
        assert!((e.requests_per_second - 4.0).abs() < 1e-9, "{e:?}");
    }

    #[test]
    fn saturated_windows_win_and_too_little_spread_fits_nothing() {
        let mut next = every_15_s();
        let mut c = Calibration::default();
        for _ in 0..20 {
            c.observe(&conv(10.0, 0.0), next(), true, None);
        }
        // 20 pairs at one batch size: no line; the best throughput, 10 / (211 × 0.02006) = 2.36.
        let e = c.estimate().unwrap();
        assert_eq!((e.basis, e.line), (Basis::LowerBound, None));
        assert!((e.requests_per_second - 2.363).abs() < 0.01, "{e:?}");
        // Every replica queued for five syncs (the first and one 60 s later: the rate window
        // at this period) at 5 requests/s each: saturated, 5.
        let queued = Evidence {
            completions: 10.0,
            ..conv(64.0, 3.0)
        };
        for _ in 0..4 {
            c.observe(&queued, next(), true, None);
        }
        assert_ne!(c.estimate().unwrap().basis, Basis::Saturated);
        c.observe(&queued, next(), true, None);
        let e = c.estimate().unwrap();
        assert_eq!(e.basis, Basis::Saturated);
        assert!((e.requests_per_second - 5.0).abs() < 1e-9);
    }

    /// The slow-large profile on the conversation trace, cold (docs/benchmarks/calibration.md):
    /// the one replica's first queued minute completed 2.02 requests/s (its shortest requests
    /// first, from a light batch), where it completes 1.29 on the whole mix; the fleet then grew
    /// past its queues and no later window replaced the 2.02. The pod's own reading after two
    /// windows of queue replaces it.
    #[test]
    fn a_pod_queued_through_two_windows_outranks_the_fleets_first_window() {
        let mut next = every_15_s();
        let mut c = Calibration::default();
        let queued = |completions: f64, pod_saturated: Option<f64>| Evidence {
            completions,
            replicas: 1.0,
            min_waiting: 3.0,
            max_waiting: 3.0,
            max_running: 32.0,
            pod_saturated,
            ..Evidence::default()
        };
        // t = 15 … 75 s: the fleet's first queued window.
        for _ in 0..5 {
            c.observe(&queued(2.02, None), next(), true, None);
        }
        let e = c.estimate().unwrap();
        assert_eq!(e.basis, Basis::Saturated);
        assert!((e.requests_per_second - 2.02).abs() < 1e-9, "{e:?}");
        // t = 90 s: a pod reading 75 s after this calibration started may be a pod of the
        // template before a rollout: not yet.
        c.observe(&queued(2.02, Some(1.25)), next(), true, None);
        assert!((c.estimate().unwrap().requests_per_second - 2.02).abs() < 1e-9);
        c.observe(&queued(2.02, None), next(), true, None);
        c.observe(&queued(2.02, None), next(), true, None);
        // t = 135 s, two windows after the start: the pod has queued through two windows and
        // completes 1.25/s; its reading replaces the fleet's (not smoothed with it).
        c.observe(&queued(1.6, Some(1.25)), next(), true, None);
        let e = c.estimate().unwrap();
        assert!((e.requests_per_second - 1.25).abs() < 1e-9, "{e:?}");
        // Higher fleet readings do not move it; the pods' are smoothed:
        // 1.25 + 0.2 × (1.35 − 1.25) = 1.27.
        c.observe(&queued(2.5, Some(1.35)), next(), true, None);
        c.observe(&queued(2.5, None), next(), true, None);
        let e = c.estimate().unwrap();
        assert_eq!(e.basis, Basis::Saturated);
        assert!((e.requests_per_second - 1.27).abs() < 1e-9, "{e:?}");
        // A reading that is not a throughput (0, NaN) is no evidence.
        c.observe(&queued(2.5, Some(0.0)), next(), true, None);
        c.observe(&queued(2.5, Some(f64::NAN)), next(), true, None);
        assert!((c.estimate().unwrap().requests_per_second - 1.27).abs() < 1e-9);
        // The fleet reads lower than the pods for long (the mix moved to longer requests): the
        // lower reading counts.
        for _ in 0..20 {
            c.observe(&queued(0.9, None), next(), true, None);
        }
        let e = c.estimate().unwrap();
        assert!(e.requests_per_second < 1.0, "{e:?}");
    }

    /// The objective's e2e fleet (e2e/tests/objective.rs) at a 3 s sync period: 20 requests/s
    /// arrive at one replica that completes 7.6/s; it queues from the first sync (t = 3 s), and
    /// its 1 min completion rate ramps as `7.6 × t / 60` while the window still holds the time
    /// before the load. Counted in syncs, five queued syncs (t = 15 s, rate 1.9) made that ramp
    /// a saturated throughput, smoothed to 2.11 by t = 21 s and kept once the fleet had grown
    /// past its queues: `saturated 2.11` beneath the 5.0 per replica the larger fleet was then
    /// seen to complete. Counted in time, no saturated throughput before a queued run spans the
    /// window on the same replicas: the best throughput seen (5.0) as a lower bound, then 7.6.
    #[test]
    fn a_saturated_throughput_needs_a_whole_window_of_queues_not_five_syncs() {
        let mut c = Calibration::default();
        let queued = |replicas: f64, completions: f64| Evidence {
            completions,
            replicas,
            min_waiting: 3.0,
            max_waiting: 3.0,
            max_running: 64.0,
            ..Evidence::default()
        };
        // 1 replica queued, t = 3 … 21 s: the rate ramps 0.38 … 2.66 requests/s.
        for t in (3..=21).step_by(3) {
            c.observe(
                &queued(1.0, 7.6 * f64::from(t) / 60.0),
                i64::from(t) * 1000,
                true,
                None,
            );
        }
        // 4 replicas, no queue, t = 24 … 51 s: 20 requests/s over them, 5.0 each.
        let calm = Evidence {
            completions: 20.0,
            replicas: 4.0,
            max_running: 40.0,
            ..Evidence::default()
        };
        for t in (24..=51).step_by(3) {
            c.observe(&calm, t * 1000, true, None);
        }
        let e = c.estimate().unwrap();
        assert_eq!(e.basis, Basis::LowerBound, "{e:?}");
        assert!((e.requests_per_second - 5.0).abs() < 1e-9, "{e:?}");
        // 2 replicas, both queued from t = 54 s, completing 15.2/s: saturated only at t = 114 s,
        // the run's start plus the window, and then at the whole window's 7.6 each.
        for t in (54..=111).step_by(3) {
            c.observe(&queued(2.0, 15.2), t * 1000, true, None);
        }
        assert_ne!(c.estimate().unwrap().basis, Basis::Saturated);
        c.observe(&queued(2.0, 15.2), 114_000, true, None);
        let e = c.estimate().unwrap();
        assert_eq!(e.basis, Basis::Saturated, "{e:?}");
        assert!((e.requests_per_second - 7.6).abs() < 1e-9, "{e:?}");
    }

    #[test]
    fn a_run_lasts_while_it_holds_on_the_same_replicas() {
        // (since, holds, replicas, now) -> run
        assert_eq!(run(None, true, 2.0, 3000), Some((3000, 2.0)));
        assert_eq!(run(Some((3000, 2.0)), true, 2.0, 6000), Some((3000, 2.0)));
        // Another fleet: the window's rate mixes two fleets' completions; start over.
        assert_eq!(run(Some((3000, 2.0)), true, 4.0, 6000), Some((6000, 4.0)));
        assert_eq!(run(Some((3000, 2.0)), false, 2.0, 6000), None);
        assert_eq!(run(None, false, 2.0, 6000), None);
    }

    #[test]
    fn the_correction_rises_only_on_a_sized_fleet_and_is_bounded() {
        let mut next = every_15_s();
        let mut c = Calibration::default();
        c.observe(&conv(10.0, 0.0), next(), false, Some(true));
        assert_eq!(c.estimate().unwrap().correction, 1.0);
        for _ in 0..100 {
            c.observe(&conv(10.0, 0.0), next(), true, Some(true));
        }
        assert_eq!(c.estimate().unwrap().correction, MAX_CORRECTION);
        for _ in 0..1000 {
            c.observe(&conv(10.0, 0.0), next(), true, Some(false));
        }
        assert_eq!(c.estimate().unwrap().correction, 1.0);
    }

    #[test]
    fn a_restored_estimate_holds_until_better_evidence() {
        let mut next = every_15_s();
        let restored = Estimate {
            basis: Basis::Calibrated,
            requests_per_second: 4.5,
            prompt_tokens_per_second: None,
            lower_bound: 3.0,
            correction: 1.2,
            samples: 100,
            line: None,
            stated_limit: None,
        };
        let mut c = Calibration::restored(restored);
        assert_eq!(c.estimate().unwrap().requests_per_second, 4.5);
        assert_eq!(c.estimate().unwrap().basis, Basis::Restored);
        c.observe(&conv(4.0, 0.0), next(), true, None);
        // A fresh lower bound (0.94 requests/s) does not lower it.
        assert_eq!(c.estimate().unwrap().requests_per_second, 4.5);
        // Nothing but replicas below one is no evidence.
        let mut empty = Calibration::default();
        empty.observe(&Evidence::default(), next(), true, None);
        assert_eq!(empty.estimate(), None);
    }
}
