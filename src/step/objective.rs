//! The step's part of `spec.objective` (docs/objective.md): the calibration memory (restored
//! from `status.capacity`, started over when the pod template changes), the objective's
//! recommendation and the built-in TTFT guardrail, and the estimate for `status.capacity`.

use std::collections::VecDeque;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use llmscaler_api::{CapacityStatus, LLMScalerSpec, LLMScalerStatus};

use crate::engine::calibration::{Basis, Calibration, Estimate, Evidence, WINDOW_MS};
use crate::engine::objective::{self, Demand, ObjectiveModel, read};
use crate::engine::{MetricInput, MetricOutcome, Skip};

/// How long the request-rate trend looks back, ms.
const TREND_MS: i64 = 300_000;
/// How much the Ready replicas must have grown (share of those at the reading the TTFT
/// guardrail is judged from, at least one replica) before the guardrail may be set aside as
/// futile.
const FUTILE_GROWTH: f64 = 1.5;
/// The TTFT quantile must have fallen below this share of the reading the guardrail is judged
/// from for the growth to count as helping.
const FUTILE_IMPROVEMENT: f64 = 0.9;
/// A set-aside guardrail engages again above this multiple of the reading it was set aside at.
const FUTILE_REARM: f64 = 1.25;
/// A rate this far (share) from the written one is a material change of `status.capacity`.
const MATERIAL_SHARE: f64 = 0.05;
/// The probe (docs/objective.md#probing): the TTFT quantile at most this share of the
/// objective for a whole rate window lets the probe's factor grow.
const PROBE_MARGIN: f64 = 0.5;
/// Above this share of the objective the probe's factor steps back.
const PROBE_BACK: f64 = 0.75;
/// The probe's factor grows and steps back by this much.
const PROBE_STEP: f64 = 2.0;
/// A demand this many times the one of the probe's last step starts it over.
const PROBE_RISE: f64 = 1.25;
/// The most the probe multiplies an estimate by.
const PROBE_MAX: f64 = 8.0;
/// The most a TTFT quantile read inside the histogram bucket that holds the objective may relax
/// the guardrail's target, a multiple of the objective.
const MAX_RELAXED: f64 = 1.25;

/// The objective's memory in a scaler.
#[derive(Clone, Debug, Default, PartialEq)]
pub(super) struct ObjectiveMemory {
    calibration: Calibration,
    /// The pod-template hash the calibration was learned on.
    template: Option<String>,
    /// Recent `(ms, requests/s)` for the trend.
    rates: VecDeque<(i64, f64)>,
    /// The objective's last recommendation, replicas.
    last: Option<i32>,
    /// What it would have been without the probe, replicas: a fleet of that size that misses
    /// the objective teaches the correction; one the probe kept smaller does not.
    last_plain: Option<i32>,
    /// Recent `(ms, requests in the system, replicas reporting)`: their growth over the rate
    /// window is the part of the arrivals the completions do not show yet.
    in_system: VecDeque<(i64, f64, f64)>,
    /// The TTFT guardrail's current episode above the objective.
    episode: Option<Episode>,
    /// The guardrail set aside as futile.
    futile: Option<Futile>,
    /// The probe of an estimate no saturated replica confirmed.
    probe: Option<Probe>,
    /// Since when (ms) the TTFT quantile has read inside the histogram bucket that holds the
    /// objective.
    inside_ms: Option<i64>,
}

/// The probe: an estimate that is not `saturated` is what replicas that never queued were seen
/// to complete, or a line extrapolated from them, and a fleet sized on it never queues, so it
/// would never learn more. While the TTFT quantile keeps a wide margin under the objective, the
/// fleet is sized on `factor` times the estimate, one step more each rate window the smaller
/// fleet held the margin, until replicas queue long enough for the per-pod saturated reading
/// (docs/objective.md#probing).
#[derive(Clone, Copy, Debug, PartialEq)]
struct Probe {
    /// The multiple of the estimate the fleet is sized on, 1..=[`PROBE_MAX`].
    factor: f64,
    /// The basis it multiplies: another basis is another estimate, and the probe starts over.
    basis: Basis,
    /// Since when (ms) the quantile has held the margin on a fleet no larger than recommended.
    held_ms: Option<i64>,
    /// The Ready replicas at the factor's last step (or start): a step sheds at most a fifth.
    ready: i32,
    /// The demand at the factor's last step (or start), requests/s.
    demand: f64,
    /// The estimate when the probe started, requests/s per replica: the fleet is sized on the
    /// larger of the estimate and `factor × base`, so a lower bound that rises as the fleet
    /// shrinks uses the factor up instead of being multiplied by it.
    base: f64,
}

/// A TTFT guardrail set aside as futile at the quantile `at`, seconds. `lasting`: no replica
/// had a queue then (the requests over the objective are slow on their own: it stays set aside
/// when the quantile dips within the objective between bursts); otherwise the queue was a
/// backlog stranded on the pods that received it, and a dip within the objective ends it.
#[derive(Clone, Copy, Debug, PartialEq)]
struct Futile {
    at: f64,
    lasting: bool,
    /// Since when every replica has had a queue: a whole rate window of it is a fleet short of
    /// replicas, and the objective's guardrail is back.
    short_ms: Option<i64>,
}

/// The TTFT guardrail above the objective since `reading`, on `ready` Ready replicas; `grown_ms`:
/// since when the Ready replicas are [`FUTILE_GROWTH`] times those; `queued_ms`: when a replica
/// last had a queue.
#[derive(Clone, Copy, Debug, PartialEq)]
struct Episode {
    ready: i32,
    reading: f64,
    grown_ms: Option<i64>,
    queued_ms: Option<i64>,
}

impl ObjectiveMemory {
    /// The memory a new process starts with: the estimate of `status.capacity`, if any.
    pub(super) fn restored(status: Option<&LLMScalerStatus>) -> Self {
        let Some(capacity) = status.and_then(|s| s.capacity.as_ref()) else {
            return Self::default();
        };
        let number = |s: Option<&String>| s.and_then(|v| v.parse::<f64>().ok());
        let Some(rps) = number(Some(&capacity.requests_per_second)).filter(|v| *v > 0.0) else {
            return Self::default();
        };
        let estimate = Estimate {
            basis: Basis::Restored,
            requests_per_second: rps,
            prompt_tokens_per_second: number(capacity.prompt_tokens_per_second.as_ref()),
            lower_bound: number(capacity.lower_bound.as_ref()).unwrap_or(0.0),
            correction: number(capacity.correction.as_ref()).unwrap_or(1.0),
            samples: capacity.samples.unwrap_or(0),
            line: None,
            stated_limit: None,
        };
        Self {
            calibration: Calibration::restored(estimate),
            template: capacity.template.clone(),
            ..Self::default()
        }
    }

