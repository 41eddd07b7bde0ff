//! `llmscaler probe`: evaluates a scaler's metrics once against its `serverAddress` and prints
//! what each one recommends and the overall recommendation after clamping ("why is it not
//! scaling?").
//!
//! The evaluation is the operator's own step ([`crate::step::Scaler`]) on a fleet of `--ready`
//! replicas, all Ready, with `spec.capacity`'s and `spec.activation`'s queries read as the
//! operator reads them and the schedules active now; stabilization and the step cap need
//! history and are not shown.

pub mod explain;
pub mod live;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::ExitCode;

use crate::process::fail;

use llmscaler_api::{LLMScalerSpec, MetricProvider};
use serde::Serialize;

use crate::engine::{self, Limit};
use crate::metrics::{MetricError, MetricSource, MetricsClient};
use crate::scaler_file::{ScalerFileError, load_scaler};
use crate::step::Scaler;

/// Exit status when a recommendation was made.
pub const EXIT_RECOMMENDATION: u8 = 0;
/// Exit status for an I/O or runtime failure (unreadable file, no HTTP client).
pub const EXIT_FAILURE: u8 = 1;
/// Exit status for an invalid spec (field-path messages on stderr).
pub const EXIT_INVALID: u8 = 2;
/// Exit status when no metric was measurable: the fleet would be held.
pub const EXIT_HOLD: u8 = 3;
/// Exit status when a recommendation was made but at least one metric was skipped (no data,
/// an error, several series): the others decided, the skipped one was not read as 0
/// (docs/troubleshooting.md#probe-exit-statuses).
pub const EXIT_PARTIAL: u8 = 4;

/// The exit status of a probe: [`EXIT_HOLD`] when nothing was measurable, [`EXIT_PARTIAL`] when
/// a recommendation was made without every metric, [`EXIT_RECOMMENDATION`] otherwise.
pub fn exit_status(held: bool, skipped: bool) -> u8 {
    match (held, skipped) {
        (true, _) => EXIT_HOLD,
        (false, true) => EXIT_PARTIAL,
        (false, false) => EXIT_RECOMMENDATION,
    }
}

/// Output format of `probe`.
#[derive(clap::ValueEnum, Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum OutputFormat {
    /// Human-readable lines.
    #[default]
    Text,
    /// `{"metrics": [{"name", "value", "error", "desired"}], "desired", "hold"}`.
    Json,
}

/// Command-line arguments of `llmscaler probe`.
#[derive(clap::Args, Debug, Clone)]
pub struct ProbeArgs {
    /// LLMScaler manifest (YAML or JSON), defaulted and validated like an apply.
    #[arg(long, required_unless_present = "name", conflicts_with = "name")]
    pub scaler: Option<PathBuf>,
    /// Explain a live LLMScaler of the cluster (kubeconfig or in-cluster credentials): its
    /// target, every metric read now, and the engine's steps in order.
    #[arg(long)]
    pub name: Option<String>,
    /// The namespace of `--name`.
    #[arg(short = 'n', long, default_value = "default", requires = "name")]
    pub namespace: String,
    /// With `--name`: read Prometheus through the API server's service proxy when
    /// `serverAddress` is an in-cluster Service (`auto`: when it is not reachable directly).
    #[arg(long, value_enum, default_value_t = live::ProxyMode::Auto, requires = "name")]
    pub via_service_proxy: live::ProxyMode,
    /// With `--name`: the kubeconfig and context to read the cluster through.
    #[command(flatten)]
    pub kube: crate::kubeclient::KubeArgs,
    /// Ready replicas to assume (the ratio's baseline); default `minReplicas`.
    #[arg(long)]
    pub ready: Option<u32>,
    /// `text` or `json`.
    #[arg(long, value_enum, default_value_t = OutputFormat::Text)]
    pub output: OutputFormat,
}

/// One metric's line of the report (one entry named `decision` under the Custom provider).
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct ProbeMetric {
    /// `spec.metrics[i].name`, `metric<i>` when unnamed, or `decision`.
    pub name: String,
    /// The value read (replicas under Custom), when one was.
    pub value: Option<f64>,
    /// Why the metric was skipped (the metric source's or the engine's message).
    pub error: Option<String>,
    /// Replicas this metric alone recommends, before clamping.
    pub desired: Option<i32>,
}

/// What `probe` found. Serializes to the JSON output.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct ProbeReport {
    /// Per metric, in spec order.
    pub metrics: Vec<ProbeMetric>,
    /// Overall recommendation after clamping to `[minReplicas, maxReplicas]`; `None` on hold.
    pub desired: Option<i32>,
    /// True when nothing was measurable: the operator would keep `spec.replicas` as it is.
    pub hold: bool,
    /// Largest per-metric recommendation before clamping (text output only).
    #[serde(skip)]
    pub recommendation: Option<i32>,
    /// The bound that clamped it, if any (text output only).
    #[serde(skip)]
    pub limited: Option<Limit>,
    /// The ready replicas assumed (text output only).
    #[serde(skip)]
    pub ready: i32,
}

