//! The shape of a PromQL query, read from its syntax tree (`promql-parser`, the parser of the
//! operator's own evaluator), for two admission checks: the warning on a query with no
//! aggregation at its top ([`is_aggregated`]) and the refusal of a `perPod` query that cannot
//! keep a `pod` label ([`drops_pod_label`]). Both judge the expression's shape only; Prometheus
//! has the last word at run time (several series, or a series without `pod`, are reported
//! then). A query that does not parse is not judged here: Prometheus reports its syntax error.

use promql_parser::label::Labels;
use promql_parser::parser::{self, AggregateExpr, Call, Expr, LabelModifier};

/// Whether `query` returns at most one series, judged from its shape: an aggregation at its top
/// (`avg(...)`, `sum by (...) (...)`, `topk(...)`), a number, `scalar(...)`, `vector(...)`, or
/// a function or arithmetic whose every operand is one of these
/// (`histogram_quantile(0.9, sum by (le) (...))`, `sum(a) / sum(b)`). `true` for a query that
/// does not parse (nothing to warn about its shape).
pub(crate) fn is_aggregated(query: &str) -> bool {
    parser::parse(query).map_or(true, |expr| single_series(&expr))
}

fn single_series(expr: &Expr) -> bool {
    match expr {
        Expr::Aggregate(_) | Expr::NumberLiteral(_) | Expr::StringLiteral(_) => true,
        Expr::Paren(inner) => single_series(&inner.expr),
        Expr::Unary(inner) => single_series(&inner.expr),
        Expr::Subquery(inner) => single_series(&inner.expr),
        Expr::Binary(binary) => single_series(&binary.lhs) && single_series(&binary.rhs),
        Expr::Call(call) => match call.func.name {
            "scalar" | "vector" | "absent" | "absent_over_time" => true,
            _ => call.args.args.iter().all(|arg| single_series(arg)),
        },
        Expr::VectorSelector(_) | Expr::MatrixSelector(_) | Expr::Extension(_) => false,
    }
}

/// Why a `perPod` query cannot keep a `pod` label, judged from its shape: an aggregation
/// without `by (... pod ...)` (or of an input that has none), one `without (... pod ...)`,
/// `scalar`/`vector`, a number. `topk`, `bottomk`, `limitk` and `limit_ratio` keep their
/// input's labels; a function keeps those of its first series argument; arithmetic those of
/// its left side (its right side when the left is a number). `None` when it may keep `pod`,
/// or when the query does not parse.
pub(crate) fn drops_pod_label(query: &str) -> Option<String> {
    parser::parse(query)
        .ok()
        .and_then(|expr| pod_dropped_by(&expr))
}

fn pod_dropped_by(expr: &Expr) -> Option<String> {
    match expr {
        Expr::NumberLiteral(_) => Some("it is a number".to_owned()),
        Expr::StringLiteral(_) => Some("it is a string".to_owned()),
        Expr::Paren(inner) => pod_dropped_by(&inner.expr),
        Expr::Unary(inner) => pod_dropped_by(&inner.expr),
        Expr::Subquery(inner) => pod_dropped_by(&inner.expr),
        Expr::Binary(binary) => match binary.lhs.as_ref() {
            Expr::NumberLiteral(_) => pod_dropped_by(&binary.rhs),
            lhs => pod_dropped_by(lhs),
        },
        Expr::Aggregate(aggregate) => aggregate_drops_pod(aggregate),
        Expr::Call(call) => call_drops_pod(call),
        Expr::VectorSelector(_) | Expr::MatrixSelector(_) | Expr::Extension(_) => None,
    }
}

fn aggregate_drops_pod(aggregate: &AggregateExpr) -> Option<String> {
    let op = aggregate.op.to_string();
    let has_pod = |labels: &Labels| labels.labels.iter().any(|l| l == "pod");
    match (op.as_str(), &aggregate.modifier) {
        // Selecting aggregations keep every label of the series they select.
        ("topk" | "bottomk" | "limitk" | "limit_ratio", _) => pod_dropped_by(&aggregate.expr),
        (_, None) => Some(format!(
            "`{op}(...)` without `by (pod)` drops the `pod` label; write `{op} by (pod) (...)`"
        )),
        (_, Some(LabelModifier::Include(labels))) if !has_pod(labels) => Some(format!(
            "`{op} by (...)` does not keep `pod`; add it to the by list"
        )),
        (_, Some(LabelModifier::Exclude(labels))) if has_pod(labels) => {
            Some(format!("`{op} without (pod, ...)` drops `pod`"))
        }
        (_, Some(LabelModifier::Include(_) | LabelModifier::Exclude(_))) => {
            pod_dropped_by(&aggregate.expr)
        }
    }
}

fn call_drops_pod(call: &Call) -> Option<String> {
    let name = call.func.name;
    if matches!(name, "scalar" | "vector") {
        return Some(format!("`{name}(...)` has no labels"));
    }
    let series = call.args.args.iter().find(|arg| {
        !matches!(
            arg.as_ref(),
            Expr::NumberLiteral(_) | Expr::StringLiteral(_)
        )
    });
    match series {
        Some(arg) => pod_dropped_by(arg),
        None => Some(format!("`{name}()` has no labels")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn aggregation_detection() {
        for q in [
            "avg(vllm:num_requests_waiting{app=\"x\"})",
            "sum by (app) (rate(x[1m]))",
            " max(x)",
            "(sum(x))",
            "scalar(x)",
            "42",
            "sum(a) / sum(b)",
            "sum(x) * 2",
            "count_values(\"v\", x)",
            "histogram_quantile(0.9, sum by (le) (rate(ttft_bucket[1m])))",
            "not promql (",
        ] {
            assert!(is_aggregated(q), "{q}");
        }
        for q in [
            "vllm:num_requests_waiting",
            "rate(x[1m])",
            "rate(a[1m]) / sum(b)",
            "sum(a) / rate(b[1m])",
            "histogram_quantile(0.9, rate(ttft_bucket[1m]))",
            "summary_metric",
            "sum_metric",
        ] {
            assert!(!is_aggregated(q), "{q}");
        }
    }

    #[test]
    fn pod_label_detection() {
        for keeps in [
            "x",
            "rate(x[1m])",
            "sum by (pod) (x)",
            "sum(x) by (pod, app)",
            "sum without (le) (x)",
            "rate(x[1m]) / 2",
            "2 * x",
            "topk(3, x)",
            "histogram_quantile(0.9, sum by (le, pod) (rate(x_bucket[1m])))",
            "label_replace(x, \"a\", \"$1\", \"b\", \"(.*)\")",
            "not promql (",
        ] {
            assert_eq!(drops_pod_label(keeps), None, "{keeps}");
        }
        for (drops, why) in [
            ("sum(x)", "`sum(...)` without `by (pod)`"),
            ("avg by (app) (x)", "`avg by (...)` does not keep `pod`"),
            ("sum(x) by (app)", "`sum by (...)` does not keep `pod`"),
            (
                "sum without (pod) (x)",
                "`sum without (pod, ...)` drops `pod`",
            ),
            ("sum by (pod) (sum(x))", "`sum(...)` without `by (pod)`"),
            ("topk(1, sum(x))", "`sum(...)` without `by (pod)`"),
            ("scalar(x)", "`scalar(...)` has no labels"),
            ("time()", "`time()` has no labels"),
            ("3", "it is a number"),
            ("2 * sum(x)", "`sum(...)` without `by (pod)`"),
        ] {
            let got = drops_pod_label(drops);
            assert!(
                got.as_deref().is_some_and(|g| g.starts_with(why)),
                "{drops}: {got:?}"
            );
        }
    }
}
