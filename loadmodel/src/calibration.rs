//! One replica held to a real one (docs/benchmarks/real-vllm.md, "The load model against one real
//! replica"): replay a request sequence open-loop into one [`Replica`], sampling its metrics
//! every second as the real replay samples `/metrics`, and the figures both runs are compared
//! by (completions/s, TTFT percentiles, the queue time series and their correlation).

use serde::{Deserialize, Serialize};

use super::fleet::percentile;
use super::replica::{Params, Replica};
use super::trace::Request;

/// One sample of a replica's gauges.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct Sample {
    /// Seconds since the replay started.
    pub t: f64,
    /// `vllm:num_requests_waiting`, requests.
    pub waiting: f64,
    /// `vllm:num_requests_running`, requests.
    pub running: f64,
    /// `vllm:kv_cache_usage_perc`, 0..1.
    pub kv: f64,
}

/// What a replay of a sequence observed, real or modelled.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Run {
    /// Time to first token of every served request, seconds (any order).
    pub ttfts_s: Vec<f64>,
    /// When each request finished, seconds since the start (any order; for the model, the end
    /// of the sampling second in which it finished).
    pub done_s: Vec<f64>,
    /// The gauges, one sample per `sample_every_s`.
    pub samples: Vec<Sample>,
}

/// Replays `requests` (arrival order) open-loop into one replica with `params`, sampling its
/// gauges every `sample_every_s` seconds (> 0; 1 s like the real replay) from `sample_every_s`
/// on, until every request has finished and the last arrival has passed.
pub fn replay_one(requests: &[Request], params: Params, sample_every_s: f64) -> Run {
    let every = if sample_every_s > 0.0 {
        sample_every_s
    } else {
        1.0
    };
    let mut replica = Replica::new("real-vllm-calibration", params, 0.0);
    let mut run = Run::default();
    let last_arrival = requests.last().map_or(0.0, |r| r.arrival_s);
    let mut next = 0;
    let mut done = 0u64;
    let mut k = 1u64;
    loop {
        let t = k as f64 * every;
        while let Some(req) = requests.get(next).filter(|r| r.arrival_s <= t) {
            replica.advance_to(req.arrival_s);
            replica.enqueue(*req);
            next += 1;
        }
        replica.advance_to(t);
        run.ttfts_s.extend(replica.take_ttfts());
        let m = replica.metrics();
        for _ in done..m.counters.success {
            run.done_s.push(t);
        }
        done = m.counters.success;
        run.samples.push(Sample {
            t,
            waiting: m.waiting as f64,
            running: m.running as f64,
            kv: m.kv_cache_usage,
        });
        if next >= requests.len() && replica.outstanding() == 0 && t >= last_arrival {
            return run;
        }
        k += 1;
    }
}

/// The figures a replay is judged by.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct Figures {
    /// Requests finished within the window divided by the window, requests per second.
    pub completions_per_s: f64,
    /// Seconds from the start until the last request finished.
    pub last_done_s: f64,
    /// TTFT percentiles over every served request, seconds.
    pub ttft_p50_s: f64,
    /// 95th percentile TTFT, seconds.
    pub ttft_p95_s: f64,
    /// 99th percentile TTFT, seconds.
    pub ttft_p99_s: f64,
    /// Mean waiting requests over the window's samples.
    pub waiting_mean: f64,
    /// Most waiting requests in one sample.
    pub waiting_peak: f64,
    /// Mean running requests over the window's samples.
    pub running_mean: f64,
    /// Mean KV-cache usage over the window's samples, 0..1.
    pub kv_mean: f64,
    /// Largest KV-cache usage in one sample, 0..1.
    pub kv_peak: f64,
}

impl Run {
    /// The samples within `[0, window_s]` seconds.
    fn window(&self, window_s: f64) -> impl Iterator<Item = &Sample> {
        self.samples.iter().filter(move |s| s.t <= window_s)
    }