impl ProbeReport {
    /// The exit status: [`EXIT_RECOMMENDATION`], [`EXIT_PARTIAL`] (a metric was skipped) or
    /// [`EXIT_HOLD`].
    pub fn exit_code(&self) -> u8 {
        exit_status(self.hold, self.metrics.iter().any(|m| m.error.is_some()))
    }

    /// The report as human-readable lines.
    pub fn to_text(&self, spec: &LLMScalerSpec) -> String {
        let mut out = String::new();
        let provider = match spec.effective_provider() {
            MetricProvider::Prometheus => "Prometheus",
            MetricProvider::Custom => "decision server",
        };
        out.push_str(&format!(
            "{provider} at {}; assuming {} ready replica(s); minReplicas {}, maxReplicas {}\n",
            spec.server_address, self.ready, spec.min_replicas, spec.max_replicas
        ));
        let targets: BTreeMap<String, &str> = spec
            .metrics()
            .iter()
            .enumerate()
            .map(|(i, m)| (m.display_name(i), m.target.as_str()))
            .collect();
        for m in &self.metrics {
            let target = targets
                .get(&m.name)
                .filter(|_| spec.effective_provider() == MetricProvider::Prometheus)
                .map(|t| format!(", target {t}"))
                .unwrap_or_default();
            match (&m.error, m.value, m.desired) {
                (Some(error), _, _) => {
                    out.push_str(&format!("  {}: skipped: {error}\n", m.name));
                }
                (None, Some(value), Some(desired)) => out.push_str(&format!(
                    "  {}: value {value}{target} -> {desired} replica(s)\n",
                    m.name
                )),
                _ => out.push_str(&format!("  {}: no value\n", m.name)),
            }
        }
        match (self.desired, self.recommendation) {
            (Some(desired), Some(raw)) => {
                let clamp = match self.limited {
                    Some(Limit::Max) => format!(" (recommended {raw}, clamped to maxReplicas)"),
                    Some(Limit::Min) => format!(" (recommended {raw}, raised to minReplicas)"),
                    None => String::new(),
                };
                out.push_str(&format!(
                    "desired replicas: {desired}{clamp}; stabilization and step cap not applied\n"
                ));
            }
            _ => out.push_str(
                "hold: nothing was measurable, the operator would keep spec.replicas as it is\n",
            ),
        }
        out
    }
}

/// Evaluates `spec`'s metrics (or its decision server) once, concurrently, over `client`, with
/// `ready` as the ratio's baseline, and clamps the result (docs/scaling.md steps 3–4,
/// docs/providers.md).
///
/// # Errors
/// [`MetricError::InvalidAddress`] / [`MetricError::InvalidHeader`] when `serverAddress` or
/// `serverHeaders` cannot be used at all; every per-metric failure is reported in the result
/// instead.
pub async fn evaluate(
    spec: &LLMScalerSpec,
    ready: i32,
    client: &MetricsClient,
) -> Result<ProbeReport, MetricError> {
    let source = MetricSource::from_spec(client, spec)?;
    let readings = source.read(spec).await;
    let (activation, capacity, objective) = live::extra_reads(&source, spec, ready).await;
    let target = engine::Observation {
        spec_replicas: ready,
        ready_replicas: ready,
        rollout_in_progress: false,
    };
    let observed = live::observation(
        target,
        readings.signal(spec),
        (&activation, &capacity, &objective),
        None,
    );
    let decision = Scaler::new(spec, None).step(&observed).decision;
    let recommendation = decision.recommendation;
    let (desired, limited) = match recommendation {
        Some(_) => (Some(decision.desired), decision.limited),
        None => (None, None),
    };
    let outcomes = decision.metrics;
    let metrics = outcomes
        .into_iter()
        .map(|o| {
            let (desired, error) = match o.recommendation {
                Ok(r) => (Some(r), None),
                Err(skip) => (None, Some(skip.to_string())),
            };
            ProbeMetric {
                name: o.name,
                value: o.value,
                error,
                desired,
            }
        })
        .collect();
    Ok(ProbeReport {
        metrics,
        desired,
        hold: recommendation.is_none(),
        recommendation,
        limited,
        ready,
    })
}

/// The spec fields `probe --scaler` cannot apply, by path: `serverHeadersFrom` names Secrets
/// of the cluster, which a probe of a file does not read (`probe --name` does).
///
/// # Errors
/// The first such field, with why.
pub fn refused_by_scaler_file(spec: &LLMScalerSpec) -> Result<(), String> {
    if spec
        .server_headers_from
        .as_ref()
        .is_some_and(|h| !h.is_empty())
    {
        return Err(
            "spec.serverHeadersFrom: probe --scaler does not read the cluster's Secrets; \
             probe the applied scaler with --name, or put the header in serverHeaders for the probe"
                .to_owned(),
        );
    }
    Ok(())
}

