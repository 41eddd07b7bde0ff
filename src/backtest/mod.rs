//! `llmscaler backtest` (docs/backtest.md): "what would it have saved on my traffic?" from a
//! cluster's own Prometheus history. It reads one vLLM workload's arrivals, request sizes,
//! replica counts and TTFT over a range ([`query`], [`series`], [`workload`]), rebuilds a seeded
//! request trace ([`rebuild`]), replays it through the load model with the scaler, the
//! comparators and "as it ran" (the observed replica history as a fixed schedule), exactly as
//! `simulate --requests` does ([`crate::simulate::compare`]), and prints the table with
//! GPU-hours, cost and a validation line ([`report`]).

mod args;
mod query;
mod rebuild;
mod report;
mod series;
mod workload;

use std::collections::BTreeMap;
use std::process::ExitCode;

use k8s_openapi::jiff::Timestamp;
use llmscaler_api::{LLMScaler, OperatorPolicy};
use llmscaler_loadmodel::Request;

pub use args::BacktestArgs;
pub use report::{BacktestReport, Observed};

use crate::metrics::{Endpoint, MetricError, MetricsClient};
use crate::process::fail;
use crate::scaler_file::{ScalerFileError, load_scaler};
use crate::simulate::compare::{self, Comparator, Extras, Schedule};
use query::{Reader, Series};
use rebuild::{Plan, Sizes};
use series::Grid;
use workload::Workload;

/// Most steps a range may have (a week at a 6 s step; docs/backtest.md#limits).
pub const MAX_STEPS: i64 = 100_800;

/// Most requests the rebuilt trace may hold (docs/backtest.md#limits).
pub const MAX_REQUESTS: u64 = 30_000_000;

/// Most points all the series of one query may hold together (docs/backtest.md#limits).
pub const MAX_POINTS: usize = 20_000_000;

/// Exit status for invalid arguments or a refused selector / range.
pub const EXIT_INVALID: u8 = 2;
/// Exit status when Prometheus could not be read or answered something unusable.
pub const EXIT_FAILURE: u8 = 1;

/// Seconds of the windows the size histograms are read over (one distribution per window).
const SIZE_WINDOW_S: i64 = 3600;

/// Why a backtest could not run. Messages name the query, the server or the argument; never a
/// header value.
#[derive(Debug, thiserror::Error)]
pub enum BacktestError {
    /// An argument is invalid.
    #[error("{0}")]
    Invalid(String),
    /// The `--selector` is not label matchers.
    #[error("--selector `{selector}` is not PromQL label matchers: {reason}")]
    Selector {
        /// The selector as given.
        selector: String,
        /// The parser's message or the rule.
        reason: String,
    },
    /// No vLLM workload has series under the selector in the range.
    #[error(
        "no vLLM workload matches --selector `{selector}` in the range (no \
         vllm:request_prompt_tokens_count series): check the selector, the range and that \
         Prometheus scrapes vLLM's /metrics"
    )]
    NoWorkload {
        /// The selector.
        selector: String,
    },
    /// Several workloads match.
    #[error(
        "--selector `{selector}` matches {count} workloads, one is needed (add namespace= and \
         model_name= matchers): {listed}"
    )]
    SeveralWorkloads {
        /// The selector.
        selector: String,
        /// How many matched.
        count: usize,
        /// The first ones, `namespace=… model_name=…`.
        listed: String,
    },
    /// A value that cannot be what the query reads.
    #[error("query `{query}` returned {value} at {time} (Unix seconds): {why}")]
    BadValue {
        /// The query.
        query: String,
        /// Unix seconds of the sample.
        time: i64,
        /// The value.
        value: f64,
        /// The rule it breaks.
        why: &'static str,
    },
    /// A query returned more series than the limit.
    #[error(
        "query `{query}` returned {count} series, more than the limit of {}: narrow --selector",
        query::MAX_SERIES
    )]
    TooManySeries {
        /// The query.
        query: String,
        /// Series seen when reading stopped.
        count: usize,
    },
    /// A query's series hold more points together than the limit.
    #[error(
        "query `{query}` holds {points} points over the range, more than the limit of {}: use a \
         longer --step or a shorter range",
        MAX_POINTS
    )]
    TooManyPoints {
        /// The query.
        query: String,
        /// Points read when reading stopped.
        points: usize,
    },
    /// A required metric has no data.
    #[error("{what}: query `{query}` returned no data in the range")]
    Missing {
        /// What it was read for.
        what: &'static str,
        /// The query.
        query: String,
    },
    /// Reading Prometheus failed.
    #[error(transparent)]
    Metric(#[from] MetricError),
}

