//! The committed CRD YAML must match the Rust types. Regenerate with
//! `cargo run -q -- crd > crds/llmscaler.yaml`.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // a test: a failed expectation fails it

#[test]
fn committed_crd_matches_the_types() {
    let generated = llmscaler_api::crd_yaml().expect("CRD serializes");
    let committed = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/llmscaler.yaml"))
        .expect("crds/llmscaler.yaml exists");
    assert!(
        generated == committed,
        "crds/llmscaler.yaml is out of date: run `cargo run -q -- crd > crds/llmscaler.yaml`"
    );
}

#[test]
fn crd_carries_cel_rules_printer_columns_and_list_map_conditions() {
    let yaml = llmscaler_api::crd_yaml().expect("CRD serializes");
    for needle in [
        "self.minReplicas <= self.maxReplicas",
        "customProvider is required when metricProvider is Custom",
        "metrics must not be empty under the Prometheus provider",
        "name: DesiredReplicas",
        "jsonPath: .status.currentReplicas",
        "x-kubernetes-list-type: map",
        "subresources:",
    ] {
        assert!(yaml.contains(needle), "CRD lacks {needle:?}");
    }
}
