//! `llmscaler simulate`: replays a metric trace through the operator's own step
//! ([`crate::step::Scaler`]), with a simple readiness model, and reports what the scaler would have done
//! (`--metrics`); or serves a request trace in a closed loop with the scaler and its comparators
//! (`--requests`: [`compare`], [`replay`], [`policies`], [`hpa`]).

pub mod compare;
pub mod compare_plot;
pub mod hpa;
pub mod input;
pub mod plot;
pub mod policies;
pub mod replay;
pub mod series_check;

use llmscaler_api::{LLMScalerSpec, MetricProvider};

use k8s_openapi::jiff::Timestamp;

use crate::engine::{self, Action};
use crate::step::{self, Acting, Scaler, Target};
use input::{Columns, Row};

/// Replay settings.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Options {
    /// `spec.replicas` (and ready replicas) at the start; `None` = `minReplicas`.
    pub initial_replicas: Option<i32>,
    /// Seconds a replica added at `t` takes to become ready (ready at `t + startup`).
    pub startup_seconds: f64,
    /// The wall-clock time of `t = 0`, for `spec.schedules` (default: the Unix epoch).
    pub start: Timestamp,
}

/// One output row.
#[derive(Clone, Debug, PartialEq)]
pub struct Step {
    /// The `t` cell as written.
    pub t_text: String,
    /// Seconds from the start.
    pub t_seconds: f64,
    /// Ready replicas observed at this row.
    pub ready: i32,
    /// status `desiredReplicas`.
    pub desired: i32,
    /// `spec.replicas` after the row.
    pub replicas: i32,
    /// What happened.
    pub action: Action,
    /// Why (`ScaledUp`, `StepCapped`, `ScaleDownNotSettled`, …).
    pub reason: &'static str,
    /// The metric cells as written.
    pub value_texts: Vec<String>,
    /// Per metric value (NaN when the cell was empty), for plotting.
    pub values: Vec<f64>,
}

/// The value columns a scaler expects in the CSV: metric names, or `decision` under Custom.
pub fn columns_for(spec: &LLMScalerSpec) -> Columns {
    let values = match spec.effective_provider() {
        MetricProvider::Prometheus => spec
            .metrics()
            .iter()
            .enumerate()
            .map(|(i, m)| m.display_name(i))
            .collect(),
        MetricProvider::Custom => vec!["decision".to_string()],
    };
    Columns { values }
}

/// Tracks ready replicas: added replicas become ready after the start-up delay; removed ones
/// stop being ready at once, not-yet-ready ones first (as a ReplicaSet deletes them first).
/// Invariant: `ready + pending = spec.replicas`.
#[derive(Debug)]
struct Readiness {
    ready: i32,
    /// `(ready at, ms; count)`, oldest first.
    pending: Vec<(i64, i32)>,
}

impl Readiness {
    fn observe(&mut self, now_ms: i64) -> i32 {
        let (due, waiting): (Vec<_>, Vec<_>) =
            self.pending.iter().partition(|(at, _)| *at <= now_ms);
        self.ready = self
            .ready
            .saturating_add(due.iter().map(|(_, n)| n).sum::<i32>());
        self.pending = waiting;
        self.ready
    }

    fn scale(&mut self, now_ms: i64, from: i32, to: i32, startup_ms: i64) {
        if to > from {
            self.pending
                .push((now_ms.saturating_add(startup_ms), to - from));
        } else {
            let mut remove = from - to;
            while remove > 0 {
                let Some((_, newest)) = self.pending.last_mut() else {
                    break;
                };
                let taken = remove.min(*newest);
                *newest -= taken;
                remove -= taken;
                if *newest == 0 {
                    self.pending.pop();
                }
            }
            self.ready = (self.ready - remove).max(0);
        }
    }
}

