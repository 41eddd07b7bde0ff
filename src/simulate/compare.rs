//! `simulate --requests`: one trace, the scaler and the chosen comparators, each in its own
//! closed loop on the same requests, and the report of `docs/simulate/README.md#report`.

use std::collections::BTreeMap;

use llmscaler_api::{LLMScaler, MetricProvider};
use llmscaler_loadmodel::{ATTRIBUTION, Params, Profile, Request};
use serde::Serialize;

use super::policies::{
    HpaPolicy, IdealPolicy, KedaPolicy, LlmscalerPolicy, ReactivePolicy, SchedulePolicy,
    StaticPolicy, shapes,
};
use super::replay::{self, Autoscaler, Outcome, Settings};
use super::series_check::{self, Unmatched};
use crate::promql::PromqlError;

/// Without `--initial-replicas`, every policy starts with the most replicas `ideal` uses in
/// this many first trace seconds, so that no policy pays for a cold start the trace window does
/// not show.
pub const WARM_START_SECONDS: f64 = 300.0;

/// A comparator of `--compare`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Comparator {
    /// The HorizontalPodAutoscaler v2 with its defaults.
    Hpa,
    /// KEDA (HPA behind 30 s polling, 0 ↔ 1 activation).
    Keda,
    /// The clairvoyant lower bound.
    Ideal,
    /// Every replica `ideal` has needed so far, each bought one scrape after the need, paying
    /// the start-up time: the attainment no policy without spare replicas can exceed.
    Reactive,
    /// The peak of `ideal` held all along.
    Static,
}

impl Comparator {
    /// The `--compare` spelling and report key.
    pub fn as_str(self) -> &'static str {
        match self {
            Comparator::Hpa => "hpa",
            Comparator::Keda => "keda",
            Comparator::Ideal => "ideal",
            Comparator::Reactive => "reactive",
            Comparator::Static => "static",
        }
    }

    /// Parses a `--compare` list (`hpa,keda,ideal,reactive,static`; empty = none).
    ///
    /// # Errors
    /// The unknown name.
    pub fn parse_list(text: &str) -> Result<Vec<Comparator>, String> {
        let mut out = Vec::new();
        for name in text.split(',').map(str::trim).filter(|s| !s.is_empty()) {
            let c = match name {
                "hpa" => Comparator::Hpa,
                "keda" => Comparator::Keda,
                "ideal" => Comparator::Ideal,
                "reactive" => Comparator::Reactive,
                "static" => Comparator::Static,
                other => {
                    return Err(format!(
                        "--compare: unknown comparator {other:?} (hpa, keda, ideal, reactive, static)"
                    ));
                }
            };
            if !out.contains(&c) {
                out.push(c);
            }
        }
        out.sort();
        Ok(out)
    }
}

/// Settings of a run.
#[derive(Clone, Debug)]
pub struct Options {
    /// Start-up time of a new replica, seconds.
    pub startup_seconds: f64,
    /// TTFT objective, seconds.
    pub slo_ttft_seconds: f64,
    /// Prometheus scrape interval, seconds.
    pub scrape_interval_seconds: f64,
    /// Replicas (all Ready) at the start; `None` = the most `ideal` picks in the first
    /// [`WARM_START_SECONDS`] (a warm start: the trace is a window of a running service).
    pub initial_replicas: Option<i32>,
    /// Comparators to run besides the scaler.
    pub compare: Vec<Comparator>,
    /// Seconds the run goes on after the last arrival.
    pub tail_seconds: f64,
    /// Seconds a deleted pod keeps serving what it holds before the rest is dropped (the
    /// workload's termination grace; 0 = killed at once, vLLM's default on SIGTERM).
    pub termination_grace_seconds: f64,
    /// The scaler whose metrics `hpa` and `keda` run on (`--comparators-scaler`); `None` = the
    /// replayed scaler's own. Its bounds are not used: every policy has the replayed scaler's.
    pub comparators_scaler: Option<LLMScaler>,
    /// The `model_name` label of the replayed series (`--model-name`); `None` = the one the
    /// scaler's queries name, else [`series_check::DEFAULT_MODEL_NAME`].
    pub model_name: Option<String>,
    /// The replayed Deployment's pod template states the model's `maxNumSeqs` as vLLM's
    /// `--max-num-seqs` (`spec.objective` takes it for its batch limit); `false`
    /// (`--unstated-max-num-seqs`): it does not, and the objective learns the limit from a queue.
    pub state_max_num_seqs: bool,
}

