//! Which vLLM workload the history is read for (docs/backtest.md#choosing-the-workload):
//! the `--selector` must be PromQL label matchers, and exactly one `(namespace, model_name)`
//! pair may have vLLM series under it in the range; otherwise the run is refused listing what
//! matched.

use std::collections::BTreeMap;

use promql_parser::parser::Expr;

use super::BacktestError;
use super::query::Series;

/// The series every workload lookup counts: vLLM's prompt-length histogram count.
pub(crate) const PROBE_METRIC: &str = "vllm:request_prompt_tokens_count";

/// Most matching workloads listed in a refusal.
const MAX_LISTED: usize = 10;

/// One workload: its namespace and served model name.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) struct Workload {
    /// `namespace` label.
    pub(crate) namespace: String,
    /// `model_name` label (vLLM's `--served-model-name`).
    pub(crate) model_name: String,
}

impl Workload {
    /// The label matchers that select this workload's series within `selector`.
    pub(crate) fn matchers(&self, selector: &str) -> String {
        let mut parts: Vec<String> = Vec::new();
        if !selector.trim().is_empty() {
            parts.push(selector.trim().to_owned());
        }
        for own in [
            format!("namespace=\"{}\"", escape(&self.namespace)),
            format!("model_name=\"{}\"", escape(&self.model_name)),
        ] {
            // The default selector already holds the namespace matcher: not twice.
            if !selector.split(',').any(|m| m.trim() == own) {
                parts.push(own);
            }
        }
        parts.join(",")
    }
}

/// A label value inside double quotes.
pub(crate) fn escape(value: &str) -> String {
    value
        .replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

/// Checks that `selector` is a list of label matchers (`a="b",c=~"d.*"`), nothing more.
///
/// # Errors
/// [`BacktestError::Selector`] with the reason.
pub(crate) fn check_selector(selector: &str) -> Result<(), BacktestError> {
    let text = format!("{PROBE_METRIC}{{{selector}}}");
    let refused = |reason: String| BacktestError::Selector {
        selector: selector.to_owned(),
        reason,
    };
    match promql_parser::parser::parse(&text) {
        Ok(Expr::VectorSelector(v))
            if v.offset.is_none()
                && v.at.is_none()
                && v.matchers.or_matchers.is_empty()
                && v.name.as_deref() == Some(PROBE_METRIC) =>
        {
            Ok(())
        }
        Ok(_) => Err(refused(
            "it must be label matchers only, e.g. namespace=\"prod\",app=\"vllm\"".to_owned(),
        )),
        Err(message) => Err(refused(message)),
    }
}

/// The one workload among the series of a `count by (namespace, model_name) (…)` answer.
///
/// # Errors
/// [`BacktestError::NoWorkload`] when none matched, [`BacktestError::SeveralWorkloads`]
/// (listing up to 10) when more than one did.
pub(crate) fn pick(selector: &str, series: &[Series]) -> Result<Workload, BacktestError> {
    let label = |s: &Series, k: &str| s.labels.get(k).cloned().unwrap_or_default();
    let found: BTreeMap<Workload, ()> = series
        .iter()
        .map(|s| {
            (
                Workload {
                    namespace: label(s, "namespace"),
                    model_name: label(s, "model_name"),
                },
                (),
            )
        })
        .collect();
    let mut all = found.into_keys();
    match (all.next(), all.next()) {
        (None, _) => Err(BacktestError::NoWorkload {
            selector: selector.to_owned(),
        }),
        (Some(one), None) => Ok(one),
        (Some(a), Some(b)) => {
            let rest: Vec<Workload> = all.collect();
            let count = rest.len() + 2;
            let listed: Vec<String> = [a, b]
                .into_iter()
                .chain(rest)
                .take(MAX_LISTED)
                .map(|w| format!("namespace={:?} model_name={:?}", w.namespace, w.model_name))
                .collect();
            Err(BacktestError::SeveralWorkloads {
                selector: selector.to_owned(),
                count,
                listed: listed.join("; "),
            })
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(ns: &str, model: &str) -> Series {
        Series {
            labels: [("namespace", ns), ("model_name", model)]
                .into_iter()
                .map(|(k, v)| (k.to_owned(), v.to_owned()))
                .collect(),
            points: vec![(0, 1.0)],
        }
    }

    #[test]
    fn exactly_one_workload_is_picked_else_refused_with_the_list() {
        let one = pick("", &[s("prod", "llama")]).unwrap();
        assert_eq!(
            one.matchers("app=\"x\""),
            "app=\"x\",namespace=\"prod\",model_name=\"llama\""
        );
        let none = pick("app=\"x\"", &[]).unwrap_err().to_string();
        assert!(none.contains("app=\"x\""), "{none}");
        let two = pick("", &[s("prod", "llama"), s("dev", "qwen")])
            .unwrap_err()
            .to_string();
        assert!(
            two.contains("2 workloads") && two.contains("qwen") && two.contains("llama"),
            "{two}"
        );
    }

    #[test]
    fn a_selector_is_label_matchers_only() {
        assert!(check_selector("namespace=\"prod\",app=~\"vllm.*\"").is_ok());
        assert!(check_selector("").is_ok());
        for bad in [
            "a=\"b\"} or vector(1) + x{c=\"d\"",
            "a=",
            "a=\"b\"} offset 5m",
        ] {
            assert!(check_selector(bad).is_err(), "{bad}");
        }
    }
}
