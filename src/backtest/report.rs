//! The backtest's report (docs/backtest.md#the-report): the table of `simulate --requests` for
//! every policy, GPU-hours and cost, what the history itself shows, and the validation line
//! comparing "as it ran" replayed with what the fleet saw.

use std::fmt::Write;

use serde::Serialize;

use crate::simulate::compare::{self, Report};

/// The report key of the observed replica history replayed as a fixed schedule.
pub(crate) const AS_IT_RAN: &str = "as it ran";

/// Relative difference above which the validation warns (0..1).
pub(crate) const VALIDATION_TOLERANCE: f64 = 0.10;

/// What the history itself shows.
#[derive(Clone, Debug, Serialize)]
pub struct Observed {
    /// `spec.replicas` integrated over the range, replica-hours.
    pub replica_hours: f64,
    /// Ready replicas integrated over the range, replica-hours (when the ready series exists).
    pub ready_replica_hours: Option<f64>,
    /// Where the replica counts came from (`kube_deployment_spec_replicas` or scraped pods).
    pub replica_source: String,
    /// Share (0..1) of the TTFT histogram's observations at or below the objective
    /// (interpolated inside the bucket holding it, as `histogram_quantile` does).
    pub ttft_attainment: Option<f64>,
    /// Requests counted.
    pub requests: u64,
    /// Mean prompt length, tokens.
    pub mean_prompt_tokens: f64,
    /// Mean output length, tokens.
    pub mean_output_tokens: f64,
    /// Allan factors of the arrivals at one and two steps (1 = Poisson).
    pub allan_factors: (f64, f64),
    /// Dispersion below the step, extrapolated from them (1 = Poisson).
    pub dispersion: f64,
    /// Mean size of the clusters of arrivals the rebuilt trace uses, requests.
    pub cluster_mean: f64,
    /// Inside gaps (steps without a sample) as `(start RFC 3339, steps)`.
    pub gaps: Vec<(String, usize)>,
    /// Steps cut at the start and the end of the range (no sample).
    pub cut_steps: (usize, usize),
}

/// The whole backtest report (`--report` JSON).
#[derive(Clone, Debug, Serialize)]
pub struct BacktestReport {
    /// The server read (no credentials).
    pub server: String,
    /// The workload: `namespace` and `model_name`.
    pub workload: (String, String),
    /// Range start and end (RFC 3339) and step, seconds.
    pub range: (String, String, i64),
    /// GPUs per replica.
    pub gpus_per_replica: f64,
    /// Price per GPU-hour (`None` without `--price-per-gpu-hour`).
    pub price_per_gpu_hour: Option<f64>,
    /// What the history shows.
    pub observed: Observed,
    /// The replay of every policy.
    pub replay: Report,
    /// Whether the validation warned (the model does not fit the fleet).
    pub validation_warning: bool,
}

/// Share of observations at or below `slo` in cumulative `(le, count)` buckets, interpolated
/// linearly inside the bucket holding it; `None` without observations.
pub(crate) fn attainment(cumulative: &[(f64, f64)], slo: f64) -> Option<f64> {
    let mut b: Vec<(f64, f64)> = cumulative
        .iter()
        .copied()
        .filter(|(le, c)| !le.is_nan() && c.is_finite())
        .collect();
    b.sort_by(|x, y| x.0.total_cmp(&y.0));
    let total = b.last().map(|x| x.1)?;
    if total <= 0.0 {
        return None;
    }
    let (mut lo, mut below) = (0.0, 0.0);
    for (le, count) in b {
        if slo <= le {
            if !le.is_finite() {
                return Some((below / total).clamp(0.0, 1.0));
            }
            let part = if le > lo { (slo - lo) / (le - lo) } else { 1.0 };
            return Some(((below + (count - below) * part) / total).clamp(0.0, 1.0));
        }
        lo = le;
        below = count;
    }
    Some((below / total).clamp(0.0, 1.0))
}

/// Whether "as it ran" replayed differs from the history by more than
/// [`VALIDATION_TOLERANCE`] in replica-hours (relative) or TTFT attainment (points / 100).
pub(crate) fn misfit(report: &BacktestReport) -> bool {
    let Some(ran) = report.replay.policies.get(AS_IT_RAN) else {
        return false;
    };
    let o = &report.observed;
    let hours = o.replica_hours > 0.0
        && ((ran.replica_hours - o.replica_hours) / o.replica_hours).abs() > VALIDATION_TOLERANCE;
    let ttft = o
        .ttft_attainment
        .is_some_and(|a| (ran.slo_attainment - a).abs() > VALIDATION_TOLERANCE);
    hours || ttft
}