/// A replica history replayed as a fixed policy (`backtest`'s "as it ran",
/// docs/backtest.md#what-it-replays): `replicas[i]` is `spec.replicas` from `i × period_ms` to
/// the next point (the last one held to the end).
#[derive(Clone, Debug, PartialEq)]
pub struct Schedule {
    /// The report key (e.g. `as it ran`).
    pub name: String,
    /// Milliseconds between two points (> 0).
    pub period_ms: i64,
    /// `spec.replicas` per point (≥ 0).
    pub replicas: Vec<i32>,
}

/// What a run takes besides [`Options`] (`backtest`, docs/backtest.md): the model's
/// parameters and fixed replica schedules.
#[derive(Clone, Debug, Default)]
pub struct Extras {
    /// The load model's per-replica parameters (`--model FILE`); `None` = the defaults of
    /// docs/load-model.md.
    pub profile: Option<Profile>,
    /// Schedules replayed beside the policies, each under its own name.
    pub schedules: Vec<Schedule>,
}

/// Why the replay could not run.
#[derive(Debug, thiserror::Error)]
pub enum CompareError {
    /// `--requests` needs the Prometheus provider.
    #[error(
        "--requests replays the scaler's PromQL queries: metricProvider Custom is not supported"
    )]
    CustomProvider,
    /// A query is outside the supported subset or does not parse.
    #[error(transparent)]
    Query(#[from] PromqlError),
    /// The scaler's queries name several models and `--model-name` does not choose.
    #[error("{0}")]
    ModelName(String),
}

/// One policy's figures (`docs/simulate/README.md#report`).
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct PolicyReport {
    /// Pods (starting and Ready) integrated over the run, replica-seconds: what is paid for.
    pub replica_seconds: f64,
    /// The same in replica-hours.
    pub replica_hours: f64,
    /// Ready pods integrated over the run, replica-seconds.
    pub ready_replica_seconds: f64,
    /// Share (0..1) of arrived requests whose TTFT was within the objective (dropped and
    /// never-served requests count as misses).
    pub slo_attainment: f64,
    /// Median TTFT of served requests, seconds (null without any).
    pub ttft_p50_seconds: f64,
    /// 95th percentile TTFT, seconds.
    pub ttft_p95_seconds: f64,
    /// 99th percentile TTFT, seconds.
    pub ttft_p99_seconds: f64,
    /// Requests killed by a scale-down: in flight on a deleted pod at the end of its termination
    /// grace.
    pub requests_dropped: u64,
    /// Requests arrived.
    pub requests_arrived: u64,
    /// Requests never served by the end of the run.
    pub requests_unserved: u64,
    /// Syncs that changed `spec.replicas`.
    pub scale_events: u64,
    /// Largest `spec.replicas`.
    pub peak_replicas: i32,
    /// `replica_seconds` over `ideal`'s (when `ideal` ran).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub replica_seconds_vs_ideal: Option<f64>,
    /// `replica_seconds` over `hpa`'s (when `hpa` ran).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub replica_seconds_vs_hpa: Option<f64>,
    /// `spec.objective`'s capacity estimate at every sync that had one (`llmscaler` with an
    /// objective only): how the calibration converged (docs/benchmarks/calibration.md).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub capacity: Vec<replay::CapacityPoint>,
}

/// The flash crowd of a run (`--flash-crowd`).
#[derive(Clone, Copy, Debug, Serialize)]
pub struct FlashCrowdReport {
    /// Start, trace seconds.
    pub start_seconds: f64,
    /// Length, seconds.
    pub duration_seconds: f64,
    /// Arrival-rate factor inside it.
    pub factor: f64,
}

/// How long `ideal` lets a replica it removes finish what it holds, seconds: longer than any
/// request of the shipped traces takes on the default model (a 2,000-token answer at a full
/// batch's ~35 ms step: about 70 s).
const IDEAL_DRAIN_SECONDS: f64 = 600.0;