    /// The growth of the requests in the system (waiting + running) over the rate window,
    /// requests/s: arrivals the completions do not show yet (a saturated fleet completes at its
    /// own rate, whatever arrives). Never negative across a sync where replicas stopped
    /// reporting (their requests did not complete, they went with the pod).
    fn growth(&mut self, now_ms: i64, e: &Evidence) -> f64 {
        let in_system = e.waiting + e.running;
        self.in_system.push_back((now_ms, in_system, e.replicas));
        while self
            .in_system
            .front()
            .is_some_and(|(t, _, _)| *t < now_ms.saturating_sub(WINDOW_MS))
        {
            self.in_system.pop_front();
        }
        let Some(&(then, before, _)) = self.in_system.front() else {
            return 0.0;
        };
        #[allow(clippy::cast_precision_loss)]
        let seconds = now_ms.saturating_sub(then) as f64 / 1000.0;
        if seconds <= 0.0 {
            return 0.0;
        }
        let growth = (in_system - before) / seconds;
        let shrank = self.in_system.iter().any(|(_, _, r)| *r > e.replicas + 0.5);
        if shrank { growth.max(0.0) } else { growth }
    }

    /// The TTFT guardrail's target this sync, seconds: the objective, or, once the guardrail is
    /// futile, [`FUTILE_REARM`] times the reading it was set aside at. Futile: the Ready
    /// replicas grew [`FUTILE_GROWTH`]-fold since the reading it is judged from (when it
    /// engaged, or the last time the quantile fell below [`FUTILE_IMPROVEMENT`] of that
    /// reading), a whole rate window ago, some replica has no queue (`waiting` is the smallest
    /// and the largest queue of one replica), and the quantile did not fall below
    /// [`FUTILE_IMPROVEMENT`] of that reading: more replicas do not serve the requests over the
    /// objective faster. Either they are slow on their own (long prompts on a slow model: no
    /// replica has a queue; set aside until a reading is worse than [`FUTILE_REARM`] times it),
    /// or they wait in a backlog stranded on the pods that received them before the fleet grew
    /// (vLLM queues per pod; set aside until the quantile is back within the objective)
    /// (docs/objective.md).
    fn ttft_target(
        &mut self,
        objective_s: f64,
        quantile: Option<f64>,
        waiting: (Option<f64>, Option<f64>),
        ready: i32,
        now_ms: i64,
    ) -> f64 {
        let (min_waiting, max_waiting) = waiting;
        // Never below the objective (a `ttftSeconds` raised since the set-aside).
        let relaxed = |futile: Option<Futile>| {
            futile.map_or(objective_s, |f| (f.at * FUTILE_REARM).max(objective_s))
        };
        if let Some(f) = self.futile.as_mut() {
            f.short_ms = match (min_waiting.is_some_and(|w| w > 0.0), f.short_ms) {
                (false, _) => None,
                (true, Some(t)) => Some(t),
                (true, None) => Some(now_ms),
            };
            if f.short_ms
                .is_some_and(|t| now_ms.saturating_sub(t) >= WINDOW_MS)
            {
                // Every replica queued for a window: the fleet is short; the guardrail is back.
                self.futile = None;
                self.episode = None;
            }
        }
        let Some(q) = quantile else {
            // An idle window: growth from before it says nothing about the next burst.
            if let Some(e) = self.episode.as_mut() {
                e.grown_ms = None;
            }
            return relaxed(self.futile);
        };
        if q <= objective_s {
            self.episode = None;
            self.futile = self.futile.filter(|f| f.lasting);
            return relaxed(self.futile);
        }
        if let Some(f) = self.futile {
            let target = relaxed(Some(f));
            if q <= target {
                return target;
            }
            // Worse than when set aside: a queue again; the objective's guardrail is back.
            self.futile = None;
            self.episode = None;
        }
        let episode = self.episode.get_or_insert(Episode {
            ready,
            reading: q,
            grown_ms: None,
            queued_ms: None,
        });
        if q < FUTILE_IMPROVEMENT * episode.reading {
            // More replicas helped (or a backlog drained): the next growth is judged from here.
            *episode = Episode {
                ready,
                reading: q,
                grown_ms: None,
                queued_ms: episode.queued_ms,
            };
        }
        if max_waiting != Some(0.0) {
            episode.queued_ms = Some(now_ms);
        }
        let grown = f64::from(ready) >= (f64::from(episode.ready) * FUTILE_GROWTH).ceil()
            && ready > episode.ready;
        episode.grown_ms = match (grown, episode.grown_ms) {
            (false, _) => None,
            (true, Some(t)) => Some(t),
            (true, None) => Some(now_ms),
        };
        let settled = episode
            .grown_ms
            .is_some_and(|t| now_ms.saturating_sub(t) >= WINDOW_MS);
        if settled && min_waiting == Some(0.0) && q >= FUTILE_IMPROVEMENT * episode.reading {
            // No queue anywhere for a whole rate window (the quantile's window): slow on their
            // own. A queue within it: a backlog stranded on the pods that received it.
            let lasting = episode
                .queued_ms
                .is_none_or(|t| now_ms.saturating_sub(t) >= WINDOW_MS);
            self.futile = Some(Futile {
                at: q,
                lasting,
                short_ms: None,
            });
            self.episode = None;
            return relaxed(self.futile);
        }
        objective_s
    }

    /// The TTFT the histogram can tell from the objective `objective_s`, seconds: the
    /// objective, or, once the attainment `quantile` has read inside the bucket `(low, high]`
    /// that holds the objective for a whole rate window (started by a reading above the
    /// objective), that bucket's upper bound, at most [`MAX_RELAXED`] times the objective.
    /// `histogram_quantile` interpolates linearly inside a bucket, so such a reading may be a
    /// real quantile anywhere in it: vLLM's buckets jump from 1 to 2.5 s, and a slow model whose
    /// real p99 is 1.5 s reads 2.1–2.4 s at any fleet size. A backlog passes through the bucket
    /// within a window (the first reading of a burst is in it, the next above it); a slow model
    /// stays in it. A reading outside the bucket, an idle sync, missing bounds, or every replica
    /// with a queue (`all_queued`: the fleet is short, whatever the quantile reads) start the
    /// window over (docs/objective.md#each-sync).
    fn resolvable_objective(
        &mut self,
        objective_s: f64,
        quantile: Option<f64>,
        (low, high): (Option<f64>, Option<f64>),
        all_queued: bool,
        now_ms: i64,
    ) -> f64 {
        let bucket = match (low, high) {
            (Some(low), Some(high))
                if low < objective_s && objective_s < high && high.is_finite() =>
            {
                Some((low, high))
            }
            _ => None,
        };
        match (quantile, bucket) {
            (Some(q), Some((low, high))) if !all_queued && q > low && q <= high => {
                // Above the objective starts the window; within it keeps a started one (a
                // fleet sized well reads inside the bucket below the objective).
                if q > objective_s {
                    self.inside_ms.get_or_insert(now_ms);
                }
            }
            _ => self.inside_ms = None,
        }
        match (self.inside_ms, bucket) {
            (Some(since), Some((_, high))) if now_ms.saturating_sub(since) >= WINDOW_MS => {
                high.min(MAX_RELAXED * objective_s)
            }
            _ => objective_s,
        }
    }