impl BacktestError {
    /// The exit status: [`EXIT_INVALID`] for arguments and selectors, [`EXIT_FAILURE`] else.
    pub fn exit_code(&self) -> u8 {
        match self {
            BacktestError::Invalid(_)
            | BacktestError::Selector { .. }
            | BacktestError::NoWorkload { .. }
            | BacktestError::SeveralWorkloads { .. } => EXIT_INVALID,
            BacktestError::BadValue { .. }
            | BacktestError::TooManySeries { .. }
            | BacktestError::TooManyPoints { .. }
            | BacktestError::Missing { .. }
            | BacktestError::Metric(_) => EXIT_FAILURE,
        }
    }
}

/// Runs `llmscaler backtest` and prints its report; the exit status is 0, or
/// [`EXIT_INVALID`] / [`EXIT_FAILURE`] with the error on stderr.
pub fn run(args: &BacktestArgs) -> ExitCode {
    let scaler = match load_scaler(&args.scaler) {
        Ok(scaler) => scaler,
        Err(err @ ScalerFileError::Invalid { .. }) => return fail(EXIT_INVALID, &err.to_string()),
        Err(err) => return fail(EXIT_FAILURE, &err.to_string()),
    };
    let settings = match args::Settings::from_args(args, &scaler, Timestamp::now()) {
        Ok(s) => s,
        Err(err) => return fail(err.exit_code(), &err.to_string()),
    };
    let runtime = match crate::process::runtime() {
        Ok(r) => r,
        Err(err) => return fail(EXIT_FAILURE, &format!("cannot start the runtime: {err}")),
    };
    let report = match runtime.block_on(backtest(&scaler, &settings)) {
        Ok(r) => r,
        Err(err) => return fail(err.exit_code(), &err.to_string()),
    };
    print!("{}", report::text(&report.0));
    for unmatched in &report.0.replay.unmatched_queries {
        eprintln!("{}", unmatched.warning(&report.0.replay.model_name));
    }
    if let Some(path) = &args.report {
        let json = match serde_json::to_string_pretty(&report.0) {
            Ok(j) => j,
            Err(err) => return fail(EXIT_FAILURE, &format!("encoding the report: {err}")),
        };
        if let Err(err) = std::fs::write(path, json + "\n") {
            return fail(
                EXIT_FAILURE,
                &format!("cannot write {}: {err}", path.display()),
            );
        }
    }
    if let Some(path) = &args.trace_out
        && let Err(err) = write_trace(path, report.2, &report.1)
    {
        return fail(
            EXIT_FAILURE,
            &format!("cannot write {}: {err}", path.display()),
        );
    }
    ExitCode::SUCCESS
}

/// The rebuilt trace in the Azure format (`TIMESTAMP,ContextTokens,GeneratedTokens`, UTC
/// times from `start`, Unix seconds), which `simulate --requests` reads.
fn write_trace(path: &std::path::Path, start: i64, trace: &[Request]) -> std::io::Result<()> {
    use std::io::Write as _;
    let mut out = std::io::BufWriter::new(std::fs::File::create(path)?);
    writeln!(out, "TIMESTAMP,ContextTokens,GeneratedTokens")?;
    for r in trace {
        let at = start as f64 + r.arrival_s;
        let whole = at.floor();
        #[allow(clippy::cast_possible_truncation)]
        let secs = whole as i64;
        let (d, rem) = (secs / 86_400, secs % 86_400);
        let (y, m, day) = civil_from_days(d);
        writeln!(
            out,
            "{y:04}-{m:02}-{day:02} {:02}:{:02}:{:09.6},{},{}",
            rem / 3600,
            rem % 3600 / 60,
            (rem % 60) as f64 + (at - whole),
            r.prompt_tokens,
            r.output_tokens
        )?;
    }
    out.flush()
}

/// Howard Hinnant's civil-from-days: days since 1970-01-01 to (year, month, day).
fn civil_from_days(z: i64) -> (i64, i64, i64) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let y = yoe + era * 400;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    (if m <= 2 { y + 1 } else { y }, m, d)
}

fn rfc3339(t: i64) -> String {
    Timestamp::from_second(t).map_or_else(|_| t.to_string(), |ts| ts.to_string())
}

