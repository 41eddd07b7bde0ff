//! The command line of `llmscaler backtest` (docs/backtest.md#options) and its checked form.

use std::collections::BTreeMap;
use std::path::PathBuf;

use k8s_openapi::jiff::Timestamp;
use llmscaler_api::LLMScaler;
use llmscaler_loadmodel::Profile;

use super::{BacktestError, MAX_STEPS, comparators, workload};
use crate::simulate::compare::Comparator;

/// Environment variable holding header lines (`Name: value`, one per line) sent to Prometheus
/// besides `--header-file`'s; never echoed.
pub const HEADERS_ENV: &str = "LLMSCALER_BACKTEST_HEADERS";

/// Most header lines read from a header file or [`HEADERS_ENV`].
const MAX_HEADERS: usize = 32;

/// Largest header file read, bytes.
const MAX_HEADER_FILE_BYTES: u64 = 64 * 1024;

/// Command-line arguments of `llmscaler backtest`.
#[derive(clap::Args, Debug, Clone)]
pub struct BacktestArgs {
    /// Prometheus base URL, e.g. `http://127.0.0.1:9090` through `kubectl port-forward`, or the
    /// API server's service proxy URL.
    #[arg(long)]
    pub prometheus: String,
    /// The LLMScaler manifest to backtest (its queries run in the replay; its namespace is the
    /// default `--selector`).
    #[arg(long)]
    pub scaler: PathBuf,
    /// PromQL label matchers choosing one vLLM workload, e.g. `namespace="prod",app="vllm"`;
    /// default `namespace="<the scaler's namespace>"`. Exactly one (namespace, model_name) must
    /// match.
    #[arg(long)]
    pub selector: Option<String>,
    /// The Deployment whose `kube_deployment_spec_replicas` is the replica history; default the
    /// scaler's `targetRef.name`.
    #[arg(long)]
    pub deployment: Option<String>,
    /// How far back from now: `7d`, `36h`, `90m`, `3600s`, `2w`.
    #[arg(long, conflicts_with_all = ["from", "to"])]
    pub since: Option<String>,
    /// Range start (RFC 3339), with `--to`.
    #[arg(long, requires = "to")]
    pub from: Option<Timestamp>,
    /// Range end (RFC 3339), with `--from`.
    #[arg(long, requires = "from")]
    pub to: Option<Timestamp>,
    /// Step of the history: `60s`, `1m`, … (at least the scrape interval).
    #[arg(long, default_value = "60s")]
    pub step: String,
    /// A file of header lines (`Name: value`) sent to Prometheus (e.g. `Authorization: Bearer
    /// …`); values are never printed. `LLMSCALER_BACKTEST_HEADERS` may hold more lines.
    #[arg(long, env = "LLMSCALER_BACKTEST_HEADER_FILE")]
    pub header_file: Option<PathBuf>,
    /// Seconds one Prometheus request may take.
    #[arg(long, default_value_t = 30.0)]
    pub timeout_seconds: f64,
    /// The load model's per-replica parameters (YAML/JSON profile, docs/load-model.md).
    #[arg(long)]
    pub model: Option<PathBuf>,
    /// Comparators: any of hpa,keda,ideal,static ("as it ran" always runs).
    #[arg(long, default_value = "hpa,keda,ideal,static")]
    pub compare: String,
    /// Seconds an added replica takes to become ready.
    #[arg(long, default_value_t = 90.0)]
    pub startup_seconds: f64,
    /// The TTFT objective, seconds.
    #[arg(long, default_value_t = 2.0)]
    pub slo_ttft_seconds: f64,
    /// The replay's Prometheus scrape interval, seconds.
    #[arg(long, default_value_t = 15.0)]
    pub scrape_interval_seconds: f64,
    /// Seconds a deleted pod keeps serving what it holds in the replay.
    #[arg(long, default_value_t = 0.0)]
    pub termination_grace_seconds: f64,
    /// The replayed Deployment's pod template does not state `--max-num-seqs` (by default it
    /// states the profile's `maxNumSeqs`, which `spec.objective` takes for its batch limit), as
    /// in `simulate --requests`.
    #[arg(long)]
    pub unstated_max_num_seqs: bool,
    /// Seed of the rebuilt trace.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Mean size of the clusters arrivals come in below the step (1 = Poisson); default
    /// estimated from the arrivals' Allan factors (docs/backtest.md#what-it-assumes).
    #[arg(long)]
    pub cluster_mean: Option<f64>,
    /// Price of one GPU-hour (any currency), for the cost column.
    #[arg(long)]
    pub price_per_gpu_hour: Option<f64>,
    /// GPUs per replica.
    #[arg(long, default_value_t = 1.0)]
    pub gpus_per_replica: f64,
    /// Write the report JSON here.
    #[arg(long)]
    pub report: Option<PathBuf>,
    /// Write the rebuilt trace here (Azure format, for `simulate --requests`).
    #[arg(long)]
    pub trace_out: Option<PathBuf>,
    /// No progress line on stderr.
    #[arg(long)]
    pub quiet: bool,
}

