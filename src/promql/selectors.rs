//! Which vector selectors of a query select no series at all among a set of label sets: how
//! `simulate --requests` and `backtest` tell that a scaler's query can never read the replay's
//! series (e.g. a `model_name` matcher naming another model), docs/simulate/README.md#prometheus.

use promql_parser::parser::{Expr, VectorSelector};

use super::Labels;

/// Every vector selector of `expr` (those inside range selectors and subqueries included), in
/// the order they are written.
pub fn vector_selectors(expr: &Expr) -> Vec<&VectorSelector> {
    let mut out = Vec::new();
    walk(expr, &mut out);
    out
}

fn walk<'a>(expr: &'a Expr, out: &mut Vec<&'a VectorSelector>) {
    match expr {
        Expr::VectorSelector(vs) => out.push(vs),
        Expr::MatrixSelector(m) => out.push(&m.vs),
        Expr::Aggregate(a) => {
            if let Some(param) = &a.param {
                walk(param, out);
            }
            walk(&a.expr, out);
        }
        Expr::Unary(u) => walk(&u.expr, out),
        Expr::Binary(b) => {
            walk(&b.lhs, out);
            walk(&b.rhs, out);
        }
        Expr::Paren(p) => walk(&p.expr, out),
        Expr::Subquery(s) => walk(&s.expr, out),
        Expr::Call(c) => c.args.args.iter().for_each(|a| walk(a, out)),
        Expr::NumberLiteral(_) | Expr::StringLiteral(_) | Expr::Extension(_) => {}
    }
}

/// Whether `vs` selects the series labelled `labels` (`__name__` included): its name and every
/// matcher (a missing label matches as the empty string, as in Prometheus).
pub fn selects(vs: &VectorSelector, labels: &Labels) -> bool {
    let name_ok = vs
        .name
        .as_deref()
        .is_none_or(|n| labels.get("__name__").map(String::as_str) == Some(n));
    name_ok
        && vs
            .matchers
            .matchers
            .iter()
            .all(|m| m.is_match(labels.get(&m.name).map_or("", String::as_str)))
}

/// The selectors of `expr` (as written, e.g. `vllm:num_requests_waiting{model_name="a"}`) that
/// select none of `series`.
pub fn unmatched(expr: &Expr, series: &[Labels]) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for vs in vector_selectors(expr) {
        let text = vs.to_string();
        if !series.iter().any(|l| selects(vs, l)) && !out.contains(&text) {
            out.push(text);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn labels(pairs: &[(&str, &str)]) -> Labels {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect()
    }

    #[test]
    fn a_selector_naming_another_model_or_metric_is_unmatched() {
        let series = [labels(&[
            ("__name__", "vllm:num_requests_waiting"),
            ("model_name", "llama"),
            ("pod", "p"),
        ])];
        let q = |text: &str| super::super::parse(text).unwrap();
        assert!(
            unmatched(
                &q("sum(vllm:num_requests_waiting{model_name=\"llama\"})"),
                &series
            )
            .is_empty()
        );
        assert!(unmatched(&q("sum(vllm:num_requests_waiting)"), &series).is_empty());
        assert_eq!(
            unmatched(
                &q(
                    "sum(rate(vllm:num_requests_waiting{model_name=\"qwen\"}[1m])) / max(vllm:nope) or vector(0)"
                ),
                &series
            ),
            vec![
                "vllm:num_requests_waiting{model_name=\"qwen\"}".to_owned(),
                "vllm:nope".to_owned()
            ]
        );
        // A matcher on a label the series do not carry only matches the empty string.
        assert!(unmatched(&q("vllm:num_requests_waiting{engine=\"\"}"), &series).is_empty());
        assert_eq!(
            unmatched(&q("vllm:num_requests_waiting{service=\"vllm\"}"), &series).len(),
            1
        );
    }
}