/// The report of a run (JSON of `--report`).
#[derive(Clone, Debug, Serialize)]
pub struct Report {
    /// The trace's attribution (CC BY 4.0).
    pub attribution: String,
    /// Requests replayed (after `--scale`).
    pub requests: usize,
    /// Trace seconds of the last arrival.
    pub trace_seconds: f64,
    /// `--scale`.
    pub scale: f64,
    /// `--seed`.
    pub seed: u64,
    /// `--startup-seconds`.
    pub startup_seconds: f64,
    /// `--slo-ttft-seconds`.
    pub slo_ttft_seconds: f64,
    /// `--scrape-interval-seconds`.
    pub scrape_interval_seconds: f64,
    /// `--termination-grace-seconds`.
    pub termination_grace_seconds: f64,
    /// Replicas at the start.
    pub initial_replicas: i32,
    /// `--flash-crowd`: when the crowd arrived (trace seconds), how long it lasted (seconds) and
    /// its arrival-rate factor; set by the caller that added it to the requests.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub flash_crowd: Option<FlashCrowdReport>,
    /// Per policy: `llmscaler` and each comparator.
    pub policies: BTreeMap<String, PolicyReport>,
    /// `ideal`'s replicas served with the start-up time paid ([`startup_bound_replica_seconds`]),
    /// replica-seconds: the least a clairvoyant policy with this start-up time could pay for
    /// `ideal`'s fleet (when `ideal` ran).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ideal_with_startup_replica_seconds: Option<f64>,
    /// The `model_name` label of the replayed series.
    pub model_name: String,
    /// The load model's per-replica parameters every policy ran on (`--model FILE`, or the
    /// defaults of docs/load-model.md).
    pub model: Profile,
    /// The `--max-num-seqs` the replayed pod template stated, sequences (`None`:
    /// `--unstated-max-num-seqs`).
    pub stated_max_num_seqs: Option<usize>,
    /// The scaler's queries (and `--comparators-scaler`'s) with a selector that selected no
    /// replayed series: each read nothing for the whole run (docs/simulate/README.md#prometheus).
    pub unmatched_queries: Vec<Unmatched>,
    /// Per policy timelines (for the plot; not in the JSON).
    #[serde(skip)]
    pub timelines: BTreeMap<String, Vec<replay::TimelinePoint>>,
}

fn policy_report(o: &Outcome) -> PolicyReport {
    let r = &o.report;
    let within = o.within_slo as f64;
    PolicyReport {
        replica_seconds: o.replica_seconds,
        replica_hours: o.replica_seconds / 3600.0,
        ready_replica_seconds: r.replica_seconds,
        slo_attainment: if r.arrived == 0 {
            1.0
        } else {
            within / r.arrived as f64
        },
        ttft_p50_seconds: r.ttft_p50_s,
        ttft_p95_seconds: r.ttft_p95_s,
        ttft_p99_seconds: r.ttft_p99_s,
        requests_dropped: r.failed,
        requests_arrived: r.arrived,
        requests_unserved: r.arrived.saturating_sub(r.served),
        scale_events: o.scale_events,
        peak_replicas: o.peak_replicas,
        replica_seconds_vs_ideal: None,
        replica_seconds_vs_hpa: None,
        capacity: Vec::new(),
    }
}

fn seconds_to_ms(s: f64) -> i64 {
    #[allow(clippy::cast_possible_truncation)]
    let ms = (s * 1000.0).round() as i64;
    ms
}

/// Runs the scaler and the comparators on `requests` (sorted by arrival). `scale` and `seed`
/// are only recorded in the report. Policies run in parallel threads; the result does not
/// depend on it.
///
/// # Errors
/// [`CompareError`] for a Custom-provider scaler or a query outside the PromQL subset.
pub fn run(
    scaler: &LLMScaler,
    requests: &[Request],
    options: &Options,
    scale: f64,
    seed: u64,
) -> Result<Report, CompareError> {
    run_with(scaler, requests, options, scale, seed, &Extras::default())
}