/// The report as text: the policy table, GPU-hours and cost, the history and the validation.
pub fn text(report: &BacktestReport) -> String {
    let mut out = String::new();
    let o = &report.observed;
    let _ = writeln!(
        out,
        "backtest of {}/{} on {} from {} to {} (step {} s)",
        report.workload.0,
        report.workload.1,
        report.server,
        report.range.0,
        report.range.1,
        report.range.2
    );
    let _ = writeln!(
        out,
        "history: {} requests, mean prompt {:.0} tokens, mean output {:.0} tokens; \
         arrivals' Allan factor {:.2} at one step, {:.2} at two -> {:.2} below the step -> \
         clusters of {:.2} requests on average",
        o.requests,
        o.mean_prompt_tokens,
        o.mean_output_tokens,
        o.allan_factors.0,
        o.allan_factors.1,
        o.dispersion,
        o.cluster_mean
    );
    if o.gaps.is_empty() && o.cut_steps == (0, 0) {
        let _ = writeln!(out, "gaps: none");
    } else {
        let listed: Vec<String> = o
            .gaps
            .iter()
            .take(10)
            .map(|(at, n)| format!("{at} ({n} steps)"))
            .collect();
        let _ = writeln!(
            out,
            "gaps: {} inside the range (arrivals across each spread over it, not read as zero){}{}; \
             {} steps cut at the start, {} at the end",
            o.gaps.len(),
            if listed.is_empty() { "" } else { ": " },
            listed.join(", "),
            o.cut_steps.0,
            o.cut_steps.1
        );
    }
    out.push_str(&compare::summary(&report.replay));
    let _ = writeln!(out, "{:<10} {:>10} {:>10}", "policy", "GPU-h", "cost");
    let cost = |gpu_h: f64| {
        report
            .price_per_gpu_hour
            .map_or_else(|| "-".to_owned(), |p| format!("{:.2}", gpu_h * p))
    };
    for (name, p) in &report.replay.policies {
        let gpu_h = p.replica_hours * report.gpus_per_replica;
        let _ = writeln!(out, "{name:<10} {gpu_h:>10.2} {:>10}", cost(gpu_h));
    }
    if let Some(bound) = report.replay.ideal_with_startup_replica_seconds {
        let gpu_h = bound / 3600.0 * report.gpus_per_replica;
        let _ = writeln!(
            out,
            "{:<10} {gpu_h:>10.2} {:>10}",
            "ideal+start",
            cost(gpu_h)
        );
    }
    let observed_gpu_h = o.replica_hours * report.gpus_per_replica;
    let _ = writeln!(
        out,
        "{:<10} {observed_gpu_h:>10.2} {:>10}   (history: {})",
        "observed",
        cost(observed_gpu_h),
        o.replica_source
    );
    if let Some(ran) = report.replay.policies.get(AS_IT_RAN) {
        let ran_gpu_h = ran.replica_hours * report.gpus_per_replica;
        let attain = o.ttft_attainment.map_or_else(
            || "no TTFT histogram".to_owned(),
            |a| {
                format!(
                    "TTFT <= {} s: replayed {:.2} % vs observed {:.2} % ({:+.2} points)",
                    report.replay.slo_ttft_seconds,
                    ran.slo_attainment * 100.0,
                    a * 100.0,
                    (ran.slo_attainment - a) * 100.0
                )
            },
        );
        let _ = writeln!(
            out,
            "validation: as it ran replayed {ran_gpu_h:.2} GPU-h vs observed {observed_gpu_h:.2} \
             GPU-h ({:+.1} %); {attain}",
            if observed_gpu_h > 0.0 {
                (ran_gpu_h / observed_gpu_h - 1.0) * 100.0
            } else {
                0.0
            }
        );
    }
    if report.validation_warning {
        let _ = writeln!(
            out,
            "warning: \"as it ran\" differs from the history by more than {} %: the model does not \
             fit this fleet: calibrate (--model FILE, docs/load-model.md)",
            VALIDATION_TOLERANCE * 100.0
        );
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn attainment_interpolates_inside_the_bucket_of_the_objective() {
        let b = [(1.0, 50.0), (2.5, 80.0), (f64::INFINITY, 100.0)];
        // 2 s: 50 + 30 × (1 / 1.5) = 70 of 100.
        assert!((attainment(&b, 2.0).unwrap() - 0.70).abs() < 1e-9);
        assert!((attainment(&b, 1.0).unwrap() - 0.50).abs() < 1e-9);
        assert!((attainment(&b, 100.0).unwrap() - 0.80).abs() < 1e-9);
        assert_eq!(attainment(&[(1.0, 0.0), (f64::INFINITY, 0.0)], 2.0), None);
    }
}
