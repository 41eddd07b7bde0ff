//! Issue 11, item 8 (`docs/security.md#schema`): basic validity does not depend on the webhook
//! pod. Every int32 of the CRD schema has a `minimum` and a `maximum` (an out-of-range number in
//! one stored object must not break the list every other scaler is reconciled from),
//! `spec.metrics` has a `maxItems`, and the server address and headers carry CEL rules.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // a test: a failed expectation fails it

use kube::CustomResourceExt;
use llmscaler_api::LLMScaler;
use serde_json::Value;

fn schema() -> Value {
    let crd = serde_json::to_value(LLMScaler::crd()).expect("crd as json");
    crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"].clone()
}

fn walk(path: &str, node: &Value, found: &mut Vec<(String, Value)>) {
    if let Some(object) = node.as_object() {
        if object.get("format").and_then(Value::as_str) == Some("int32") {
            found.push((path.to_owned(), node.clone()));
        }
        for (key, child) in object {
            walk(&format!("{path}.{key}"), child, found);
        }
    } else if let Some(list) = node.as_array() {
        for (i, child) in list.iter().enumerate() {
            walk(&format!("{path}[{i}]"), child, found);
        }
    }
}

#[test]
fn every_int32_is_bounded() {
    let mut ints = Vec::new();
    walk("", &schema(), &mut ints);
    assert!(ints.len() >= 9, "{ints:?}");
    for (path, node) in ints {
        let max = node["maximum"].as_f64();
        let min = node["minimum"].as_f64();
        assert!(
            max.is_some_and(|m| m <= f64::from(i32::MAX)),
            "{path}: no int32 maximum: {node}"
        );
        assert!(
            min.is_some_and(|m| m >= f64::from(i32::MIN)),
            "{path}: no minimum: {node}"
        );
    }
}

#[test]
fn metrics_and_strings_are_bounded_and_server_rules_are_cel() {
    let spec = &schema()["properties"]["spec"]["properties"];
    assert_eq!(spec["metrics"]["maxItems"], 16);
    assert_eq!(
        spec["metrics"]["items"]["properties"]["query"]["maxLength"],
        8192
    );
    assert_eq!(spec["serverAddress"]["maxLength"], 2048);
    assert_eq!(spec["serverHeaders"]["maxProperties"], 32);
    let rules = |field: &str| -> String {
        spec[field]["x-kubernetes-validations"]
            .as_array()
            .map(|r| {
                r.iter()
                    .map(|x| x["rule"].to_string())
                    .collect::<Vec<_>>()
                    .join(" ")
            })
            .unwrap_or_default()
    };
    assert!(
        rules("serverAddress").contains("https?://[^/?#@]+"),
        "{}",
        rules("serverAddress")
    );
    assert!(
        rules("serverHeaders").contains("'range'"),
        "{}",
        rules("serverHeaders")
    );
    for field in ["apiVersion", "kind", "name"] {
        assert_eq!(
            spec["targetRef"]["properties"][field]["minLength"], 1,
            "{field}"
        );
    }
}