/// [`run`] with a model profile and fixed schedules ([`Extras`]): each schedule starts with its
/// first point's replicas Ready and is reported under its name.
///
/// # Errors
/// As [`run`].
pub fn run_with(
    scaler: &LLMScaler,
    requests: &[Request],
    options: &Options,
    scale: f64,
    seed: u64,
    extras: &Extras,
) -> Result<Report, CompareError> {
    let spec = &scaler.spec;
    if spec.effective_provider() == MetricProvider::Custom {
        return Err(CompareError::CustomProvider);
    }
    let base = Params {
        slo_ttft_s: options.slo_ttft_seconds,
        drain_s: options.termination_grace_seconds,
        ..Params::default()
    };
    let params = extras.profile.map_or(base, |p| p.apply(base));
    let namespace = scaler
        .metadata
        .namespace
        .clone()
        .unwrap_or_else(|| "default".to_string());
    let model_name = series_check::model_name(spec, options.model_name.as_deref())
        .map_err(CompareError::ModelName)?;
    let settings = Settings {
        params,
        startup_ms: seconds_to_ms(options.startup_seconds),
        scrape_interval_ms: seconds_to_ms(options.scrape_interval_seconds).max(1),
        tail_ms: seconds_to_ms(options.tail_seconds),
        labels: vec![
            ("namespace".to_string(), namespace.clone()),
            ("app".to_string(), spec.target_ref.name.clone()),
            ("job".to_string(), "vllm".to_string()),
            ("engine".to_string(), series_check::ENGINE.to_string()),
            ("model_name".to_string(), model_name.clone()),
        ],
    };
    let period_ms = i64::from(spec.effective_sync_period_seconds().max(1)) * 1000;
    // The replayed Deployment states its engine's batch limit, as a vLLM Deployment does with
    // `--max-num-seqs` (docs/objective.md#calibration).
    let mut llmscaler = LlmscalerPolicy::new(spec)?.in_namespace(&namespace);
    if options.state_max_num_seqs {
        llmscaler = llmscaler.stating_max_num_seqs(params.max_num_seqs);
    }
    let shapes = match &options.comparators_scaler {
        Some(other) => {
            if other.spec.effective_provider() == MetricProvider::Custom {
                return Err(CompareError::CustomProvider);
            }
            shapes(&other.spec)?
        }
        None => shapes(spec)?,
    };

    // The bound first: it sizes the warm start and the static fleet.
    let wants_ideal = options.compare.contains(&Comparator::Ideal)
        || options.compare.contains(&Comparator::Static)
        || options.initial_replicas.is_none();
    // The bound starts replicas instantly and drains the ones it removes (they serve what they
    // hold, up to IDEAL_DRAIN_SECONDS): a request dropped by a scale-down is an SLO miss, and a
    // bound that could only keep replicas or drop requests would be neither cheap nor ideal.
    let ideal_settings = Settings {
        startup_ms: 0,
        params: Params {
            drain_s: IDEAL_DRAIN_SECONDS.max(settings.params.drain_s),
            ..settings.params
        },
        ..settings.clone()
    };
    let ideal = wants_ideal.then(|| {
        let mut policy = IdealPolicy {
            min_replicas: spec.min_replicas,
            max_replicas: spec.max_replicas,
            period_ms,
        };
        replay::run(requests, &ideal_settings, spec.min_replicas, &mut policy)
    });
    let initial = options
        .initial_replicas
        .or_else(|| {
            ideal.as_ref().and_then(|o| {
                o.timeline
                    .iter()
                    .filter(|p| p.t_s < WARM_START_SECONDS)
                    .map(|p| p.replicas)
                    .max()
            })
        })
        .unwrap_or(spec.min_replicas)
        .clamp(spec.min_replicas.min(spec.max_replicas), spec.max_replicas);
    let peak = ideal
        .as_ref()
        .map_or(spec.max_replicas, |o| o.peak_replicas);

    let mut jobs: Vec<(String, Box<dyn Autoscaler + Send>)> =
        vec![("llmscaler".to_string(), Box::new(llmscaler))];
    for c in &options.compare {
        let policy: Box<dyn Autoscaler + Send> = match c {
            Comparator::Hpa => Box::new(HpaPolicy::new(spec, shapes.clone())),
            Comparator::Keda => Box::new(KedaPolicy::new(spec, shapes.clone())),
            Comparator::Static => Box::new(StaticPolicy {
                replicas: peak,
                period_ms,
            }),
            Comparator::Reactive => Box::new(ReactivePolicy::new(
                IdealPolicy {
                    min_replicas: spec.min_replicas,
                    max_replicas: spec.max_replicas,
                    period_ms,
                },
                settings.scrape_interval_ms,
            )),
            Comparator::Ideal => continue,
        };
        jobs.push((c.as_str().to_string(), policy));
    }
    let mut starts: BTreeMap<String, i32> = BTreeMap::new();
    for schedule in &extras.schedules {
        starts.insert(
            schedule.name.clone(),
            schedule.replicas.first().copied().unwrap_or(0).max(0),
        );
        jobs.push((
            schedule.name.clone(),
            Box::new(SchedulePolicy::new(
                schedule.period_ms,
                schedule.replicas.clone(),
            )),
        ));
    }
    let outcomes: Vec<(String, Outcome, Vec<replay::CapacityPoint>)> = std::thread::scope(|s| {
        let handles: Vec<_> = jobs
            .into_iter()
            .map(|(name, mut policy)| {
                let settings = &settings;
                let start = match starts.get(&name) {
                    Some(first) => *first,
                    None if name == "static" => peak,
                    None => initial,
                };
                s.spawn(move || {
                    let outcome = replay::run(requests, settings, start, policy.as_mut());
                    (name, outcome, policy.capacity().to_vec())
                })
            })
            .collect();
        handles.into_iter().filter_map(|h| h.join().ok()).collect()
    });

    let mut series: Vec<crate::promql::Labels> = Vec::new();
    for (_, outcome, _) in &outcomes {
        series.extend(outcome.series.iter().cloned());
    }
    let mut unmatched_queries = series_check::unmatched(spec, "", &series);
    if let Some(other) = &options.comparators_scaler
        && options
            .compare
            .iter()
            .any(|c| matches!(c, Comparator::Hpa | Comparator::Keda))
    {
        unmatched_queries.extend(series_check::unmatched(
            &other.spec,
            "comparators-scaler: ",
            &series,
        ));
    }
    drop(series);
    let mut policies = BTreeMap::new();
    let mut timelines = BTreeMap::new();
    for (name, outcome, capacity) in outcomes {
        policies.insert(
            name.clone(),
            PolicyReport {
                capacity,
                ..policy_report(&outcome)
            },
        );
        timelines.insert(name, outcome.timeline);
    }
    if options.compare.contains(&Comparator::Ideal)
        && let Some(o) = &ideal
    {
        policies.insert("ideal".to_string(), policy_report(o));
        timelines.insert("ideal".to_string(), o.timeline.clone());
    }
    let end_s = requests.last().map_or(0.0, |r| r.arrival_s) + options.tail_seconds;
    let ideal_with_startup = timelines.get("ideal").map(|timeline| {
        startup_bound_replica_seconds(timeline, options.startup_seconds, end_s, initial)
    });
    let ideal_rs = policies.get("ideal").map(|p| p.replica_seconds);
    let hpa_rs = policies.get("hpa").map(|p| p.replica_seconds);
    for p in policies.values_mut() {
        p.replica_seconds_vs_ideal = ideal_rs.map(|i| p.replica_seconds / i);
        p.replica_seconds_vs_hpa = hpa_rs.map(|h| p.replica_seconds / h);
    }
    Ok(Report {
        attribution: ATTRIBUTION.to_string(),
        requests: requests.len(),
        trace_seconds: requests.last().map_or(0.0, |r| r.arrival_s),
        scale,
        seed,
        startup_seconds: options.startup_seconds,
        slo_ttft_seconds: options.slo_ttft_seconds,
        scrape_interval_seconds: options.scrape_interval_seconds,
        termination_grace_seconds: options.termination_grace_seconds,
        initial_replicas: initial,
        flash_crowd: None,
        policies,
        ideal_with_startup_replica_seconds: ideal_with_startup,
        model_name,
        model: Profile::of(&settings.params),
        stated_max_num_seqs: options
            .state_max_num_seqs
            .then_some(settings.params.max_num_seqs),
        unmatched_queries,
        timelines,
    })
}

