//! The replay's series against the scaler's queries (docs/simulate/README.md#prometheus): which
//! `model_name` the replayed vLLM serves, and which written query can never read a replayed
//! series (a selector that selects none of them), so that a scaler that would hold for the whole
//! run says why instead of holding without a word.

use llmscaler_api::LLMScalerSpec;
use promql_parser::label::MatchOp;
use serde::Serialize;

use super::policies::llmscaler::fleet_query;
use crate::promql::{self, Labels, selectors};

/// The `model_name` of the replayed series when neither `--model-name` nor an equality matcher
/// `model_name="…"` in the scaler's queries names one.
pub const DEFAULT_MODEL_NAME: &str = "replayed-llm";

/// vLLM's `engine` label on every series (the engine core's index, 0 without data parallelism).
pub use llmscaler_loadmodel::exposition::ENGINE;

/// A written query whose selectors select none of the replay's series.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Unmatched {
    /// The field path of the query, e.g. `spec.metrics[0].query` (prefixed `comparators-scaler:`
    /// for `--comparators-scaler`).
    pub field: String,
    /// The query as evaluated.
    pub query: String,
    /// Its selectors that select no series, as written.
    pub selectors: Vec<String>,
}

impl Unmatched {
    /// The stderr line: the field, the selectors, the labels the replay's series carry and the
    /// consequence.
    pub fn warning(&self, model_name: &str) -> String {
        format!(
            "warning: {}: {} matched no series in the replay (its series are vLLM's, labelled \
             pod, namespace, app, job=\"vllm\", engine=\"{ENGINE}\", model_name=\"{model_name}\"; \
             --model-name sets the last): this query reads nothing for the whole run",
            self.field,
            self.selectors.join(", ")
        )
    }
}

/// Every PromQL query of `spec` the replay evaluates, with its field path: `spec.metrics[i]`
/// (the written query, or a runtime signal's fleet query), `spec.capacity`'s,
/// `spec.activation.query`, the drain's `inFlightQuery`, `deletionCostQuery` and
/// `spec.objective`'s queries on `seriesSelector`.
pub fn queries(spec: &LLMScalerSpec) -> Vec<(String, String)> {
    let mut out: Vec<(String, String)> = Vec::new();
    for (i, m) in spec.metrics().iter().enumerate() {
        if let Ok(q) = fleet_query(m) {
            out.push((format!("spec.metrics[{i}].query"), q));
        }
    }
    if let Some(c) = &spec.capacity {
        out.push((
            "spec.capacity.arrivalRateQuery".to_owned(),
            c.arrival_rate_query.clone(),
        ));
        if let Some(b) = &c.backlog_query {
            out.push(("spec.capacity.backlogQuery".to_owned(), b.clone()));
        }
    }
    if let Some(a) = &spec.activation {
        out.push(("spec.activation.query".to_owned(), a.query.clone()));
    }
    if let Some(q) = spec.drain().and_then(|d| d.in_flight_query.as_deref()) {
        out.push((
            "spec.scaleDown.drain.inFlightQuery".to_owned(),
            q.to_owned(),
        ));
    }
    if let Some(q) = spec
        .scale_down
        .as_ref()
        .and_then(|s| s.deletion_cost_query.as_deref())
    {
        out.push(("spec.scaleDown.deletionCostQuery".to_owned(), q.to_owned()));
    }
    for q in crate::engine::objective::queries(spec).unwrap_or_default() {
        out.push(("spec.objective.seriesSelector".to_owned(), q));
    }
    out
}

/// The `model_name` of the replay: `given` (`--model-name`, or the workload a backtest read),
/// else the one value of the `model_name="…"` matchers of the scaler's queries, else
/// [`DEFAULT_MODEL_NAME`].
///
/// # Errors
/// The field paths and names when the queries name several models (then `--model-name` must
/// choose).
pub fn model_name(spec: &LLMScalerSpec, given: Option<&str>) -> Result<String, String> {
    if let Some(name) = given {
        return Ok(name.to_owned());
    }
    let mut named: Vec<(String, String)> = Vec::new();
    for (field, query) in queries(spec) {
        let Ok(expr) = promql::parse(&query) else {
            continue;
        };
        for vs in selectors::vector_selectors(&expr) {
            for m in &vs.matchers.matchers {
                if m.name == "model_name"
                    && matches!(m.op, MatchOp::Equal)
                    && !named.iter().any(|(_, v)| *v == m.value)
                {
                    named.push((field.clone(), m.value.clone()));
                }
            }
        }
    }
    match named.as_slice() {
        [] => Ok(DEFAULT_MODEL_NAME.to_owned()),
        [(_, one)] => Ok(one.clone()),
        several => Err(format!(
            "the scaler's queries name several models ({}): pass --model-name to choose the \
             model_name of the replayed series",
            several
                .iter()
                .map(|(f, v)| format!("{f}: model_name=\"{v}\""))
                .collect::<Vec<_>>()
                .join(", ")
        )),
    }
}

/// The queries of `spec` (field paths prefixed with `prefix`) with a selector that selects none
/// of `series` (the label sets the replay's Prometheus held).
pub fn unmatched(spec: &LLMScalerSpec, prefix: &str, series: &[Labels]) -> Vec<Unmatched> {
    queries(spec)
        .into_iter()
        .filter_map(|(field, query)| {
            let expr = promql::parse(&query).ok()?;
            let selectors = selectors::unmatched(&expr, series);
            (!selectors.is_empty()).then(|| Unmatched {
                field: format!("{prefix}{field}"),
                query,
                selectors,
            })
        })
        .collect()
}