/// Reads the history and runs the replay; returns the report, the rebuilt trace and its start
/// (Unix seconds).
async fn backtest(
    scaler: &LLMScaler,
    s: &args::Settings,
) -> Result<(BacktestReport, Vec<Request>, i64), BacktestError> {
    let policy = OperatorPolicy {
        // The user runs this against their own Prometheus: a tenancy header is theirs to send.
        allow_tenant_header: true,
        ..OperatorPolicy::default()
    };
    let client = MetricsClient::with_policy(policy.clone())?;
    let endpoint = Endpoint::new(&s.prometheus, &s.headers, &policy)?
        .with_timeout(std::time::Duration::from_secs_f64(s.timeout_seconds));
    let reader = Reader::new(client, endpoint, s.progress);
    let grid = Grid {
        start: s.from,
        step: s.step,
        steps: usize::try_from((s.to - s.from) / s.step).unwrap_or(0),
    };
    let range_s = s.to - s.from;

    // The workload.
    let lookup = format!(
        "count by (namespace, model_name) (last_over_time({}{{{}}}[{range_s}s]))",
        workload::PROBE_METRIC,
        s.selector
    );
    let found = reader.instant(&lookup, s.to).await?;
    let chosen: Workload = workload::pick(&s.selector, &found)?;
    let sel = chosen.matchers(&s.selector);

    // Arrivals: exact increases of the prompt histogram's count, per pod.
    let counts_q = format!("{}{{{sel}}}", workload::PROBE_METRIC);
    let raw = read_range(&reader, "arrivals", &counts_q, grid, s.step).await?;
    let counts = series::increases(&counts_q, &raw, grid)?;
    drop(raw);
    let cover_q = format!(
        "sum(count_over_time({}{{{sel}}}[{}ms]))",
        workload::PROBE_METRIC,
        window_ms(s.step)
    );
    let cover = read_range(&reader, "coverage", &cover_q, grid, s.step).await?;
    let covered = series::covered(&cover, grid);

    // Replicas: kube-state-metrics when present, else the pods scraped.
    let deployment = workload::escape(&s.deployment);
    let ns = workload::escape(&chosen.namespace);
    let spec_q = format!(
        "max(kube_deployment_spec_replicas{{namespace=\"{ns}\",deployment=\"{deployment}\"}})"
    );
    let spec = read_range(&reader, "replicas", &spec_q, grid, s.step).await?;
    let (replicas, replica_source) = match series::gauge(&spec_q, &spec, grid)? {
        Some(r) => (
            r,
            format!("kube_deployment_spec_replicas of {}", s.deployment),
        ),
        None => {
            let pods_q = format!(
                "count(count by (pod) (count_over_time({}{{{sel}}}[{}ms])))",
                workload::PROBE_METRIC,
                window_ms(s.step)
            );
            let pods = read_range(&reader, "pods", &pods_q, grid, s.step).await?;
            match series::gauge(&pods_q, &pods, grid)? {
                Some(r) => (
                    r,
                    "count of scraped pods (no kube_deployment_spec_replicas)".to_owned(),
                ),
                None => {
                    return Err(BacktestError::Missing {
                        what: "replica counts",
                        query: pods_q,
                    });
                }
            }
        }
    };
    let ready_q = format!(
        "max(kube_deployment_status_replicas_ready{{namespace=\"{ns}\",deployment=\"{deployment}\"}})"
    );
    let ready_raw = read_range(&reader, "ready replicas", &ready_q, grid, s.step).await?;
    let ready = series::gauge(&ready_q, &ready_raw, grid)?;

    // Per-step replicas (the value at each window's start) and gaps.
    let per_step: Vec<f64> = replicas.iter().take(grid.steps).copied().collect();
    let (spread, gaps) = series::spread_gaps(&counts, &covered, Some(&per_step));
    let kept = gaps.leading..grid.steps - gaps.trailing;
    if spread.is_empty() {
        return Err(BacktestError::Missing {
            what: "arrivals",
            query: cover_q,
        });
    }
    let total: f64 = spread.iter().sum();
    if total > MAX_REQUESTS as f64 {
        return Err(BacktestError::Invalid(format!(
            "the range holds {total:.0} requests, more than the limit of {MAX_REQUESTS}: use a \
             shorter range"
        )));
    }
    let (allan_1, allan_2, dispersion) = series::dispersion(&spread);
    let cluster_mean = s
        .cluster_mean
        .unwrap_or_else(|| rebuild::cluster_mean(dispersion));

    // Sizes: one distribution per hour-long window.
    let (prompt_sizes, prompt_mean) =
        read_sizes(&reader, "vllm:request_prompt_tokens", &sel, s).await?;
    let (output_sizes, output_mean) =
        read_sizes(&reader, "vllm:request_generation_tokens", &sel, s).await?;
    let window_of = |k: usize| -> usize {
        let t = grid.at(kept.start + k) - s.from;
        usize::try_from(t / SIZE_WINDOW_S).unwrap_or(0)
    };
    let sizes = |k: usize| {
        let w = window_of(k);
        Some((nearest(&prompt_sizes, w)?, nearest(&output_sizes, w)?))
    };
    let step_s = s.step as f64;
    let trace = rebuild::rebuild(&Plan {
        counts: &spread,
        step_s,
        cluster_mean,
        sizes: &sizes,
        seed: s.seed,
    });

    // TTFT as the fleet saw it.
    let ttft_q = format!(
        "sum by (le) (increase(vllm:time_to_first_token_seconds_bucket{{{sel}}}[{range_s}s]))"
    );
    let ttft = reader.instant(&ttft_q, s.to).await?;
    let ttft_attainment = report::attainment(&buckets(&ttft), s.slo_ttft_seconds);

    // The replay.
    let kept_replicas: Vec<i32> = per_step[kept.clone()]
        .iter()
        .map(|r| {
            #[allow(clippy::cast_possible_truncation)]
            let n = r.round().clamp(0.0, f64::from(i32::MAX)) as i32;
            n
        })
        .collect();
    let span_s = step_s * kept_replicas.len() as f64;
    let last = trace.last().map_or(0.0, |r| r.arrival_s);
    let options = compare::Options {
        startup_seconds: s.startup_seconds,
        slo_ttft_seconds: s.slo_ttft_seconds,
        scrape_interval_seconds: s.scrape_interval_seconds,
        initial_replicas: kept_replicas.first().copied(),
        compare: s.compare.clone(),
        tail_seconds: (span_s - last).max(0.0),
        termination_grace_seconds: s.termination_grace_seconds,
        comparators_scaler: None,
        model_name: Some(chosen.model_name.clone()),
        state_max_num_seqs: s.state_max_num_seqs,
    };
    let extras = Extras {
        profile: s.profile,
        schedules: vec![Schedule {
            name: report::AS_IT_RAN.to_owned(),
            period_ms: s.step * 1000,
            replicas: kept_replicas.clone(),
        }],
    };
    let mut replay = compare::run_with(scaler, &trace, &options, 1.0, s.seed, &extras)
        .map_err(|e| BacktestError::Invalid(e.to_string()))?;
    replay.attribution = format!(
        "Trace: rebuilt (seed {}) from the history of {} on {}",
        s.seed,
        chosen.model_name,
        reader.shown()
    );
    let hours = |v: &[f64]| v[kept.clone()].iter().sum::<f64>() * step_s / 3600.0;
    let observed = Observed {
        replica_hours: hours(&per_step),
        ready_replica_hours: ready.map(|r| hours(&r[..grid.steps])),
        replica_source,
        ttft_attainment,
        requests: trace.len() as u64,
        mean_prompt_tokens: prompt_mean,
        mean_output_tokens: output_mean,
        allan_factors: (allan_1, allan_2),
        dispersion,
        cluster_mean,
        gaps: gaps
            .inside
            .iter()
            .map(|(k, n)| (rfc3339(grid.at(*k)), *n))
            .collect(),
        cut_steps: (gaps.leading, gaps.trailing),
    };
    let mut out = BacktestReport {
        server: reader.shown(),
        workload: (chosen.namespace.clone(), chosen.model_name.clone()),
        range: (
            rfc3339(grid.at(kept.start)),
            rfc3339(grid.at(kept.end)),
            s.step,
        ),
        gpus_per_replica: s.gpus_per_replica,
        price_per_gpu_hour: s.price_per_gpu_hour,
        observed,
        replay,
        validation_warning: false,
    };
    out.validation_warning = report::misfit(&out);
    Ok((out, trace, grid.at(kept.start)))
}

