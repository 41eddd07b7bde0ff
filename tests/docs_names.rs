//! The README and `docs/` list every name the code writes into the cluster or exports, and list
//! nothing the code does not have: condition types, condition and Event reasons, decision
//! reasons, and the operator's metrics. Adding a reason to the code without documenting it fails
//! here.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // a test: a failed expectation fails it

use std::collections::BTreeSet;
use std::path::Path;

use llmscaler::telemetry::EXPORTED;
use llmscaler_api::names::{ConditionType, Reason};

fn read(path: &str) -> String {
    let full = Path::new(env!("CARGO_MANIFEST_DIR")).join(path);
    std::fs::read_to_string(&full).unwrap_or_else(|e| panic!("{}: {e}", full.display()))
}

/// Every name the code has: condition types, condition/Event reasons, decision reasons.
fn code_names() -> BTreeSet<&'static str> {
    ConditionType::ALL
        .iter()
        .map(|t| t.as_str())
        .chain(Reason::ALL.iter().map(|r| r.as_str()))
        .collect()
}

/// The backticked first cells of the Markdown table rows of `text`.
fn first_cells(text: &str) -> BTreeSet<String> {
    text.lines()
        .filter_map(|l| l.strip_prefix("| `"))
        .filter_map(|l| l.split('`').next())
        .map(str::to_owned)
        .collect()
}

#[test]
fn conditions_page_and_readme_list_every_condition_and_reason() {
    let conditions = read("docs/conditions.md");
    let readme = read("README.md");
    let rows = first_cells(&conditions);
    for name in code_names() {
        assert!(
            rows.contains(name),
            "docs/conditions.md has no table row for `{name}`"
        );
        assert!(
            readme.contains(&format!("`{name}`")),
            "README.md does not mention `{name}`"
        );
    }
}

#[test]
fn conditions_page_lists_nothing_the_code_does_not_have() {
    let known = code_names();
    for name in first_cells(&read("docs/conditions.md")) {
        assert!(
            known.contains(name.as_str()),
            "docs/conditions.md lists `{name}`, which the code does not have"
        );
    }
}

#[test]
fn metrics_page_and_readme_list_every_exported_metric() {
    let page = read("docs/metrics.md");
    let readme = read("README.md");
    let rows: BTreeSet<String> = first_cells(&page)
        .into_iter()
        .filter(|c| c.starts_with("llmscaler_"))
        .collect();
    let mut exported = BTreeSet::new();
    for exported_metric in EXPORTED {
        let full = format!("llmscaler_{}", exported_metric.name);
        let documented = rows
            .iter()
            .find(|r| **r == full || **r == format!("{full}_total"))
            .unwrap_or_else(|| panic!("docs/metrics.md has no row for {full}"));
        assert!(
            readme.contains(&format!("`{documented}`")),
            "README.md does not list `{documented}`"
        );
        exported.insert(documented.clone());
    }
    assert_eq!(
        rows, exported,
        "docs/metrics.md lists metrics the code does not export"
    );
}
