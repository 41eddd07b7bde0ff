//! The chart's alerts (`charts/llmscaler/alerts/llmscaler.rules.yaml`, docs/metrics.md#alerts):
//! each one fires on the series it is meant for, checked by Prometheus' own `promtool test
//! rules` on the cases of `alerts.test.yaml`; every series an alert reads is one the operator
//! exports; and the page lists every alert.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // a test: a failed expectation fails it

use std::path::{Path, PathBuf};

use llmscaler::telemetry::EXPORTED;

fn alerts_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("charts/llmscaler/alerts")
}

fn rules() -> serde_yaml::Value {
    let text = std::fs::read_to_string(alerts_dir().join("llmscaler.rules.yaml")).expect("rules");
    serde_yaml::from_str(&text).expect("rules YAML")
}

fn alerts() -> Vec<(String, String)> {
    rules()["groups"]
        .as_sequence()
        .expect("groups")
        .iter()
        .flat_map(|g| g["rules"].as_sequence().cloned().unwrap_or_default())
        .map(|r| {
            (
                r["alert"].as_str().expect("alert").to_owned(),
                r["expr"].as_str().expect("expr").to_owned(),
            )
        })
        .collect()
}

#[test]
fn promtool_fires_each_alert_on_its_cases() {
    if let Err(err) =
        llmscaler_testkit::prometheus::promtool_test_rules(&alerts_dir(), "alerts.test.yaml")
    {
        panic!("{err:#}");
    }
    // Every alert has a case that expects it to fire.
    let cases = std::fs::read_to_string(alerts_dir().join("alerts.test.yaml")).expect("cases");
    for (alert, _) in alerts() {
        assert!(
            cases.contains(&format!(
                "alertname: {alert}\n        exp_alerts:\n          - "
            )),
            "{alert} has no case where it fires"
        );
    }
}

#[test]
fn alerts_read_exported_series_only_and_are_documented() {
    let page =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/metrics.md"))
            .expect("docs/metrics.md");
    let all = alerts();
    assert!(all.len() >= 6, "{all:?}");
    for (alert, expr) in &all {
        let mut names = expr.match_indices("llmscaler_").map(|(start, _)| {
            let rest = &expr[start..];
            let end = rest
                .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
                .unwrap_or(rest.len());
            &rest[start - start..end]
        });
        assert!(
            names.clone().next().is_some(),
            "{alert}: reads no llmscaler series"
        );
        assert!(
            names.all(|name| EXPORTED.iter().any(|e| {
                e.kind.suffixes().iter().any(|s| {
                    name.strip_prefix("llmscaler_")
                        .and_then(|n| n.strip_suffix(s))
                        == Some(e.name)
                })
            })),
            "{alert}: {expr} reads a series the operator does not export"
        );
        assert!(
            page.contains(&format!("`{alert}`")),
            "docs/metrics.md does not list {alert}"
        );
    }
}