/// A range selector's length for "a sample in `(t − step, t]`": one millisecond short of the
/// step, since Prometheus 2 includes the left end of a range and Prometheus 3 does not.
fn window_ms(step: i64) -> i64 {
    step * 1000 - 1
}

/// The distribution of window `w`, else the nearest one before it, else after it.
fn nearest(all: &BTreeMap<usize, Sizes>, w: usize) -> Option<&Sizes> {
    all.get(&w)
        .or_else(|| all.range(..w).next_back().map(|e| e.1))
        .or_else(|| all.range(w..).next().map(|e| e.1))
}

/// A range query over the grid, with the points limit.
async fn read_range(
    reader: &Reader,
    what: &str,
    query: &str,
    grid: Grid,
    step: i64,
) -> Result<Vec<Series>, BacktestError> {
    let series = reader
        .range(what, query, grid.start, grid.at(grid.steps), step)
        .await?;
    let points: usize = series.iter().map(|s| s.points.len()).sum();
    if points > MAX_POINTS {
        return Err(BacktestError::TooManyPoints {
            query: query.to_owned(),
            points,
        });
    }
    Ok(series)
}

/// `(le, value)` of a `sum by (le)` answer's last points.
fn buckets(series: &[Series]) -> Vec<(f64, f64)> {
    series
        .iter()
        .filter_map(|s| {
            let le = s.labels.get("le")?;
            let le: f64 = if le == "+Inf" {
                f64::INFINITY
            } else {
                le.parse().ok()?
            };
            Some((le, s.points.last()?.1))
        })
        .collect()
}