/// The checked arguments.
#[derive(Clone, Debug)]
pub(crate) struct Settings {
    pub(crate) prometheus: String,
    pub(crate) headers: BTreeMap<String, String>,
    pub(crate) timeout_seconds: f64,
    pub(crate) selector: String,
    pub(crate) deployment: String,
    /// Unix seconds, aligned down to the step.
    pub(crate) from: i64,
    /// Unix seconds, `from` + a whole number of steps.
    pub(crate) to: i64,
    /// Seconds.
    pub(crate) step: i64,
    pub(crate) profile: Option<Profile>,
    pub(crate) compare: Vec<Comparator>,
    pub(crate) startup_seconds: f64,
    pub(crate) slo_ttft_seconds: f64,
    pub(crate) scrape_interval_seconds: f64,
    pub(crate) termination_grace_seconds: f64,
    pub(crate) state_max_num_seqs: bool,
    pub(crate) seed: u64,
    pub(crate) cluster_mean: Option<f64>,
    pub(crate) price_per_gpu_hour: Option<f64>,
    pub(crate) gpus_per_replica: f64,
    pub(crate) progress: bool,
}

/// Seconds of a duration such as `90s`, `15m`, `36h`, `7d`, `2w` (a bare number is seconds).
pub(crate) fn duration_seconds(text: &str) -> Option<i64> {
    let text = text.trim();
    let split = text
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(text.len());
    let (number, unit) = text.split_at(split);
    let n: i64 = number.parse().ok()?;
    let unit = match unit {
        "" | "s" => 1,
        "m" => 60,
        "h" => 3600,
        "d" => 86_400,
        "w" => 604_800,
        _ => return None,
    };
    n.checked_mul(unit).filter(|s| *s > 0)
}

/// Header lines `Name: value` of `text`; `origin` names the file or variable in errors (never a
/// value).
pub(crate) fn parse_headers(
    text: &str,
    origin: &str,
    into: &mut BTreeMap<String, String>,
) -> Result<(), BacktestError> {
    for (i, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let Some((name, value)) = line.split_once(':') else {
            return Err(BacktestError::Invalid(format!(
                "{origin} line {}: expected `Name: value`",
                i + 1
            )));
        };
        into.insert(name.trim().to_owned(), value.trim().to_owned());
        if into.len() > MAX_HEADERS {
            return Err(BacktestError::Invalid(format!(
                "{origin}: more than {MAX_HEADERS} headers"
            )));
        }
    }
    Ok(())
}

