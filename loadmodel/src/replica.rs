//! One vLLM replica under continuous batching (docs/load-model.md, "One replica").

use std::collections::VecDeque;

use super::trace::Request;

/// vLLM's bucket upper bounds for `vllm:time_to_first_token_seconds`, seconds.
pub const TTFT_BUCKETS_S: [f64; 22] = [
    0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0,
    20.0, 40.0, 80.0, 160.0, 640.0, 2560.0,
];

/// Model parameters; defaults are those of docs/load-model.md (an 8B model on one H100-class
/// GPU).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Params {
    /// Most sequences running at once.
    pub max_num_seqs: usize,
    /// KV-cache size, tokens.
    pub kv_capacity_tokens: u64,
    /// Prompt processing rate while prefilling, tokens per second.
    pub prefill_tokens_per_s: f64,
    /// Prompt tokens processed per step at most.
    pub prefill_chunk_tokens: u32,
    /// Fixed part of a step, seconds.
    pub step_base_s: f64,
    /// Step time added per running sequence, seconds.
    pub step_per_seq_s: f64,
    /// Step time added per sequence that starts its prefill in the step (a request's fixed
    /// cost: input processing, scheduling it in, its sampling state), seconds; 0 for the
    /// default profile. Measured on a real replica as the TTFT of a short prompt at
    /// concurrency 1 less one decode step (docs/benchmarks/real-vllm.md).
    pub step_per_new_seq_s: f64,
    /// Termination grace: how long a replica whose pod was deleted keeps serving what it holds
    /// before the rest is dropped (counted failed), trace seconds; 0 = killed at once (vLLM's
    /// default `--shutdown-timeout=0` aborts in-flight requests on SIGTERM).
    pub drain_s: f64,
    /// Time-to-first-token objective used in the report, seconds.
    pub slo_ttft_s: f64,
}

impl Default for Params {
    fn default() -> Self {
        Self {
            max_num_seqs: 64,
            kv_capacity_tokens: 250_000,
            prefill_tokens_per_s: 12_000.0,
            prefill_chunk_tokens: 2048,
            step_base_s: 0.012,
            step_per_seq_s: 0.000_35,
            step_per_new_seq_s: 0.0,
            drain_s: 60.0,
            slo_ttft_s: 2.0,
        }
    }
}

/// What [`Replica::drop_all`] lost, requests.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Dropped {
    /// Requests lost (waiting or running).
    pub(crate) lost: u64,
    /// Of them, requests whose first token had come within the TTFT objective: counted within
    /// the objective when it came, and taken back when dropped.
    pub(crate) lost_after_first_token_within_slo: u64,
}

/// A sequence admitted to the batch.
#[derive(Clone, Debug)]
struct Seq {
    req: Request,
    /// Prompt tokens processed so far.
    prefilled: u32,
    /// Output tokens generated so far.
    generated: u32,
    /// Its first token came within the TTFT objective (`slo_ttft_s`); false before it came.
    first_token_within_slo: bool,
}

impl Seq {
    fn output_target(&self) -> u32 {
        self.req.output_tokens.max(1)
    }

    /// KV tokens this sequence holds (the whole prompt is reserved at admission).
    fn kv_tokens(&self) -> u64 {
        u64::from(self.req.prompt_tokens) + u64::from(self.generated)
    }
}

/// Cumulative counters of one replica, as vLLM exports them.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Counters {
    /// `vllm:request_success_total`: requests finished.
    pub success: u64,
    /// `vllm:prompt_tokens_total`: prompt tokens processed.
    pub prompt_tokens: u64,
    /// `vllm:generation_tokens_total`: output tokens generated.
    pub generation_tokens: u64,
    /// Non-cumulative count per bucket of [`TTFT_BUCKETS_S`], plus the `+Inf` overflow last.
    pub ttft_bucket_counts: Vec<u64>,
    /// Sum of all TTFTs, seconds.
    pub ttft_sum_s: f64,
    /// Number of TTFT observations.
    pub ttft_count: u64,
    /// `vllm:inter_token_latency_seconds_sum`: the step times seen by decoding sequences, one
    /// observation per output token after the first, seconds.
    pub itl_sum_s: f64,
    /// `vllm:inter_token_latency_seconds_count`: output tokens after the first.
    pub itl_count: u64,
}

/// What one replica's `/metrics` would show now.
#[derive(Clone, Debug, PartialEq)]
pub struct ReplicaMetrics {
    /// The replica (pod) name.
    pub name: String,
    /// `vllm:num_requests_running`.
    pub running: usize,
    /// `vllm:num_requests_waiting`.
    pub waiting: usize,
    /// `vllm:kv_cache_usage_perc`, 0..1.
    pub kv_cache_usage: f64,
    /// The counters and the TTFT histogram.
    pub counters: Counters,
}