/// The size distribution of `histogram` per [`SIZE_WINDOW_S`] window (index from the range
/// start), each with its exact mean, and the mean over the range.
async fn read_sizes(
    reader: &Reader,
    histogram: &'static str,
    sel: &str,
    s: &args::Settings,
) -> Result<(BTreeMap<usize, Sizes>, f64), BacktestError> {
    let window = SIZE_WINDOW_S.min(s.to - s.from).max(s.step);
    let grid = Grid {
        start: s.from,
        step: window,
        steps: usize::try_from((s.to - s.from) / window).unwrap_or(0),
    };
    let bucket_q = format!("sum by (le) (increase({histogram}_bucket{{{sel}}}[{window}s]))");
    let sum_q = format!("sum(increase({histogram}_sum{{{sel}}}[{window}s]))");
    let count_q = format!("sum(increase({histogram}_count{{{sel}}}[{window}s]))");
    let end = grid.at(grid.steps);
    let what = histogram.trim_start_matches("vllm:");
    let b = reader.range(what, &bucket_q, s.from, end, window).await?;
    let sums = reader.range(what, &sum_q, s.from, end, window).await?;
    let cnts = reader.range(what, &count_q, s.from, end, window).await?;
    let at = |series: &[Series]| -> BTreeMap<i64, f64> {
        series
            .iter()
            .flat_map(|s| s.points.iter().copied())
            .filter(|(_, v)| v.is_finite() && *v >= 0.0)
            .collect()
    };
    let (sums, cnts) = (at(&sums), at(&cnts));
    let mut per_time: BTreeMap<i64, Vec<(f64, f64)>> = BTreeMap::new();
    for series in &b {
        let Some(le) = buckets(std::slice::from_ref(series)).first().map(|p| p.0) else {
            continue;
        };
        for &(t, v) in &series.points {
            per_time.entry(t).or_default().push((le, v));
        }
    }
    let mut out = BTreeMap::new();
    let (mut all_sum, mut all_count) = (0.0, 0.0);
    for (t, cumulative) in &per_time {
        if *t <= s.from {
            continue;
        }
        let (Some(sum), Some(count)) = (sums.get(t), cnts.get(t)) else {
            continue;
        };
        if *count <= 0.0 {
            continue;
        }
        if let Some(sizes) = Sizes::from_cumulative(cumulative, sum / count) {
            let index = usize::try_from((t - s.from - window).max(0) / window).unwrap_or(0);
            out.insert(index, sizes);
            all_sum += sum;
            all_count += count;
        }
    }
    if out.is_empty() {
        return Err(BacktestError::Missing {
            what: "request sizes",
            query: bucket_q,
        });
    }
    Ok((out, all_sum / all_count))
}

/// The parsed `--compare` list.
pub(crate) fn comparators(text: &str) -> Result<Vec<Comparator>, BacktestError> {
    Comparator::parse_list(text).map_err(BacktestError::Invalid)
}
