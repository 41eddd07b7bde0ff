//! The model's exposition against real vLLM 0.32's `/metrics`, captured by
//! `e2e/real-vllm capture` into `tests/fixtures/vllm-0.32/` (idle, saturated mid-burst, draining
//! after SIGTERM): every family the model publishes exists in real vLLM with the same type and
//! the same label names, and takes only label values real vLLM uses (issue 22 item 4; how they
//! were captured: `tests/fixtures/vllm-0.32/README.md`).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // a test: a failed expectation fails it

use std::collections::{BTreeMap, BTreeSet};

use llmscaler_loadmodel::exposition::{self, Labels};
use llmscaler_loadmodel::replica::{Params, Replica};
use llmscaler_loadmodel::trace::Request;

const IDLE: &str = include_str!("../../tests/fixtures/vllm-0.32/idle.txt");
const SATURATED: &str = include_str!("../../tests/fixtures/vllm-0.32/saturated.txt");
const DRAINING: &str = include_str!("../../tests/fixtures/vllm-0.32/draining.txt");

/// The labels Prometheus' target (or the emulator, for its pods) adds; not vLLM's own.
const TARGET_LABELS: [&str; 3] = ["pod", "namespace", "app"];

/// One sample line of the text format: metric name, labels, value. Strict: a line that is not
/// `name{k="v",...} value` or `name value` fails the test.
fn sample(line: &str) -> (String, Vec<(String, String)>, f64) {
    let (series, value) = line
        .rsplit_once(' ')
        .unwrap_or_else(|| panic!("no value: {line}"));
    let value: f64 = match value {
        "+Inf" => f64::INFINITY,
        "-Inf" => f64::NEG_INFINITY,
        v => v.parse().unwrap_or_else(|_| panic!("bad value: {line}")),
    };
    let Some((name, rest)) = series.split_once('{') else {
        return (series.to_owned(), Vec::new(), value);
    };
    let body = rest
        .strip_suffix('}')
        .unwrap_or_else(|| panic!("unclosed labels: {line}"));
    let mut labels = Vec::new();
    let mut chars = body.chars().peekable();
    while chars.peek().is_some() {
        let key: String = chars.by_ref().take_while(|c| *c != '=').collect();
        assert_eq!(chars.next(), Some('"'), "label value not quoted: {line}");
        let mut value = String::new();
        while let Some(c) = chars.next() {
            match c {
                '\\' => value.push(chars.next().unwrap_or('\\')),
                '"' => break,
                c => value.push(c),
            }
        }
        labels.push((key.trim_start_matches(',').to_owned(), value));
        if chars.peek() == Some(&',') {
            chars.next();
        }
    }
    (name.to_owned(), labels, value)
}

/// Per `vllm:` family (as its `# TYPE` line names it): its type, its label names (the target's
/// labels and the histogram's `le` left out) and every value each label takes.
type Families = BTreeMap<String, (String, BTreeSet<String>, BTreeMap<String, BTreeSet<String>>)>;

fn families(text: &str) -> Families {
    let mut types = BTreeMap::new();
    let mut out = Families::new();
    for line in text.lines() {
        if let Some(rest) = line.strip_prefix("# TYPE ") {
            let (name, kind) = rest.split_once(' ').unwrap_or_else(|| panic!("{line}"));
            types.insert(name.to_owned(), kind.to_owned());
            continue;
        }
        if line.starts_with('#') || line.is_empty() {
            continue;
        }
        let (name, labels, _) = sample(line);
        if !name.starts_with("vllm:") {
            continue;
        }
        let family = ["_bucket", "_sum", "_count"]
            .iter()
            .find_map(|suffix| {
                let base = name.strip_suffix(suffix)?;
                (types.get(base).map(String::as_str) == Some("histogram")).then(|| base.to_owned())
            })
            .unwrap_or(name);
        let kind = types
            .get(&family)
            .unwrap_or_else(|| panic!("{family} has no # TYPE line"))
            .clone();
        let entry = out
            .entry(family)
            .or_insert_with(|| (kind, BTreeSet::new(), BTreeMap::new()));
        for (label, value) in labels {
            if TARGET_LABELS.contains(&label.as_str()) || label == "le" {
                continue;
            }
            entry.1.insert(label.clone());
            entry.2.entry(label).or_default().insert(value);
        }
    }
    out
}

fn gauge(text: &str, name: &str) -> f64 {
    text.lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
        .map(sample)
        .find(|(n, _, _)| n == name)
        .map(|(_, _, v)| v)
        .unwrap_or_else(|| panic!("{name} missing"))
}

fn model_text() -> String {
    let mut replica = Replica::new("vllm-0", Params::default(), 0.0);
    for i in 0..40 {
        replica.enqueue(Request {
            arrival_s: f64::from(i) * 0.01,
            prompt_tokens: 500,
            output_tokens: 50,
        });
    }
    replica.advance_to(1.0);
    let labels: Labels = vec![
        ("pod".into(), "vllm-0".into()),
        ("namespace".into(), "inference".into()),
        ("app".into(), "vllm".into()),
    ];
    exposition::render("tiny-llama", &[(labels, replica.metrics())])
}

#[test]
fn the_fixtures_are_real_vllm_in_the_three_states() {
    assert_eq!(gauge(IDLE, "vllm:num_requests_running"), 0.0);
    assert_eq!(gauge(IDLE, "vllm:num_requests_waiting"), 0.0);
    assert!(gauge(SATURATED, "vllm:num_requests_waiting") > 0.0);
    assert!(gauge(SATURATED, "vllm:num_requests_running") > 0.0);
    assert!(
        gauge(DRAINING, "vllm:num_requests_running") > 0.0,
        "requests in flight after SIGTERM"
    );
}

#[test]
fn every_family_the_model_publishes_is_real_vllms_with_its_type_and_labels() {
    let mut real = families(IDLE);
    for text in [SATURATED, DRAINING] {
        for (name, (kind, labels, values)) in families(text) {
            let entry = real
                .entry(name)
                .or_insert((kind, BTreeSet::new(), BTreeMap::new()));
            entry.1.extend(labels);
            for (label, v) in values {
                entry.2.entry(label).or_default().extend(v);
            }
        }
    }
    let model = families(&model_text());
    assert!(
        model.len() >= 8,
        "the model publishes {} families",
        model.len()
    );
    for (name, (kind, labels, values)) in &model {
        let (real_kind, real_labels, real_values) = real
            .get(name)
            .unwrap_or_else(|| panic!("{name}: the model publishes it, real vLLM 0.32 does not"));
        assert_eq!(kind, real_kind, "{name}: type");
        assert_eq!(labels, real_labels, "{name}: label names");
        for (label, taken) in values {
            if label == "model_name" {
                continue;
            }
            let allowed = &real_values[label];
            assert!(
                taken.is_subset(allowed),
                "{name}: {label} takes {taken:?}, real vLLM only {allowed:?}"
            );
        }
    }
    // The families the operator and the docs read are published by both.
    for read in [
        "vllm:num_requests_running",
        "vllm:num_requests_waiting",
        "vllm:num_requests_waiting_by_reason",
        "vllm:kv_cache_usage_perc",
        "vllm:time_to_first_token_seconds",
        "vllm:request_success_total",
        "vllm:prompt_tokens_total",
        "vllm:generation_tokens_total",
    ] {
        assert!(real.contains_key(read), "real vLLM lacks {read}");
        assert!(model.contains_key(read), "the model lacks {read}");
    }
}
