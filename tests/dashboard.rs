//! The Grafana dashboard shipped in the chart queries only metrics the operator really exports
//! (`llmscaler::telemetry::EXPORTED`, with the `_total` suffix of counters and the
//! `_bucket`/`_sum`/`_count` series of histograms), and the README lists every panel with the
//! queries it runs.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // a test: a failed expectation fails it

use std::path::Path;

use llmscaler::telemetry::EXPORTED;
use serde_json::Value;

fn read(path: &str) -> String {
    let full = Path::new(env!("CARGO_MANIFEST_DIR")).join(path);
    std::fs::read_to_string(&full).unwrap_or_else(|e| panic!("{}: {e}", full.display()))
}

fn dashboard() -> Value {
    serde_json::from_str(&read("charts/llmscaler/dashboards/llmscaler.json")).expect("JSON")
}

/// Every PromQL expression of the dashboard: panel targets and templating queries.
fn expressions(dashboard: &Value) -> Vec<String> {
    let mut out = Vec::new();
    for panel in dashboard["panels"].as_array().expect("panels") {
        for target in panel["targets"].as_array().expect("targets") {
            out.push(target["expr"].as_str().expect("expr").to_owned());
        }
    }
    for variable in dashboard["templating"]["list"]
        .as_array()
        .expect("templating")
    {
        if let Some(query) = variable["query"]["query"].as_str() {
            out.push(query.to_owned());
        }
    }
    out
}

/// The `llmscaler_*` metric names in `expr`.
fn metric_names(expr: &str) -> Vec<&str> {
    expr.match_indices("llmscaler_")
        .map(|(start, _)| {
            let rest = &expr[start..];
            let end = rest
                .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
                .unwrap_or(rest.len());
            &rest[..end]
        })
        .collect()
}

fn exported(series: &str) -> bool {
    let Some(name) = series.strip_prefix("llmscaler_") else {
        return false;
    };
    EXPORTED.iter().any(|e| {
        e.kind
            .suffixes()
            .iter()
            .any(|suffix| name.strip_suffix(suffix) == Some(e.name))
    })
}

#[test]
fn every_panel_queries_exported_metrics_only() {
    let dashboard = dashboard();
    let exprs = expressions(&dashboard);
    assert!(exprs.len() >= 8, "{exprs:?}");
    for expr in &exprs {
        let names = metric_names(expr);
        assert!(!names.is_empty(), "{expr} queries no llmscaler metric");
        for name in names {
            assert!(
                exported(name),
                "{expr} queries {name}, which the operator does not export"
            );
        }
    }
    // The check itself fails on a metric that does not exist.
    assert!(!exported("llmscaler_no_such_metric"));
    assert!(!exported("llmscaler_writes_bucket"));
}

#[test]
fn the_readme_lists_every_panel_with_its_queries() {
    let readme = read("README.md");
    for panel in dashboard()["panels"].as_array().expect("panels") {
        let title = panel["title"].as_str().expect("title");
        assert!(readme.contains(title), "README lacks panel {title:?}");
        for target in panel["targets"].as_array().expect("targets") {
            let expr = target["expr"].as_str().expect("expr");
            assert!(readme.contains(expr), "README lacks the query {expr}");
        }
    }
}