    /// The probe this sync (see [`Probe`]) for `estimate`: `None` for a `saturated` or
    /// `restored` one; otherwise the rate to size on, requests/s per replica (the larger of the
    /// estimate and `factor × base`), and the Ready replicas a fifth of which one step may shed.
    /// The factor grows by [`PROBE_STEP`] once the `reading` ([`judge`]) has been a
    /// [`Reading::Margin`] for a whole rate window with `ready` no more than the objective's
    /// last recommendation (the smaller fleet was tried); it steps back by [`PROBE_STEP`] on a
    /// [`Reading::Back`], and starts over at 1 on a [`Reading::Miss`], on a new basis, or when
    /// the demand `lambda` (requests/s) rose [`PROBE_RISE`]-fold since its last step. Any other
    /// reading (an idle window among them) restarts the window of margin.
    fn probe(
        &mut self,
        estimate: &Estimate,
        reading: Reading,
        (ready, lambda): (i32, f64),
        now_ms: i64,
    ) -> Option<(f64, i32)> {
        let basis = estimate.basis;
        match basis {
            Basis::Saturated | Basis::Restored => {
                self.probe = None;
                return None;
            }
            Basis::Calibrated | Basis::Extrapolated | Basis::LowerBound => {}
        }
        let tried = self.last.is_some_and(|last| ready <= last);
        let start = Probe {
            factor: 1.0,
            basis,
            held_ms: None,
            ready,
            demand: lambda,
            base: estimate.requests_per_second,
        };
        let probe = self.probe.get_or_insert(start);
        if probe.basis != basis || lambda > PROBE_RISE * probe.demand.max(f64::MIN_POSITIVE) {
            *probe = start;
        }
        match reading {
            Reading::Miss => *probe = start,
            Reading::Back => {
                probe.factor = (probe.factor / PROBE_STEP).max(1.0);
                probe.held_ms = None;
            }
            Reading::Margin if tried => {
                let since = *probe.held_ms.get_or_insert(now_ms);
                if now_ms.saturating_sub(since) >= WINDOW_MS {
                    *probe = Probe {
                        factor: (probe.factor * PROBE_STEP).min(PROBE_MAX),
                        held_ms: Some(now_ms),
                        ready,
                        demand: lambda,
                        ..*probe
                    };
                }
            }
            Reading::Margin | Reading::Hold | Reading::Idle => probe.held_ms = None,
        }
        Some((
            (probe.factor * probe.base).max(estimate.requests_per_second),
            probe.ready,
        ))
    }
}

/// What one sync's TTFT reading tells the probe (docs/objective.md#probing).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Reading {
    /// No quantile (an idle window).
    Idle,
    /// A wide margin under the objective: the probe may grow.
    Margin,
    /// Neither a margin nor close to the objective: the probe holds.
    Hold,
    /// Close to the objective: the probe steps back.
    Back,
    /// Over the objective: the probe starts over.
    Miss,
}

/// The probe's reading of a sync: the TTFT `quantile` (seconds) against the objective. A
/// quantile the histogram cannot place above it (at most `resolved_s`, the bucket bound of
/// [`ObjectiveMemory::resolvable_objective`]) counts as a reading at the objective: no miss, and
/// no margin either (the probe steps back).
fn judge(objective_s: f64, quantile: Option<f64>, resolved_s: f64) -> Reading {
    let Some(q) = quantile else {
        return Reading::Idle;
    };
    if q > resolved_s {
        return Reading::Miss;
    }
    let q = q.min(objective_s);
    if q > PROBE_BACK * objective_s {
        Reading::Back
    } else if q <= PROBE_MARGIN * objective_s {
        Reading::Margin
    } else {
        Reading::Hold
    }
}

/// The fewest replicas one probe step may leave of `ready`: four fifths, rounded up (a fleet of
/// fewer than five replicas is not shrunk by the probe).
fn probe_floor(ready: i32) -> i32 {
    ready.saturating_mul(4).saturating_add(4) / 5
}

/// What the objective adds to one sync.
pub(super) struct Added<E> {
    /// The objective's outcome (joins the capacity recommendation).
    pub outcome: MetricOutcome<E>,
    /// The TTFT guardrail (joins the metrics).
    pub guardrail: Option<MetricInput<E>>,
    /// The estimate for status.
    pub estimate: Option<Estimate>,
}