/// Runs `llmscaler probe`: loads, defaults and validates the manifest, evaluates it once and
/// prints the report on stdout. Returns the exit status: 0 recommendation, 4 recommendation
/// with a metric skipped, 3 hold, 2 invalid spec (field-path messages on stderr), 1 other
/// failures.
pub fn run(args: &ProbeArgs) -> ExitCode {
    crate::process::install_crypto_provider();
    let (Some(path), None) = (&args.scaler, &args.name) else {
        return run_live(args);
    };
    let scaler = match load_scaler(path) {
        Ok(scaler) => scaler,
        Err(err @ ScalerFileError::Invalid { .. }) => return fail(EXIT_INVALID, &err.to_string()),
        Err(err) => return fail(EXIT_FAILURE, &err.to_string()),
    };
    let spec = scaler.spec;
    if let Err(refused) = refused_by_scaler_file(&spec) {
        return fail(EXIT_INVALID, &refused);
    }
    let ready = match args.ready {
        None => spec.min_replicas,
        Some(n) => match i32::try_from(n) {
            Ok(n) => n,
            Err(_) => return fail(EXIT_INVALID, "--ready is larger than an int32"),
        },
    };
    let (runtime, client) = match runtime_and_client() {
        Ok(both) => both,
        Err(code) => return code,
    };
    let report = match runtime.block_on(evaluate(&spec, ready, &client)) {
        Ok(report) => report,
        Err(err @ MetricError::InvalidAddress { .. }) => {
            return fail(EXIT_INVALID, &format!("spec.serverAddress: {err}"));
        }
        Err(err @ MetricError::InvalidHeader { .. }) => {
            return fail(EXIT_INVALID, &format!("spec.serverHeaders: {err}"));
        }
        Err(err) => return fail(EXIT_FAILURE, &err.to_string()),
    };
    match args.output {
        OutputFormat::Text => print!("{}", report.to_text(&spec)),
        OutputFormat::Json => match serde_json::to_string_pretty(&report) {
            Ok(json) => println!("{json}"),
            Err(err) => return fail(EXIT_FAILURE, &format!("cannot render JSON: {err}")),
        },
    }
    ExitCode::from(report.exit_code())
}

/// `probe --name`: the live explanation; exit 0 (a decision), 4 (a decision with a metric
/// skipped), 3 (held), 2 (invalid stored spec), 1 (cluster or other failure).
fn run_live(args: &ProbeArgs) -> ExitCode {
    let Some(name) = &args.name else {
        return fail(
            EXIT_INVALID,
            "give --scaler FILE or --name NAME [-n NAMESPACE]",
        );
    };
    let (runtime, client) = match runtime_and_client() {
        Ok(both) => both,
        Err(code) => return code,
    };
    match runtime.block_on(live::explain_live(
        name,
        &args.namespace,
        &client,
        (&args.kube, args.via_service_proxy),
    )) {
        Ok((_, explanation)) => {
            print!("LLMScaler {}/{name}\n{}", args.namespace, explanation.text);
            ExitCode::from(exit_status(explanation.held, explanation.skipped))
        }
        Err(err @ live::LiveError::Invalid(_)) => fail(EXIT_INVALID, &err.to_string()),
        Err(err) => fail(EXIT_FAILURE, &err.to_string()),
    }
}

/// The runtime and the metrics HTTP client of one probe, or the exit status of their failure.
fn runtime_and_client() -> Result<(tokio::runtime::Runtime, MetricsClient), ExitCode> {
    let runtime = crate::process::runtime()
        .map_err(|err| fail(EXIT_FAILURE, &format!("cannot start the runtime: {err}")))?;
    let client = MetricsClient::new().map_err(|err| fail(EXIT_FAILURE, &err.to_string()))?;
    Ok((runtime, client))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_shape_is_the_documented_one() {
        let report = ProbeReport {
            metrics: vec![
                ProbeMetric {
                    name: "waiting".to_owned(),
                    value: Some(4.0),
                    error: None,
                    desired: Some(6),
                },
                ProbeMetric {
                    name: "kv".to_owned(),
                    value: None,
                    error: Some("no data".to_owned()),
                    desired: None,
                },
            ],
            desired: Some(5),
            hold: false,
            recommendation: Some(6),
            limited: Some(Limit::Max),
            ready: 3,
        };
        let json = serde_json::to_value(&report).expect("json");
        assert_eq!(
            json,
            serde_json::json!({
                "metrics": [
                    {"name": "waiting", "value": 4.0, "error": null, "desired": 6},
                    {"name": "kv", "value": null, "error": "no data", "desired": null}
                ],
                "desired": 5,
                "hold": false
            })
        );
        assert_eq!(report.exit_code(), EXIT_PARTIAL);
    }

    #[test]
    fn exit_status_tells_hold_partial_and_full() {
        assert_eq!(exit_status(false, false), EXIT_RECOMMENDATION);
        assert_eq!(exit_status(false, true), EXIT_PARTIAL);
        assert_eq!(exit_status(true, true), EXIT_HOLD);
        assert_eq!(exit_status(true, false), EXIT_HOLD);
    }
}