    /// The figures of this run over `window_s` seconds (the sequence's length).
    pub fn figures(&self, window_s: f64) -> Figures {
        let mut ttfts = self.ttfts_s.clone();
        ttfts.sort_by(f64::total_cmp);
        let completed = self.done_s.iter().filter(|&&t| t <= window_s).count();
        let mean = |f: fn(&Sample) -> f64| {
            let (sum, n) = self
                .window(window_s)
                .fold((0.0, 0usize), |(s, n), x| (s + f(x), n + 1));
            if n == 0 { f64::NAN } else { sum / n as f64 }
        };
        let peak = |f: fn(&Sample) -> f64| self.window(window_s).map(f).fold(0.0, f64::max);
        Figures {
            completions_per_s: completed as f64 / window_s,
            last_done_s: self.done_s.iter().copied().fold(0.0, f64::max),
            ttft_p50_s: percentile(&ttfts, 0.50),
            ttft_p95_s: percentile(&ttfts, 0.95),
            ttft_p99_s: percentile(&ttfts, 0.99),
            waiting_mean: mean(|s| s.waiting),
            waiting_peak: peak(|s| s.waiting),
            running_mean: mean(|s| s.running),
            kv_mean: mean(|s| s.kv),
            kv_peak: peak(|s| s.kv),
        }
    }
}

/// Pearson correlation of two series sampled at the same instants, paired by index up to the
/// shorter one; NaN when either is constant or fewer than two pairs exist.
pub fn correlation(a: &[f64], b: &[f64]) -> f64 {
    let n = a.len().min(b.len());
    if n < 2 {
        return f64::NAN;
    }
    let (a, b) = (&a[..n], &b[..n]);
    let ma = a.iter().sum::<f64>() / n as f64;
    let mb = b.iter().sum::<f64>() / n as f64;
    let (mut sab, mut saa, mut sbb) = (0.0, 0.0, 0.0);
    for (x, y) in a.iter().zip(b) {
        sab += (x - ma) * (y - mb);
        saa += (x - ma) * (x - ma);
        sbb += (y - mb) * (y - mb);
    }
    if saa == 0.0 || sbb == 0.0 {
        return f64::NAN;
    }
    sab / (saa * sbb).sqrt()
}

/// A gauge of `run` at whole seconds `1..=window_s` (the real sampler drifts by milliseconds:
/// each second takes the sample nearest to it), for correlating two runs.
pub fn per_second(run: &Run, window_s: f64, gauge: fn(&Sample) -> f64) -> Vec<f64> {
    let mut out = Vec::new();
    let mut i = 0;
    let mut t = 1.0;
    while t <= window_s && !run.samples.is_empty() {
        while i + 1 < run.samples.len()
            && (run.samples[i + 1].t - t).abs() <= (run.samples[i].t - t).abs()
        {
            i += 1;
        }
        out.push(gauge(&run.samples[i]));
        t += 1.0;
    }
    out
}

/// Means of consecutive windows of `k` values (≥ 1; the last, shorter window is dropped): a
/// per-second series as a per-`k`-seconds one, to correlate queues without the jitter of
/// single samples.
pub fn window_means(series: &[f64], k: usize) -> Vec<f64> {
    let k = k.max(1);
    series
        .chunks_exact(k)
        .map(|c| c.iter().sum::<f64>() / k as f64)
        .collect()
}

/// Seconds left out at the start of the saturated replay (the first batch filling).
const SATURATION_WARMUP_S: f64 = 60.0;

