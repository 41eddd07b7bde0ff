//! The upgrade and migration pages against the chart and the GitOps tools they name: the
//! upgrade command keeps the image tag locked to the chart's `appVersion`, and the migration
//! page carries the Argo CD `ignoreDifferences` and the Flux setting that let the operator own
//! `spec.replicas` next to them.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // a test: a failed expectation fails it

use std::path::Path;

use serde::Deserialize;

fn read(path: &str) -> String {
    let full = Path::new(env!("CARGO_MANIFEST_DIR")).join(path);
    std::fs::read_to_string(&full).unwrap_or_else(|e| panic!("{}: {e}", full.display()))
}

/// The YAML documents of every ```yaml block of `text`.
fn yaml_blocks(text: &str) -> Vec<serde_yaml::Value> {
    let mut docs = Vec::new();
    let mut block: Option<String> = None;
    for line in text.lines() {
        match (&mut block, line.trim_start()) {
            (None, l) if l.starts_with("```yaml") => block = Some(String::new()),
            (Some(b), l) if l.starts_with("```") => {
                for doc in serde_yaml::Deserializer::from_str(b) {
                    let value = serde_yaml::Value::deserialize(doc)
                        .unwrap_or_else(|e| panic!("a YAML block does not parse: {e}\n{b}"));
                    docs.push(value);
                }
                block = None;
            }
            (Some(b), _) => {
                b.push_str(line);
                b.push('\n');
            }
            (None, _) => {}
        }
    }
    docs
}

#[test]
fn upgrade_keeps_the_image_tag_of_the_chart() {
    // images/build tags the image with the chart's appVersion only: a `--set image.tag=NEW`
    // next to `--reuse-values` runs an image no build produced, and `--reuse-values` alone
    // drops the new chart's defaults.
    let upgrade = read("docs/upgrade.md");
    let commands: Vec<&str> = upgrade
        .lines()
        .filter(|l| l.trim_start().starts_with("helm upgrade"))
        .collect();
    assert!(!commands.is_empty(), "docs/upgrade.md has no helm upgrade");
    for command in commands {
        assert!(!command.contains("image.tag="), "{command}");
        assert!(
            !command.contains("--reuse-values"),
            "{command}: --reuse-values keeps the old chart's values"
        );
    }
    assert!(
        upgrade.contains("appVersion"),
        "the page says where the tag comes from"
    );
}

#[test]
fn migrate_shows_argo_cd_ignore_differences_and_flux() {
    let migrate = read("docs/migrate.md");
    let docs = yaml_blocks(&migrate);
    let application = docs
        .iter()
        .find(|d| d["kind"] == "Application")
        .expect("an Argo CD Application in docs/migrate.md");
    let spec = &application["spec"];
    let ignored = spec["ignoreDifferences"]
        .as_sequence()
        .expect("spec.ignoreDifferences");
    assert!(
        ignored.iter().any(|i| i["kind"] == "Deployment"
            && i["jsonPointers"]
                .as_sequence()
                .is_some_and(|p| p.iter().any(|p| p == "/spec/replicas"))),
        "{ignored:?}"
    );
    let options = spec["syncPolicy"]["syncOptions"]
        .as_sequence()
        .expect("spec.syncPolicy.syncOptions");
    assert!(
        options.iter().any(|o| o == "RespectIgnoreDifferences=true"),
        "{options:?}"
    );
    let kustomization = docs
        .iter()
        .find(|d| {
            d["kind"] == "Kustomization"
                && d["apiVersion"]
                    .as_str()
                    .is_some_and(|v| v.starts_with("kustomize.toolkit.fluxcd.io/"))
        })
        .expect("a Flux Kustomization in docs/migrate.md");
    assert!(!kustomization["spec"]["interval"].is_null());
}