/// One replica: a waiting queue in arrival order and a running batch, simulated step by step in
/// trace time.
#[derive(Clone, Debug)]
pub struct Replica {
    name: String,
    params: Params,
    /// Trace time up to which the replica has been simulated, seconds (may run past the last
    /// `advance_to` target by less than one step).
    clock_s: f64,
    waiting: VecDeque<Request>,
    running: Vec<Seq>,
    kv_used: u64,
    counters: Counters,
    /// TTFTs observed since the last [`Replica::take_ttfts`], seconds.
    new_ttfts: Vec<f64>,
}

impl Replica {
    /// An idle replica whose clock starts at `now_s` (trace seconds).
    pub fn new(name: impl Into<String>, params: Params, now_s: f64) -> Self {
        Self {
            name: name.into(),
            params,
            clock_s: now_s,
            waiting: VecDeque::new(),
            running: Vec::new(),
            kv_used: 0,
            counters: Counters {
                ttft_bucket_counts: vec![0; TTFT_BUCKETS_S.len() + 1],
                ..Counters::default()
            },
            new_ttfts: Vec::new(),
        }
    }

    /// The replica's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Requests waiting plus running.
    pub fn outstanding(&self) -> usize {
        self.waiting.len() + self.running.len()
    }

    /// Requests waiting for admission.
    pub fn waiting(&self) -> usize {
        self.waiting.len()
    }

    /// Queues a request (it arrived at `req.arrival_s`).
    pub fn enqueue(&mut self, req: Request) {
        self.waiting.push_back(req);
    }

    /// Simulates steps until the clock reaches `t_s` (an idle replica jumps there).
    pub fn advance_to(&mut self, t_s: f64) {
        while self.clock_s < t_s {
            if self.waiting.is_empty() && self.running.is_empty() {
                self.clock_s = t_s;
                return;
            }
            self.step();
        }
    }

    /// One engine step from the current clock.
    fn step(&mut self) {
        let p = self.params;
        // Admission in arrival order while a slot is free and the cache holds the prompt (a
        // prompt larger than the whole cache is admitted into an empty batch, or it would block
        // the queue forever).
        while self.running.len() < p.max_num_seqs {
            let Some(front) = self.waiting.front() else {
                break;
            };
            let need = u64::from(front.prompt_tokens);
            if self.kv_used + need > p.kv_capacity_tokens && !self.running.is_empty() {
                break;
            }
            if let Some(req) = self.waiting.pop_front() {
                self.kv_used += need;
                self.running.push(Seq {
                    req,
                    prefilled: 0,
                    generated: 0,
                    first_token_within_slo: false,
                });
            }
        }
        // Chunked prefill, oldest first; decoding sequences each get one token.
        let mut budget = p.prefill_chunk_tokens;
        let mut prefill_done = Vec::new();
        let mut decoding = Vec::new();
        let mut starting = 0u32;
        for (i, seq) in self.running.iter_mut().enumerate() {
            if seq.prefilled == 0
                && seq.generated == 0
                && (budget > 0 || seq.req.prompt_tokens == 0)
            {
                starting += 1;
            }
            if seq.prefilled < seq.req.prompt_tokens {
                let take = budget.min(seq.req.prompt_tokens - seq.prefilled);
                seq.prefilled += take;
                budget -= take;
                if seq.prefilled == seq.req.prompt_tokens {
                    prefill_done.push(i);
                }
            } else if seq.generated == 0 {
                // An empty prompt: its first token comes from this step.
                prefill_done.push(i);
            } else {
                decoding.push(i);
            }
        }
        let prefill_tokens = p.prefill_chunk_tokens - budget;
        // At least 1 µs, so that zero step times given as flags cannot stall the clock.
        let dt = (p.step_base_s
            + p.step_per_seq_s * self.running.len() as f64
            + p.step_per_new_seq_s * f64::from(starting)
            + f64::from(prefill_tokens) / p.prefill_tokens_per_s)
            .max(1e-6);
        let end = self.clock_s + dt;
        for &i in &prefill_done {
            let seq = &mut self.running[i];
            seq.generated = 1;
            self.kv_used += 1;
            let ttft = end - seq.req.arrival_s;
            seq.first_token_within_slo = ttft <= p.slo_ttft_s;
            self.counters.prompt_tokens += u64::from(seq.req.prompt_tokens);
            self.counters.generation_tokens += 1;
            let bucket = TTFT_BUCKETS_S
                .iter()
                .position(|&le| ttft <= le)
                .unwrap_or(TTFT_BUCKETS_S.len());
            self.counters.ttft_bucket_counts[bucket] += 1;
            self.counters.ttft_sum_s += ttft;
            self.counters.ttft_count += 1;
            self.new_ttfts.push(ttft);
        }
        for &i in &decoding {
            self.running[i].generated += 1;
            self.kv_used += 1;
            self.counters.generation_tokens += 1;
            self.counters.itl_sum_s += dt;
            self.counters.itl_count += 1;
        }
        let mut kv_used = self.kv_used;
        let mut success = 0;
        self.running.retain(|seq| {
            let done = seq.generated >= seq.output_target();
            if done {
                kv_used -= seq.kv_tokens();
                success += 1;
            }
            !done
        });
        self.kv_used = kv_used;
        self.counters.success += success;
        self.clock_s = end;
    }