/// One sync of the objective: observes the readings, then recommends. `None` without an
/// objective.
pub(super) fn step<E: Clone>(
    spec: &LLMScalerSpec,
    memory: &mut ObjectiveMemory,
    readings: Option<&Vec<Result<f64, E>>>,
    (now_ms, spec_replicas, ready, template, max_num_seqs): (
        i64,
        i32,
        i32,
        Option<&String>,
        Option<u32>,
    ),
    startup_s: f64,
    cap: i32,
) -> Option<Added<E>> {
    let model = ObjectiveModel::from_spec(spec)?;
    if template.is_some() && memory.template.as_ref() != template {
        // A rollout: another model, image or GPU; what was learned no longer holds.
        if memory.template.is_some() || memory.calibration.estimate().is_some() {
            *memory = ObjectiveMemory::default();
        }
        memory.template = template.cloned();
    }
    memory.calibration.state_batch_limit(max_num_seqs);
    // One reading of the sync, when it succeeded.
    let reading = |i: usize| {
        readings
            .and_then(|r| r.get(i))
            .and_then(|v| v.as_ref().ok().copied())
    };
    let quantile = reading(read::TTFT_QUANTILE).filter(|v| v.is_finite());
    let resolved_s = memory.resolvable_objective(
        model.ttft_s,
        quantile,
        (
            reading(read::TTFT_BUCKET_LOW),
            reading(read::TTFT_BUCKET_HIGH),
        ),
        reading(read::MIN_WAITING).is_some_and(|w| w > 0.0),
        now_ms,
    );
    let target_s = memory.ttft_target(
        resolved_s,
        quantile,
        (reading(read::MIN_WAITING), reading(read::MAX_WAITING)),
        ready,
        now_ms,
    );
    let guardrail = spec.objective.as_ref().map(|o| MetricInput {
        name: objective::TTFT_NAME.to_owned(),
        target: if target_s > model.ttft_s {
            format!("{target_s:.3}")
        } else {
            o.ttft_seconds.clone()
        },
        value: match readings.and_then(|r| r.get(read::TTFT_QUANTILE)) {
            Some(v) => v.clone(),
            None => Ok(f64::NAN),
        },
        guardrail: true,
    });
    let Some(readings) = readings else {
        return Some(Added {
            outcome: skipped(Skip::NotMeasurable(f64::NAN)),
            guardrail,
            estimate: memory.calibration.estimate(),
        });
    };
    let evidence = match objective::evidence(readings) {
        Ok(e) => e,
        Err(why) => {
            return Some(Added {
                outcome: skipped(why),
                guardrail,
                estimate: memory.calibration.estimate(),
            });
        }
    };
    // A set-aside (futile) objective teaches no correction: above the relaxed target it is
    // over, within the objective it is not, and between the two it says nothing.
    let ttft_over = quantile.and_then(|v| match (v > model.ttft_s, v > target_s) {
        (true, false) => None,
        (over, _) => Some(over),
    });
    // Sized: at least what the estimate asked for (a fleet the probe kept smaller says
    // nothing about the model).
    let sized = memory.last_plain.is_some_and(|plain| ready >= plain);
    memory
        .calibration
        .observe(&evidence, now_ms, sized, ttft_over);
    let growth = memory.growth(now_ms, &evidence);
    memory
        .rates
        .push_back((now_ms, evidence.completions + growth));
    while memory
        .rates
        .front()
        .is_some_and(|(t, _)| *t < now_ms.saturating_sub(TREND_MS))
    {
        memory.rates.pop_front();
    }
    let estimate = memory.calibration.estimate();
    let mut plain = None;
    let outcome = match &estimate {
        Some(estimate) => {
            let points: Vec<(i64, f64)> = memory.rates.iter().copied().collect();
            let demand = Demand {
                evidence,
                growth,
                trend: objective::trend(&points),
                startup_s,
            };
            let lambda = model.demand(&demand, estimate, memory.calibration.mix());
            let floor = memory.calibration.floor();
            let mut outcome = model.outcome(lambda, estimate, floor, cap);
            if estimate.basis == Basis::LowerBound
                && let Ok(r) = outcome.recommendation.as_mut()
            {
                // Too little evidence to raise the fleet on (the guardrail does); a lower bound
                // of capacity may still show that fewer replicas suffice.
                *r = (*r).min(spec_replicas);
            }
            plain = outcome.recommendation.as_ref().ok().copied();
            // A reading the histogram cannot place above the objective is not a miss.
            let judged = judge(model.ttft_s, quantile, resolved_s);
            let probe = memory.probe(estimate, judged, (ready, lambda), now_ms);
            if let Some((rate, at)) = probe.filter(|(rate, _)| *rate > estimate.requests_per_second)
                && let Ok(r) = outcome.recommendation.as_mut()
            {
                let sizing = Estimate {
                    requests_per_second: rate,
                    ..*estimate
                };
                if let Ok(probed) = model
                    .outcome::<E>(lambda, &sizing, floor, cap)
                    .recommendation
                {
                    // One step sheds at most a fifth of the Ready replicas at that step.
                    *r = probed.max(probe_floor(at)).min(*r);
                }
            }
            outcome
        }
        // No completion seen yet: nothing to size with; the guardrail and the bounds act.
        None => MetricOutcome {
            value: Some(evidence.completions),
            ..skipped(Skip::NotMeasurable(f64::NAN))
        },
    };
    memory.last = outcome.recommendation.as_ref().ok().copied();
    memory.last_plain = plain;
    Some(Added {
        outcome,
        guardrail,
        estimate,
    })
}

fn skipped<E>(why: Skip<E>) -> MetricOutcome<E> {
    MetricOutcome {
        name: objective::NAME.to_owned(),
        value: None,
        ratio: None,
        recommendation: Err(why),
        guardrail: false,
    }
}

/// The `status.capacity` of an estimate learned on `template` (without `observedAt`).
pub(super) fn status_of(estimate: &Estimate, template: Option<&String>) -> CapacityStatus {
    let number = |v: f64| format!("{v:.3}");
    let message = match estimate.basis {
        Basis::Saturated => {
            "completions per replica while replicas queued (a pod for 2 min, or every replica for 1 min)"
                .to_owned()
        }
        Basis::Calibrated => match estimate.line {
            Some((a, b, n)) => format!(
                "inter-token latency {a:.4} s + {b:.6} s per running sequence, extrapolated to the batch limit {n:.0} ({})",
                match estimate.stated_limit {
                    Some(s) if n < s => format!("the KV cache's batch, under --max-num-seqs {s:.0}"),
                    Some(_) => "the pod template's --max-num-seqs".to_owned(),
                    None => "seen with a queue".to_owned(),
                }
            ),
            None => "the step-time line extrapolated to the batch limit".to_owned(),
        },
        Basis::Extrapolated => match estimate.line {
            Some((a, b, n)) => format!(
                "inter-token latency {a:.4} s + {b:.6} s per running sequence, extrapolated to the {n:.0} sequences the KV cache holds (no full batch seen yet)"
            ),
            None => "the step-time line extrapolated to the KV cache's batch".to_owned(),
        },
        Basis::LowerBound => "not enough evidence yet (no line or no batch limit seen): a lower bound; the TTFT guardrail and the bounds act".to_owned(),
        Basis::Restored => "restored from status; not yet confirmed by this process".to_owned(),
    };
    CapacityStatus {
        basis: estimate.basis.as_str().to_owned(),
        requests_per_second: number(estimate.requests_per_second),
        prompt_tokens_per_second: estimate.prompt_tokens_per_second.map(|v| format!("{v:.0}")),
        lower_bound: Some(number(estimate.lower_bound)),
        correction: Some(format!("{:.2}", estimate.correction)),
        samples: Some(estimate.samples),
        observed_at: None,
        template: template.cloned(),
        message: Some(message),
    }
}

/// The `status.capacity` to write after a sync at `now_ms`: `new` when it differs materially
/// from `previous` (another basis or template, a rate or correction 5 % away), else `previous`
/// unchanged, so that a steady estimate causes no status write.
pub fn merge(
    previous: Option<&CapacityStatus>,
    new: Option<CapacityStatus>,
    now_ms: i64,
) -> Option<CapacityStatus> {
    let new = new?;
    let stamp = |mut s: CapacityStatus| {
        s.observed_at = Some(Time(
            Timestamp::from_millisecond(now_ms).unwrap_or(Timestamp::UNIX_EPOCH),
        ));
        s
    };
    let Some(previous) = previous else {
        return Some(stamp(new));
    };
    let far = |a: &str, b: &str| match (a.parse::<f64>(), b.parse::<f64>()) {
        (Ok(a), Ok(b)) => (a - b).abs() > MATERIAL_SHARE * b.abs().max(1e-9),
        _ => a != b,
    };
    let material = previous.basis != new.basis
        || previous.template != new.template
        || far(&new.requests_per_second, &previous.requests_per_second)
        || far(
            new.correction.as_deref().unwrap_or("1"),
            previous.correction.as_deref().unwrap_or("1"),
        );
    if material {
        Some(stamp(new))
    } else {
        Some(previous.clone())
    }
}