/// The requests per second one replica with `params` completes at full load on the mix of
/// `requests`: every request queued at t = 0 on one replica, completions counted from 60 s until
/// the queue first empties (the value the online calibration of `spec.objective` is judged
/// against, docs/benchmarks/calibration.md). `None` when the queue empties within the first
/// 60 s (too few requests for a steady window).
pub fn saturated_throughput(requests: &[Request], params: Params) -> Option<f64> {
    let queued: Vec<Request> = requests
        .iter()
        .map(|r| Request {
            arrival_s: 0.0,
            ..*r
        })
        .collect();
    let run = replay_one(&queued, params, 1.0);
    let empty_s = run.samples.iter().find(|s| s.waiting == 0.0)?.t;
    let done = run
        .done_s
        .iter()
        .filter(|&&t| t > SATURATION_WARMUP_S && t <= empty_s)
        .count();
    (empty_s > SATURATION_WARMUP_S).then(|| done as f64 / (empty_s - SATURATION_WARMUP_S))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn req(t: f64, prompt: u32, output: u32) -> Request {
        Request {
            arrival_s: t,
            prompt_tokens: prompt,
            output_tokens: output,
        }
    }

    #[test]
    fn a_lone_request_is_timed_like_the_replica_steps() {
        let params = Params {
            max_num_seqs: 2,
            kv_capacity_tokens: 10_000,
            prefill_tokens_per_s: 1000.0,
            prefill_chunk_tokens: 2048,
            step_base_s: 0.01,
            step_per_seq_s: 0.0,
            ..Params::default()
        };
        let run = replay_one(&[req(0.5, 100, 10)], params, 1.0);
        // Prefill step 0.01 + 0.1 s; then 9 decode steps of 0.01 s: done at 0.69 s.
        assert_eq!(run.ttfts_s.len(), 1);
        assert!((run.ttfts_s[0] - 0.11).abs() < 1e-9, "{:?}", run.ttfts_s);
        assert_eq!(run.done_s, vec![1.0]);
        assert_eq!(run.samples.len(), 1);
        let f = run.figures(1.0);
        assert_eq!(f.completions_per_s, 1.0);
        assert_eq!(f.waiting_peak, 0.0);
    }

    #[test]
    fn a_burst_queues_beyond_max_num_seqs_and_drains() {
        let params = Params {
            max_num_seqs: 2,
            kv_capacity_tokens: 10_000,
            prefill_tokens_per_s: 10_000.0,
            prefill_chunk_tokens: 2048,
            step_base_s: 0.01,
            step_per_seq_s: 0.0,
            ..Params::default()
        };
        let burst: Vec<Request> = (0..6).map(|_| req(0.0, 10, 150)).collect();
        let run = replay_one(&burst, params, 1.0);
        // Three rounds of two 150-token requests at ~1.5 s each.
        assert_eq!(run.samples[0].waiting, 4.0);
        assert_eq!(run.samples[0].running, 2.0);
        assert_eq!(run.done_s.len(), 6);
        assert_eq!(run.samples.last().map(|s| s.waiting), Some(0.0));
        assert!(run.figures(10.0).last_done_s >= 4.0);
    }

    #[test]
    fn correlation_of_a_series_with_itself_and_its_opposite() {
        let a = [0.0, 1.0, 3.0, 2.0];
        let b: Vec<f64> = a.iter().map(|x| 10.0 - 2.0 * x).collect();
        assert!((correlation(&a, &a) - 1.0).abs() < 1e-12);
        assert!((correlation(&a, &b) + 1.0).abs() < 1e-12);
        assert!(correlation(&a, &[1.0; 4]).is_nan());
    }

    #[test]
    fn window_means_average_whole_windows() {
        assert_eq!(window_means(&[1.0, 3.0, 2.0, 4.0, 9.0], 2), vec![2.0, 3.0]);
        assert_eq!(window_means(&[1.0, 2.0], 0), vec![1.0, 2.0]);
    }

    #[test]
    fn per_second_takes_the_nearest_sample() {
        let s = |t, w| Sample {
            t,
            waiting: w,
            running: 0.0,
            kv: 0.0,
        };
        let run = Run {
            samples: vec![s(1.02, 1.0), s(2.2, 2.0), s(2.9, 3.0), s(4.01, 4.0)],
            ..Run::default()
        };
        assert_eq!(
            per_second(&run, 4.0, |s| s.waiting),
            vec![1.0, 2.0, 3.0, 4.0]
        );
    }

    /// The conversation trace's mean request (1,155 prompt, 211 output tokens) on the default
    /// parameters: a full batch of 64 decodes at `0.012 + 0.00035 × 64 = 0.0344` s per step and
    /// each request's prompt adds `1155 / 12000 = 0.096` s of prefill, so a replica completes
    /// `1 / (0.096 + 211 × 0.0344 / 64) = 4.77` requests/s (docs/objective.md, "Worked
    /// numbers").
    #[test]
    fn a_full_replica_completes_what_the_step_model_predicts() {
        let requests = |n: u32| -> Vec<Request> {
            (0..n)
                .map(|_| Request {
                    arrival_s: 0.0,
                    prompt_tokens: 1155,
                    output_tokens: 211,
                })
                .collect()
        };
        let mu = saturated_throughput(&requests(4000), Params::default()).unwrap();
        assert!((mu - 4.77).abs() < 0.1, "{mu}");
        // 200 requests leave the queue within 60 s (though the batch decodes past it): no
        // steady window.
        assert_eq!(
            saturated_throughput(&requests(200), Params::default()),
            None
        );
    }
}