    /// Drops everything it holds (a drained-out replica). Returns how many requests were lost,
    /// and how many of them had already had their first token within the TTFT objective (a
    /// dropped request is an SLO miss even so: issue 23, docs/simulate/README.md).
    pub(crate) fn drop_all(&mut self) -> Dropped {
        let dropped = Dropped {
            lost: self.outstanding() as u64,
            lost_after_first_token_within_slo: self
                .running
                .iter()
                .filter(|s| s.first_token_within_slo)
                .count() as u64,
        };
        self.waiting.clear();
        self.running.clear();
        self.kv_used = 0;
        dropped
    }

    /// TTFTs observed since the last call, seconds.
    pub(crate) fn take_ttfts(&mut self) -> Vec<f64> {
        std::mem::take(&mut self.new_ttfts)
    }

    /// The replica's metrics now.
    pub fn metrics(&self) -> ReplicaMetrics {
        ReplicaMetrics {
            name: self.name.clone(),
            running: self.running.len(),
            waiting: self.waiting.len(),
            kv_cache_usage: (self.kv_used as f64 / self.params.kv_capacity_tokens as f64)
                .clamp(0.0, 1.0),
            counters: self.counters.clone(),
        }
    }
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
    fn one_request_prefills_then_decodes() {
        let mut r = Replica::new("a", Params::default(), 0.0);
        r.enqueue(req(0.0, 2048, 3));
        r.advance_to(0.01);
        // First step: the whole 2048-token prompt (one chunk): 0.012 + 0.00035 + 2048/12000.
        let first = 0.012 + 0.000_35 + 2048.0 / 12_000.0;
        let m = r.metrics();
        assert_eq!((m.running, m.waiting), (1, 0));
        assert_eq!(m.counters.ttft_count, 1);
        assert!((m.counters.ttft_sum_s - first).abs() < 1e-9);
        assert!((m.kv_cache_usage - 2049.0 / 250_000.0).abs() < 1e-12);
        r.advance_to(1.0);
        let m = r.metrics();
        assert_eq!((m.running, m.waiting, m.counters.success), (0, 0, 1));
        assert_eq!(m.counters.generation_tokens, 3);
        assert_eq!(m.counters.prompt_tokens, 2048);
        assert_eq!(m.kv_cache_usage, 0.0);
        // 2.5 s bucket index 12 holds nothing; 0.25 s bucket (index 8) holds the one TTFT.
        assert_eq!(m.counters.ttft_bucket_counts[8], 1);
    }

    #[test]
    fn admission_stops_at_max_num_seqs_and_kv_capacity() {
        let params = Params::default();
        let mut r = Replica::new("a", params, 0.0);
        for _ in 0..100 {
            r.enqueue(req(0.0, 10, 1000));
        }
        r.advance_to(0.001);
        let m = r.metrics();
        assert_eq!((m.running, m.waiting), (64, 36));

        let mut r = Replica::new("b", params, 0.0);
        for _ in 0..5 {
            r.enqueue(req(0.0, 100_000, 1000));
        }
        r.advance_to(0.001);
        let m = r.metrics();
        assert_eq!(
            (m.running, m.waiting),
            (2, 3),
            "only two 100k prompts fit in 250k"
        );
    }

    #[test]
    fn a_starting_sequence_adds_its_fixed_cost_to_its_first_step_only() {
        let params = Params {
            max_num_seqs: 2,
            prefill_tokens_per_s: 1000.0,
            step_base_s: 0.002,
            step_per_seq_s: 0.0,
            step_per_new_seq_s: 0.005,
            ..Params::default()
        };
        let mut r = Replica::new("a", params, 0.0);
        r.enqueue(req(0.0, 10, 3));
        r.enqueue(req(0.0, 10, 3));
        r.advance_to(1e-9);
        // Both start in the first step: 0.002 + 2 × 0.005 + 20 / 1000.
        let first = 0.002 + 0.010 + 0.020;
        let m = r.metrics();
        assert_eq!(m.counters.ttft_count, 2);
        assert!((m.counters.ttft_sum_s - 2.0 * first).abs() < 1e-12);
        assert!((r.clock_s - first).abs() < 1e-12);
        // The decode steps that follow cost the base only: both finish after two more.
        r.advance_to(first + 1e-9);
        assert!((r.clock_s - (first + 0.002)).abs() < 1e-12);
        assert_eq!(r.metrics().counters.success, 0);
        r.advance_to(first + 0.002 + 1e-9);
        assert!((r.clock_s - (first + 0.004)).abs() < 1e-12);
        assert_eq!(r.metrics().counters.success, 2);
    }
}