/// A hash of a pod template (FNV-1a, 64 bits, hex) for `status.capacity.template`.
pub fn template_hash(template: &serde_json::Value) -> String {
    let text = template.to_string();
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for byte in text.bytes() {
        hash ^= u64::from(byte);
        hash = hash.wrapping_mul(0x0100_0000_01b3);
    }
    format!("{hash:016x}")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn status(rps: &str, basis: &str) -> CapacityStatus {
        CapacityStatus {
            basis: basis.into(),
            requests_per_second: rps.into(),
            correction: Some("1.00".into()),
            ..CapacityStatus::default()
        }
    }

    #[test]
    fn only_a_material_change_is_written() {
        let first = merge(None, Some(status("4.500", "calibrated")), 1000).unwrap();
        assert!(first.observed_at.is_some());
        // 4.6 is 2 % away: the previous status stands (no write).
        let same = merge(Some(&first), Some(status("4.600", "calibrated")), 2000).unwrap();
        assert_eq!(same, first);
        // 4.8 is 6.7 % away, and a new basis: written.
        let moved = merge(Some(&first), Some(status("4.800", "calibrated")), 3000).unwrap();
        assert_eq!(moved.requests_per_second, "4.800");
        let basis = merge(Some(&first), Some(status("4.500", "saturated")), 3000).unwrap();
        assert_eq!(basis.basis, "saturated");
        // No objective: cleared.
        assert_eq!(merge(Some(&first), None, 4000), None);
    }

    /// A fleet of `replicas` completing `rps` each, every replica queued (`waiting` > 0) or not.
    fn readings(replicas: f64, rps: f64, waiting: f64, ttft: f64) -> Vec<Result<f64, String>> {
        let mut r = vec![Ok(0.0); read::COUNT];
        r[read::COMPLETIONS] = Ok(replicas * rps);
        r[read::PROMPT_TOKENS] = Ok(replicas * rps * 1000.0);
        r[read::GENERATION_TOKENS] = Ok(replicas * rps * 200.0);
        r[read::WAITING] = Ok(replicas * waiting);
        r[read::RUNNING] = Ok(replicas * 64.0);
        r[read::REPLICAS] = Ok(replicas);
        r[read::MAX_RUNNING] = Ok(64.0);
        r[read::MAX_WAITING] = Ok(waiting);
        r[read::MIN_WAITING] = Ok(waiting);
        r[read::INTER_TOKEN] = Ok(0.05);
        r[read::TTFT_QUANTILE] = Ok(ttft);
        r[read::TTFT_MEAN] = Ok(0.3);
        r
    }

    #[test]
    fn a_saturated_fleet_calibrates_sizes_and_starts_over_on_a_new_template() {
        let spec = objective::test_spec();
        let mut memory = ObjectiveMemory::default();
        let template = "a".to_owned();
        // One replica, queued for five syncs, completing 4 requests/s: saturated, μ = 4; the
        // queue of 30 spread over 60 s adds 0.5 requests/s: λ = 4.5, a = 1.125. With the
        // 2 s − 0.3 s = 1.7 s budget: c = 1 cannot (a > 1); c = 2: C = 0.405,
        // e^{−(8 − 4.5)·1.7} = 0.0026 → 0.001 ≤ 0.01: 2 replicas.
        let mut added = None;
        for i in 0..5 {
            added = step(
                &spec,
                &mut memory,
                Some(&readings(1.0, 4.0, 30.0, 5.0)),
                (i * 15_000, 1, 1, Some(&template), None),
                0.0,
                20,
            );
        }
        let added = added.unwrap();
        let estimate = added.estimate.unwrap();
        assert_eq!(estimate.basis, Basis::Saturated);
        assert!((estimate.requests_per_second - 4.0).abs() < 1e-9);
        assert_eq!(added.outcome.recommendation, Ok(2));
        // The guardrail reads the TTFT quantile against the objective.
        let guardrail = added.guardrail.unwrap();
        assert_eq!((guardrail.value, guardrail.target.as_str()), (Ok(5.0), "2"));
        let status = status_of(&estimate, Some(&template));
        assert_eq!(
            (status.basis.as_str(), status.requests_per_second.as_str()),
            ("saturated", "4.000")
        );
        // A rollout (another template): the estimate starts over.
        let other = "b".to_owned();
        let added = step(
            &spec,
            &mut memory,
            Some(&readings(1.0, 0.0, 0.0, 0.1)),
            (90_000, 1, 1, Some(&other), None),
            0.0,
            20,
        )
        .unwrap();
        assert_eq!(added.estimate, None);
        // Restored from status, the estimate holds until evidence replaces it.
        let status = LLMScalerStatus {
            capacity: Some(status),
            ..LLMScalerStatus::default()
        };
        let mut restored = ObjectiveMemory::restored(Some(&status));
        let added = step(
            &spec,
            &mut restored,
            None::<&Vec<Result<f64, String>>>,
            (0, 1, 1, Some(&template), None),
            0.0,
            20,
        )
        .unwrap();
        assert_eq!(
            added.estimate.map(|e| (e.basis, e.requests_per_second)),
            Some((Basis::Restored, 4.0))
        );
    }

    #[test]
    fn arrivals_count_the_growth_of_the_requests_in_the_system() {
        let mut memory = ObjectiveMemory::default();
        let e = |waiting: f64, running: f64, replicas: f64| Evidence {
            waiting,
            running,
            replicas,
            ..Evidence::default()
        };
        assert_eq!(memory.growth(0, &e(0.0, 64.0, 1.0)), 0.0);
        // 30 more requests waiting 60 s later on the same replica: 30 / 60 = 0.5 requests/s
        // arrived that no completion shows.
        assert!((memory.growth(60_000, &e(30.0, 64.0, 1.0)) - 0.5).abs() < 1e-12);
        // A queue draining reads as fewer arrivals than completions: (10 + 64 − 94) / 60.
        assert!((memory.growth(120_000, &e(10.0, 64.0, 1.0)) + 20.0 / 60.0).abs() < 1e-12);
        // A replica that stopped reporting took its requests with it: never negative then.
        let mut memory = ObjectiveMemory::default();
        memory.growth(0, &e(0.0, 128.0, 2.0));
        assert_eq!(memory.growth(30_000, &e(0.0, 64.0, 1.0)), 0.0);
    }

    #[test]
    fn a_ttft_guardrail_that_more_replicas_do_not_move_is_set_aside() {
        // (smallest, largest) queue of one replica.
        let none = (Some(0.0), Some(0.0));
        let everywhere = |w: f64| (Some(w), Some(w));
        let mut memory = ObjectiveMemory::default();
        // Engaged at 10 Ready replicas, the 99th percentile at 2.2 s against 2 s.
        assert_eq!(memory.ttft_target(2.0, Some(2.2), none, 10, 0), 2.0);
        // 15 Ready (1.5 × 10) from t = 15 s, no queue, the quantile still 2.15 s (within
        // 10 % of 2.2): not before a whole rate window on the larger fleet (t = 75 s).
        for t in [15_000, 30_000, 45_000, 60_000] {
            assert_eq!(memory.ttft_target(2.0, Some(2.15), none, 15, t), 2.0);
        }
        // Then set aside: the target moves to 1.25 × 2.2 = 2.75 s.
        let target = memory.ttft_target(2.0, Some(2.2), none, 15, 75_000);
        assert!((target - 2.75).abs() < 1e-12, "{target}");
        let target = memory.ttft_target(2.0, Some(2.5), everywhere(3.0), 8, 90_000);
        assert!((target - 2.75).abs() < 1e-12, "{target}");
        // No replica had a queue: the requests are slow on their own, and they come back with
        // the next burst. A dip within the objective between bursts keeps the guardrail set
        // aside (when it did not, the slow-large profile on the code trace at scale 1 engaged
        // it again on a fleet already at its maximum, which could never grow to show it
        // futile: 128 replicas all hour, 124 replica-hours where `ideal` uses 9).
        for (t, q) in [(105_000, 1.5), (120_000, 2.4)] {
            let target = memory.ttft_target(2.0, Some(q), none, 8, t);
            assert!((target - 2.75).abs() < 1e-12, "{target}");
        }
        // Worse than that (a queue builds on a smaller fleet): the objective's guardrail is back.
        assert_eq!(
            memory.ttft_target(2.0, Some(3.0), everywhere(5.0), 8, 135_000),
            2.0
        );
        assert_eq!(memory.futile, None);

        // A cold start: the backlog routed to the first pod stays there (vLLM queues per pod)
        // while the new pods idle; its requests' TTFT grows whatever the fleet does (the
        // conversation trace at scale 16 went to 128 replicas for it). 1 Ready at 80 s, then 2
        // Ready for a window, one queued and one idle, at 150 s: set aside (1.25 × 150 s), until
        // the quantile is back within the objective; then the objective's guardrail holds again.
        let stranded = (Some(0.0), Some(900.0));
        let mut memory = ObjectiveMemory::default();
        assert_eq!(
            memory.ttft_target(2.0, Some(80.0), everywhere(900.0), 1, 0),
            2.0
        );
        for t in [15_000, 30_000, 45_000, 60_000] {
            assert_eq!(memory.ttft_target(2.0, Some(150.0), stranded, 2, t), 2.0);
        }
        let target = memory.ttft_target(2.0, Some(150.0), stranded, 2, 75_000);
        assert!((target - 187.5).abs() < 1e-9, "{target}");
        assert_eq!(memory.ttft_target(2.0, Some(0.5), none, 30, 90_000), 2.0);
        assert_eq!(memory.futile, None);

        // A fleet that grew with a queue on every replica, or whose quantile fell, keeps its
        // guardrail. (Engaged at 4 s, 3 s after growing: under 0.9 × 4 = 3.6 s, more replicas
        // helped; the next growth is judged from 3 s on 2 replicas.)
        for (first, waiting, late) in [(2.2, everywhere(1.0), 2.2), (4.0, none, 3.0)] {
            let mut memory = ObjectiveMemory::default();
            assert_eq!(memory.ttft_target(2.0, Some(first), none, 1, 0), 2.0);
            for t in (1..=10).map(|i| i * 15_000) {
                assert_eq!(
                    memory.ttft_target(2.0, Some(late), waiting, 2, t),
                    2.0,
                    "{waiting:?} {late}"
                );
            }
        }
        // Judged from 3 s on 2 replicas: 3 Ready (1.5 × 2) for a window at 2.9 s (not below
        // 0.9 × 3 = 2.7 s) sets it aside at 1.25 × 2.9 = 3.625 s. Judged from the 4 s on 1
        // replica it engaged at, 2.9 s would count as helped.
        let mut memory = ObjectiveMemory::default();
        assert_eq!(memory.ttft_target(2.0, Some(4.0), none, 1, 0), 2.0);
        assert_eq!(memory.ttft_target(2.0, Some(3.0), none, 2, 15_000), 2.0);
        for t in [30_000, 45_000, 60_000, 75_000] {
            assert_eq!(memory.ttft_target(2.0, Some(2.9), none, 3, t), 2.0);
        }
        let target = memory.ttft_target(2.0, Some(2.9), none, 3, 90_000);
        assert!((target - 3.625).abs() < 1e-12, "{target}");
        // Every replica queued for a whole window while set aside: the fleet is short, the
        // objective's guardrail is back (a reading within the relaxed target or not).
        for t in [105_000, 120_000, 135_000, 150_000] {
            let target = memory.ttft_target(2.0, Some(3.0), everywhere(2.0), 3, t);
            assert!((target - 3.625).abs() < 1e-12, "{t}: {target}");
        }
        assert_eq!(
            memory.ttft_target(2.0, Some(3.0), everywhere(2.0), 3, 165_000),
            2.0
        );
        assert_eq!(memory.futile, None);

        // A queue within the last window when set aside: not lasting (the quantile's window
        // still holds the backlog); a dip within the objective ends it.
        let mut memory = ObjectiveMemory::default();
        assert_eq!(
            memory.ttft_target(2.0, Some(9.0), everywhere(4.0), 1, 0),
            2.0
        );
        for t in [15_000, 30_000, 45_000, 60_000] {
            memory.ttft_target(2.0, Some(9.0), (Some(0.0), Some(4.0)), 2, t);
        }
        let target = memory.ttft_target(2.0, Some(9.0), none, 2, 75_000);
        assert!((target - 11.25).abs() < 1e-12, "{target}");
        assert_eq!(memory.ttft_target(2.0, Some(1.0), none, 2, 90_000), 2.0);
        // A lasting set-aside never relaxes below an objective raised since (3 s > 1.25 × 2.2).
        let mut memory = ObjectiveMemory {
            futile: Some(Futile {
                at: 2.2,
                lasting: true,
                short_ms: None,
            }),
            ..ObjectiveMemory::default()
        };
        assert_eq!(memory.ttft_target(3.0, Some(2.5), none, 5, 0), 3.0);
    }

    #[test]
    fn an_ambiguous_ttft_reading_relaxes_the_guardrail_only_after_a_window() {
        let spec = objective::test_spec();
        let mut memory = ObjectiveMemory::default();
        // The TTFT guardrail's target at a sync every 15 s reading the quantile `q` inside the
        // histogram bucket `(low, high]` (ttftSeconds 2).
        let mut t = 0;
        let mut target = |q: f64, low: f64, high: f64| {
            let mut r = readings(10.0, 1.0, 0.0, q);
            r[read::TTFT_BUCKET_LOW] = Ok(low);
            r[read::TTFT_BUCKET_HIGH] = Ok(high);
            t += 15_000;
            let added = step(
                &spec,
                &mut memory,
                Some(&r),
                (t, 10, 10, None, None),
                0.0,
                20,
            )
            .unwrap();
            added.guardrail.unwrap().target
        };
        // A slow model: 2.3 s read inside (1, 2.5] at every sync. Not yet a whole window at
        // 15..45 s; at 75 s (60 s after the first), the target is the bucket's upper bound.
        for _ in 0..4 {
            assert_eq!(target(2.3, 1.0, 2.5), "2");
        }
        assert_eq!(target(2.3, 1.0, 2.5), "2.500");
        // A reading within the objective but still in the bucket keeps it.
        assert_eq!(target(1.8, 1.0, 2.5), "2.500");
        // Above the bucket: surely a miss; the window starts over.
        assert_eq!(target(3.0, 2.5, 5.0), "2");
        assert_eq!(target(2.4, 1.0, 2.5), "2");
        // A burst: low, one reading inside the bucket, then above it: never relaxed.
        assert_eq!(target(0.7, 0.5, 0.75), "2");
        assert_eq!(target(2.4, 1.0, 2.5), "2");
        assert_eq!(target(7.0, 5.0, 7.5), "2");
        // An objective on a bucket bound is never ambiguous: ttftSeconds 2 with a bucket
        // (1, 2] and the quantile above it in (2, 5].
        for _ in 0..6 {
            assert_eq!(target(2.2, 2.0, 5.0), "2");
        }
    }

    #[test]
    fn the_histogram_bucket_bounds_tell_what_the_quantile_cannot() {
        let mut memory = ObjectiveMemory::default();
        let mut at = 0;
        // The objective the histogram resolves at a sync every 15 s (ttftSeconds 2).
        let mut resolve = |q: Option<f64>, bucket: (Option<f64>, Option<f64>), queued: bool| {
            at += 15_000;
            memory.resolvable_objective(2.0, q, bucket, queued, at)
        };
        let inside = (Some(1.0), Some(2.5));
        // A fleet sized well reads inside the bucket under the objective: that starts nothing,
        // so a reading that then rises over the objective is a miss for a whole window.
        for _ in 0..5 {
            assert_eq!(resolve(Some(1.5), inside, false), 2.0);
        }
        for _ in 0..4 {
            assert_eq!(resolve(Some(2.4), inside, false), 2.0);
        }
        assert_eq!(resolve(Some(2.4), inside, false), 2.5);
        // Every replica with a queue: the fleet is short; the window starts over.
        assert_eq!(resolve(Some(2.4), inside, true), 2.0);
        assert_eq!(resolve(Some(2.4), inside, false), 2.0);
        // An idle sync (no quantile) or missing bounds start the window over.
        assert_eq!(resolve(None, inside, false), 2.0);
        assert_eq!(resolve(Some(2.2), (None, Some(2.5)), false), 2.0);
        // The quantile in +Inf reads the largest finite bound for both: not inside.
        assert_eq!(resolve(Some(10.0), (Some(10.0), Some(10.0)), false), 2.0);
        // A wide bucket relaxes at most to 1.25 × the objective.
        for _ in 0..4 {
            assert_eq!(resolve(Some(3.0), (Some(1.0), Some(5.0)), false), 2.0);
        }
        assert_eq!(resolve(Some(3.0), (Some(1.0), Some(5.0)), false), 2.5);
    }

    #[test]
    fn a_probe_step_sheds_at_most_a_fifth() {
        assert_eq!(
            [10, 6, 5, 4, 2, 1, 0].map(probe_floor),
            [8, 5, 4, 4, 2, 1, 0]
        );
    }

    /// One sync of `ready` Ready replicas completing `lambda` requests/s in all without a
    /// queue, the TTFT quantile `ttft` (NaN: an idle window), at `ms`: (recommendation, what it
    /// would have been without the probe).
    fn probe_sync(
        spec: &LLMScalerSpec,
        memory: &mut ObjectiveMemory,
        (ready, lambda, ttft): (i32, f64, f64),
        ms: i64,
    ) -> (i32, i32) {
        let template = "a".to_owned();
        let readings = readings(f64::from(ready), lambda / f64::from(ready), 0.0, ttft);
        let added = step(
            spec,
            memory,
            Some(&readings),
            (ms, ready, ready, Some(&template), None),
            0.0,
            20,
        )
        .unwrap();
        let r = added.outcome.recommendation.unwrap();
        (r, memory.last_plain.unwrap())
    }

    #[test]
    fn a_lower_bound_fleet_with_a_wide_ttft_margin_is_probed_a_fifth_at_a_time() {
        let spec = objective::test_spec();
        let mut memory = ObjectiveMemory::default();
        // 20 requests/s over a fleet that never queues, TTFT p99 0.4 s (a fifth of the 2 s
        // objective): the estimate is the throughput per replica, a lower bound.
        let mut ready = 10;
        let mut probed_at = None;
        for i in 0..40 {
            let (r, plain) = probe_sync(&spec, &mut memory, (ready, 20.0, 0.4), i * 15_000);
            assert_ne!(
                memory.calibration.estimate().unwrap().basis,
                Basis::Saturated
            );
            let probe = memory.probe.unwrap();
            if i < 5 {
                // Less than a rate window of margin: no probe.
                assert_eq!((r, probe.factor), (plain, 1.0), "sync {i}");
            }
            // Never more than the estimate sizes, never a fifth fewer than were Ready at the
            // factor's last step.
            assert!(
                r <= plain && r >= probe_floor(probe.ready),
                "sync {i}: {r} of {ready}"
            );
            assert!(probe.factor <= PROBE_MAX);
            if r < plain && probed_at.is_none() {
                probed_at = Some(i);
            }
            ready = r;
        }
        // The margin counts from the first sync with a recommendation to try (the second, at
        // 15 s): a rate window later, at 75 s, the sixth sync is probed.
        assert_eq!(probed_at, Some(5));
        assert!(ready < 10, "{ready}");
    }

    #[test]
    fn an_ambiguous_quantile_is_neither_a_miss_nor_a_margin_for_the_probe() {
        // The histogram places the quantile (the objective resolves to ttftSeconds).
        assert_eq!(judge(2.0, None, 2.0), Reading::Idle);
        assert_eq!(judge(2.0, Some(2.3), 2.0), Reading::Miss);
        assert_eq!(judge(2.0, Some(1.6), 2.0), Reading::Back);
        assert_eq!(judge(2.0, Some(1.2), 2.0), Reading::Hold);
        assert_eq!(judge(2.0, Some(0.9), 2.0), Reading::Margin);
        // Inside the bucket (1, 2.5] for a window: a reading at the objective; above: a miss.
        assert_eq!(judge(2.0, Some(2.3), 2.5), Reading::Back);
        assert_eq!(judge(2.0, Some(2.5), 2.5), Reading::Back);
        assert_eq!(judge(2.0, Some(2.6), 2.5), Reading::Miss);
    }

    #[test]
    fn a_lower_bound_fleet_whose_quantile_sits_in_the_objectives_bucket_is_not_probed() {
        let spec = objective::test_spec();
        let mut memory = ObjectiveMemory::default();
        let template = "a".to_owned();
        // 20 requests/s over 10 replicas that never queue, the quantile at 2.3 s inside vLLM's
        // (1, 2.5] bucket at every sync: the guardrail relaxes after a window, but the probe
        // has no margin to shrink on (the mean TTFT, 0.3 s, does not stand in for it).
        for i in 0..12 {
            let mut r = readings(10.0, 2.0, 0.0, 2.3);
            r[read::TTFT_BUCKET_LOW] = Ok(1.0);
            r[read::TTFT_BUCKET_HIGH] = Ok(2.5);
            let added = step(
                &spec,
                &mut memory,
                Some(&r),
                (i * 15_000, 10, 10, Some(&template), None),
                0.0,
                20,
            )
            .unwrap();
            assert_eq!(
                added.outcome.recommendation.unwrap(),
                memory.last_plain.unwrap(),
                "sync {i}"
            );
            assert_eq!(memory.probe.unwrap().factor, 1.0, "sync {i}");
            let relaxed = added.guardrail.unwrap().target == "2.500";
            assert_eq!(relaxed, i >= 4, "sync {i}");
        }
    }

    #[test]
    fn the_probe_starts_over_on_a_miss_and_on_rising_demand_and_idles_restart_its_window() {
        let spec = objective::test_spec();
        // Probed to its first step (2) at 75 s, as above.
        let probed = || {
            let mut memory = ObjectiveMemory::default();
            let mut ready = 10;
            for i in 0..6 {
                ready = probe_sync(&spec, &mut memory, (ready, 20.0, 0.4), i * 15_000).0;
            }
            assert_eq!(memory.probe.map(|p| p.factor), Some(PROBE_STEP));
            (memory, ready)
        };
        // A miss: at once the plain recommendation and a factor of 1.
        let (mut memory, ready) = probed();
        let (r, plain) = probe_sync(&spec, &mut memory, (ready, 20.0, 2.5), 90_000);
        assert_eq!((r, memory.probe.map(|p| p.factor)), (plain, Some(1.0)));
        // Between 3/4 of the objective and the objective: one step back.
        let (mut memory, ready) = probed();
        probe_sync(&spec, &mut memory, (ready, 20.0, 1.6), 90_000);
        assert_eq!(memory.probe.map(|p| p.factor), Some(1.0));
        // The demand rose 1.25-fold since the step: started over.
        let (mut memory, ready) = probed();
        let (r, plain) = probe_sync(&spec, &mut memory, (ready, 30.0, 0.4), 90_000);
        assert_eq!((r, memory.probe.map(|p| p.factor)), (plain, Some(1.0)));
        // An idle window: the next step needs a whole window of margin after it (from 150 s,
        // the first reading after the idle syncs, to 210 s), not 60 s since the last step.
        let (mut memory, mut ready) = probed();
        for ms in [90_000, 105_000, 120_000, 135_000] {
            ready = probe_sync(&spec, &mut memory, (ready, 20.0, f64::NAN), ms).0;
        }
        for ms in [150_000, 165_000, 180_000, 195_000] {
            ready = probe_sync(&spec, &mut memory, (ready, 20.0, 0.4), ms).0;
            assert_eq!(memory.probe.map(|p| p.factor), Some(PROBE_STEP), "{ms}");
        }
        probe_sync(&spec, &mut memory, (ready, 20.0, 0.4), 210_000);
        assert_eq!(
            memory.probe.map(|p| p.factor),
            Some(PROBE_STEP * PROBE_STEP)
        );
    }

    #[test]
    fn a_fleet_of_four_is_held_not_shrunk_and_a_ramp_starts_the_probe_over() {
        let spec = objective::test_spec();
        let mut memory = ObjectiveMemory::default();
        // Four replicas: a fifth of them is less than one, so the probe cannot shed one; it
        // only keeps the fleet where it is while the margin holds, its factor at the most.
        for i in 0..40 {
            let (r, plain) = probe_sync(&spec, &mut memory, (4, 8.0, 0.4), i * 15_000);
            assert_eq!(r, plain.min(4), "sync {i}");
        }
        assert_eq!(memory.probe.map(|p| p.factor), Some(PROBE_MAX));
        // A ramp (the demand 1.5-fold): the probe starts over, its factor back at 1.
        let (r, plain) = probe_sync(&spec, &mut memory, (4, 12.0, 0.4), 40 * 15_000);
        assert_eq!((r, memory.probe.map(|p| p.factor)), (plain, Some(1.0)));
    }

    #[test]
    fn the_status_message_says_where_the_batch_limit_came_from() {
        let message = |n: f64, stated: Option<f64>| {
            let estimate = Estimate {
                basis: Basis::Calibrated,
                requests_per_second: 4.77,
                prompt_tokens_per_second: None,
                lower_bound: 3.0,
                correction: 1.0,
                samples: 20,
                line: Some((0.012, 0.000_806, n)),
                stated_limit: stated,
            };
            status_of(&estimate, None).message.unwrap_or_default()
        };
        assert_eq!(
            message(64.0, Some(64.0)),
            "inter-token latency 0.0120 s + 0.000806 s per running sequence, extrapolated to the \
             batch limit 64 (the pod template's --max-num-seqs)"
        );
        assert!(
            message(40.0, Some(256.0))
                .ends_with("batch limit 40 (the KV cache's batch, under --max-num-seqs 256)")
        );
        assert!(message(17.0, None).ends_with("batch limit 17 (seen with a queue)"));
    }

    #[test]
    fn the_template_hash_is_stable_and_tells_templates_apart() {
        let a = serde_json::json!({"spec": {"containers": [{"image": "vllm:1"}]}});
        let b = serde_json::json!({"spec": {"containers": [{"image": "vllm:2"}]}});
        assert_eq!(template_hash(&a), template_hash(&a.clone()));
        assert_ne!(template_hash(&a), template_hash(&b));
        assert_eq!(template_hash(&a).len(), 16);
    }
}