/// The spec fields `--metrics` cannot replay, by path: a metric trace has no column for
/// `spec.capacity`'s or `spec.activation`'s queries, and no pods to drain. `--requests` replays
/// them all.
///
/// # Errors
/// The first such field, with why.
pub fn refused_by_metrics(spec: &LLMScalerSpec) -> Result<(), String> {
    let refused = [
        (spec.capacity.is_some(), "spec.capacity"),
        (spec.objective.is_some(), "spec.objective"),
        (spec.activation.is_some(), "spec.activation"),
        (spec.drain().is_some(), "spec.scaleDown.drain"),
    ];
    match refused.iter().find(|(set, _)| *set) {
        Some((_, field)) => Err(format!(
            "{field}: simulate --metrics cannot replay it (a metric trace has no column for its \
             queries or pods); use simulate --requests, which replays every field"
        )),
        None => Ok(()),
    }
}

/// Runs every row through the operator's step ([`Scaler::step`]). `spec` must be defaulted and
/// valid, and pass [`refused_by_metrics`].
pub fn replay(spec: &LLMScalerSpec, rows: &[Row], options: Options) -> Vec<Step> {
    let mut scaler = Scaler::new(spec, None);
    let acting = Acting::of_spec(spec);
    let start_ms = options.start.as_millisecond();
    let mut spec_replicas = options.initial_replicas.unwrap_or(spec.min_replicas).max(0);
    let mut readiness = Readiness {
        ready: spec_replicas,
        pending: Vec::new(),
    };
    #[allow(clippy::cast_possible_truncation)]
    let startup_ms = (options.startup_seconds * 1000.0).round() as i64;

    rows.iter()
        .map(|row| {
            let modelled = readiness.observe(row.t_ms);
            let ready = row.ready.unwrap_or(modelled);
            let observed = step::Observation {
                now_ms: start_ms.saturating_add(row.t_ms),
                target: Target {
                    spec_replicas,
                    ready_replicas: ready,
                    rollout_in_progress: row.rollout,
                    is_deployment: false,
                    owns_replicas: true,
                    other_replicas_managers: Vec::new(),
                    template: None,
                    max_num_seqs: None,
                },
                signal: match spec.effective_provider() {
                    MetricProvider::Prometheus => engine::Signal::metrics(spec, row.values.clone()),
                    MetricProvider::Custom => engine::Signal::Decision(row.decision.clone()),
                },
                capacity: None,
                objective: None,
                activation: None,
                pods: None,
                in_flight: None,
                deletion_costs: None,
                activator: None,
                acting: acting.clone(),
                competitor: None,
                status: None,
            };
            let plan = scaler.step(&observed);
            let replicas = plan.replicas_after(spec_replicas);
            readiness.scale(row.t_ms, spec_replicas, replicas, startup_ms);
            spec_replicas = replicas;
            #[allow(clippy::cast_precision_loss)]
            let t_seconds = row.t_ms as f64 / 1000.0;
            Step {
                t_text: row.t_text.clone(),
                t_seconds,
                ready,
                desired: plan.decision.desired,
                replicas,
                action: plan.decision.action,
                reason: plan.decision.reason.as_str(),
                value_texts: row.value_texts.clone(),
                values: row_values(row),
            }
        })
        .collect()
}

#[allow(clippy::cast_precision_loss)]
fn row_values(row: &Row) -> Vec<f64> {
    if row.values.is_empty() {
        vec![row.decision.as_ref().map_or(f64::NAN, |&d| f64::from(d))]
    } else {
        row.values
            .iter()
            .map(|v| v.as_ref().copied().unwrap_or(f64::NAN))
            .collect()
    }
}

/// Writes the output CSV: `t,ready,desired,replicas,action,reason`, then one column per metric
/// (the input cells as written).
///
/// # Errors
/// The writer's I/O error.
pub fn write_csv(
    out: impl std::io::Write,
    columns: &Columns,
    steps: &[Step],
) -> Result<(), csv::Error> {
    let mut writer = csv::Writer::from_writer(out);
    let mut header = vec!["t", "ready", "desired", "replicas", "action", "reason"];
    header.extend(columns.values.iter().map(String::as_str));
    writer.write_record(&header)?;
    for step in steps {
        let mut record = vec![
            step.t_text.clone(),
            step.ready.to_string(),
            step.desired.to_string(),
            step.replicas.to_string(),
            step.action.as_str().to_string(),
            step.reason.to_string(),
        ];
        record.extend(step.value_texts.iter().cloned());
        writer.write_record(&record)?;
    }
    writer.flush()?;
    Ok(())
}