/// The replica-seconds a clairvoyant policy pays to have `ideal`'s replicas Ready when `ideal`
/// has them, when a new replica takes `startup_s` seconds to become Ready and is paid for from
/// its creation (docs/simulate/README.md#comparators). Per replica level `k`, the intervals
/// where `ideal` runs at least `k` replicas each cost their length; a gap between two of them
/// costs the shorter of the gap (keep the replica) and `startup_s` (remove it and start a new
/// one ahead of time); the first interval costs `startup_s` more unless level `k` was among the
/// `initial` replicas Ready at 0 (then it costs the shorter of its start time and `startup_s`).
/// `timeline` holds `ideal`'s replicas from each point's `t_s` to the next (the last to `end_s`).
pub fn startup_bound_replica_seconds(
    timeline: &[replay::TimelinePoint],
    startup_s: f64,
    end_s: f64,
    initial: i32,
) -> f64 {
    let peak = timeline.iter().map(|p| p.replicas).max().unwrap_or(0);
    let mut total = 0.0;
    for k in 1..=peak {
        // Maximal runs where ideal has at least k replicas.
        let mut runs: Vec<(f64, f64)> = Vec::new();
        for (i, p) in timeline.iter().enumerate() {
            let until = timeline.get(i + 1).map_or(end_s, |n| n.t_s).max(p.t_s);
            if p.replicas < k {
                continue;
            }
            match runs.last_mut() {
                Some(last) if (last.1 - p.t_s).abs() < 1e-9 => last.1 = until,
                _ => runs.push((p.t_s, until)),
            }
        }
        let Some(first) = runs.first() else {
            continue;
        };
        total += if k <= initial {
            first.0.min(startup_s)
        } else {
            startup_s
        };
        for (i, run) in runs.iter().enumerate() {
            total += run.1 - run.0;
            if let Some(next) = runs.get(i + 1) {
                total += (next.0 - run.1).min(startup_s);
            }
        }
    }
    total
}