impl Settings {
    /// Checks `args` against `scaler`; `now` ends a `--since` range.
    pub(crate) fn from_args(
        args: &BacktestArgs,
        scaler: &LLMScaler,
        now: Timestamp,
    ) -> Result<Self, BacktestError> {
        let invalid = |m: &str| BacktestError::Invalid(m.to_owned());
        let step = duration_seconds(&args.step)
            .ok_or_else(|| invalid("--step must be a duration such as 60s, 1m or 5m"))?;
        let (from, to) = match (&args.since, args.from, args.to) {
            (Some(since), None, None) => {
                let back = duration_seconds(since).ok_or_else(|| {
                    invalid("--since must be a duration such as 7d, 36h, 90m or 3600s")
                })?;
                let to = now.as_second();
                (to - back, to)
            }
            (None, Some(from), Some(to)) => (from.as_second(), to.as_second()),
            _ => return Err(invalid("give --since, or --from and --to")),
        };
        let from = from.div_euclid(step) * step;
        let steps = (to - from) / step;
        if steps < 2 {
            return Err(invalid("the range must hold at least two steps"));
        }
        if steps > MAX_STEPS {
            return Err(BacktestError::Invalid(format!(
                "the range holds {steps} steps, more than the limit of {MAX_STEPS}: use a longer \
                 --step or a shorter range"
            )));
        }
        let positive = |v: f64| v.is_finite() && v > 0.0;
        let non_negative = |v: f64| v.is_finite() && v >= 0.0;
        if !positive(args.timeout_seconds) {
            return Err(invalid("--timeout-seconds must be positive"));
        }
        if !positive(args.slo_ttft_seconds) || !positive(args.scrape_interval_seconds) {
            return Err(invalid(
                "--slo-ttft-seconds and --scrape-interval-seconds must be positive",
            ));
        }
        if !non_negative(args.startup_seconds) || !non_negative(args.termination_grace_seconds) {
            return Err(invalid(
                "--startup-seconds and --termination-grace-seconds must be 0 or more",
            ));
        }
        if args
            .cluster_mean
            .is_some_and(|m| !(m.is_finite() && m >= 1.0))
        {
            return Err(invalid("--cluster-mean must be 1 or more"));
        }
        if !positive(args.gpus_per_replica) {
            return Err(invalid("--gpus-per-replica must be positive"));
        }
        if args.price_per_gpu_hour.is_some_and(|p| !non_negative(p)) {
            return Err(invalid("--price-per-gpu-hour must be 0 or more"));
        }
        let selector = match &args.selector {
            Some(s) => s.clone(),
            None => scaler
                .metadata
                .namespace
                .as_deref()
                .map(|ns| format!("namespace=\"{}\"", workload::escape(ns)))
                .unwrap_or_default(),
        };
        workload::check_selector(&selector)?;
        let mut headers = BTreeMap::new();
        if let Some(path) = &args.header_file {
            let shown = path.display().to_string();
            let meta = std::fs::metadata(path).map_err(|e| {
                BacktestError::Invalid(format!("cannot read --header-file {shown}: {e}"))
            })?;
            if meta.len() > MAX_HEADER_FILE_BYTES {
                return Err(BacktestError::Invalid(format!(
                    "--header-file {shown} is larger than {MAX_HEADER_FILE_BYTES} bytes"
                )));
            }
            let text = std::fs::read_to_string(path).map_err(|e| {
                BacktestError::Invalid(format!("cannot read --header-file {shown}: {e}"))
            })?;
            parse_headers(&text, &format!("--header-file {shown}"), &mut headers)?;
        }
        if let Ok(text) = std::env::var(HEADERS_ENV) {
            parse_headers(&text, HEADERS_ENV, &mut headers)?;
        }
        let profile = args
            .model
            .as_deref()
            .map(Profile::from_file)
            .transpose()
            .map_err(|e| BacktestError::Invalid(e.to_string()))?;
        Ok(Self {
            prometheus: args.prometheus.clone(),
            headers,
            timeout_seconds: args.timeout_seconds,
            selector,
            deployment: args
                .deployment
                .clone()
                .unwrap_or_else(|| scaler.spec.target_ref.name.clone()),
            from,
            to: from + steps * step,
            step,
            profile,
            compare: comparators(&args.compare)?,
            startup_seconds: args.startup_seconds,
            slo_ttft_seconds: args.slo_ttft_seconds,
            scrape_interval_seconds: args.scrape_interval_seconds,
            termination_grace_seconds: args.termination_grace_seconds,
            state_max_num_seqs: !args.unstated_max_num_seqs,
            seed: args.seed,
            cluster_mean: args.cluster_mean,
            price_per_gpu_hour: args.price_per_gpu_hour,
            gpus_per_replica: args.gpus_per_replica,
            progress: !args.quiet,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_and_headers_parse() {
        assert_eq!(duration_seconds("7d"), Some(604_800));
        assert_eq!(duration_seconds("90m"), Some(5400));
        assert_eq!(duration_seconds("60"), Some(60));
        assert_eq!(duration_seconds("0s"), None);
        assert_eq!(duration_seconds("7y"), None);
        let mut h = BTreeMap::new();
        parse_headers("# c\nAuthorization: Bearer s3cret\n\n", "f", &mut h).unwrap();
        assert_eq!(
            h.get("Authorization").map(String::as_str),
            Some("Bearer s3cret")
        );
        let err = parse_headers("Bearer s3cret", "f", &mut h)
            .unwrap_err()
            .to_string();
        assert!(err.contains("f line 1") && !err.contains("s3cret"), "{err}");
    }
}