/// The report as a text table (one line per policy), with the attribution.
pub fn summary(report: &Report) -> String {
    use std::fmt::Write;
    let mut out = String::new();
    let _ = writeln!(
        out,
        "{:<10} {:>10} {:>8} {:>9} {:>8} {:>8} {:>7} {:>6} {:>6}",
        "policy", "replica-h", "SLO %", "p99 TTFT", "dropped", "events", "peak", "/ideal", "/hpa"
    );
    for (name, p) in &report.policies {
        let ratio = |r: Option<f64>| r.map_or_else(|| "-".to_string(), |v| format!("{v:.2}"));
        let _ = writeln!(
            out,
            "{:<10} {:>10.2} {:>8.2} {:>9.2} {:>8} {:>8} {:>7} {:>6} {:>6}",
            name,
            p.replica_hours,
            p.slo_attainment * 100.0,
            p.ttft_p99_seconds,
            p.requests_dropped,
            p.scale_events,
            p.peak_replicas,
            ratio(p.replica_seconds_vs_ideal),
            ratio(p.replica_seconds_vs_hpa),
        );
    }
    if let Some(bound) = report.ideal_with_startup_replica_seconds {
        let _ = writeln!(
            out,
            "ideal's fleet with the start-up time paid: {:.2} replica-h",
            bound / 3600.0
        );
    }
    let _ = writeln!(out, "{}", report.attribution);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn point(t_s: f64, replicas: i32) -> replay::TimelinePoint {
        replay::TimelinePoint {
            t_s,
            replicas,
            ready: replicas,
        }
    }

    #[test]
    fn the_start_up_bound_pays_each_new_replica_its_start_up() {
        // 1 replica 0..100, 3 replicas 100..200, 1 replica 200..300, 3 again 300..400 (end).
        let timeline = [
            point(0.0, 1),
            point(100.0, 3),
            point(200.0, 1),
            point(300.0, 3),
        ];
        // Zero start-up: the ideal's own integral, 1·400 + 2·100 + 2·100 = 800.
        assert!((startup_bound_replica_seconds(&timeline, 0.0, 400.0, 1) - 800.0).abs() < 1e-9);
        // 90 s: levels 2 and 3 pay 90 before the first run and min(100, 90) in the gap.
        let want = 400.0 + 2.0 * (90.0 + 100.0 + 90.0 + 100.0);
        assert!((startup_bound_replica_seconds(&timeline, 90.0, 400.0, 1) - want).abs() < 1e-9);
        // With 3 Ready at 0, levels 2 and 3 start at 0 (min(100, 90) = 90 to keep them
        // instead): the same here.
        assert!((startup_bound_replica_seconds(&timeline, 90.0, 400.0, 3) - want).abs() < 1e-9);
        // A long start-up: keeping replicas through gaps is cheaper (gap 100 < 500).
        let keep = 400.0 + 2.0 * (100.0 + 100.0 + 100.0 + 100.0);
        assert!((startup_bound_replica_seconds(&timeline, 500.0, 400.0, 3) - keep).abs() < 1e-9);
        assert_eq!(startup_bound_replica_seconds(&[], 90.0, 400.0, 1), 0.0);
    }
}
