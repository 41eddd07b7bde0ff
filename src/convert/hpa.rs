//! `autoscaling/v2` HorizontalPodAutoscaler → LLMScaler (docs/migrate.md#hpa-v2).
//!
//! An HPA names metrics served by an adapter (prometheus-adapter) rather than queries: each
//! `Pods`, `Object` or `External` metric becomes a PromQL query, given with `--query NAME=QUERY`
//! or guessed from the name (vLLM's `vllm:` series are served as `vllm_…` by the adapter rules
//! of the vLLM examples). `Resource` and `ContainerResource` metrics have no equivalent.

use llmscaler_api::{LLMScalerSpec, MetricSpec};
use serde_json::Value;

use super::{Draft, Findings, Options, behavior, int_field, metric_name, quantity};

/// The HPA's default `minReplicas`.
const HPA_MIN_REPLICAS: i32 = 1;

/// How the HPA turns a metric value into replicas.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Semantics {
    /// `ceil(current × value / target)`: llmscaler's own ratio, the query is used as is.
    Ratio,
    /// `ceil(value / target)` over a fleet total: the query becomes a per-pod average.
    Total,
}

/// Converts one HorizontalPodAutoscaler.
pub fn convert(doc: &Value, options: &Options, findings: &mut Findings) -> Draft {
    findings.unknown_keys(
        doc,
        "",
        &["apiVersion", "kind", "metadata", "spec", "status"],
    );
    if doc["apiVersion"].as_str() != Some("autoscaling/v2") {
        findings.refuse(
            "apiVersion",
            format!(
                "{} is not converted: read it back as autoscaling/v2 (kubectl get hpa NAME -o yaml)",
                doc["apiVersion"]
            ),
        );
    }
    let metadata = super::metadata(&doc["metadata"], &[], findings);
    let namespace = doc["metadata"]["namespace"].as_str();
    let spec = &doc["spec"];
    findings.unknown_keys(
        spec,
        "spec",
        &[
            "scaleTargetRef",
            "minReplicas",
            "maxReplicas",
            "metrics",
            "behavior",
        ],
    );
    let target_ref = super::target_ref(&spec["scaleTargetRef"], "spec.scaleTargetRef", findings);
    let min = match int_field(&spec["minReplicas"]) {
        Ok(v) => v.unwrap_or(HPA_MIN_REPLICAS),
        Err(e) => {
            findings.refuse("spec.minReplicas", e);
            HPA_MIN_REPLICAS
        }
    };
    let max = match int_field(&spec["maxReplicas"]) {
        Ok(Some(v)) => v,
        Ok(None) => {
            findings.refuse("spec.maxReplicas", "is required");
            0
        }
        Err(e) => {
            findings.refuse("spec.maxReplicas", e);
            0
        }
    };
    let server_address = match &options.server_address {
        Some(address) => address.clone(),
        None => {
            findings.refuse(
                "spec.metrics",
                "an HPA names adapter metrics, not a Prometheus: pass --server-address URL",
            );
            String::new()
        }
    };
    let sync = llmscaler_api::defaults::SYNC_PERIOD_SECONDS;
    let (scale_down, scale_up) =
        behavior::convert(&spec["behavior"], "spec.behavior", sync, findings);

    let mut metrics = Vec::new();
    let items = spec["metrics"].as_array().cloned().unwrap_or_default();
    if items.is_empty() {
        findings.refuse(
            "spec.metrics",
            "not set: the HPA's default is 80 % CPU utilization, which has no equivalent",
        );
    }
    for (i, item) in items.iter().enumerate() {
        let path = format!("spec.metrics[{i}]");
        if let Some(metric) = convert_metric(item, &path, namespace, options, findings) {
            metrics.push(metric);
        }
    }
    let mut spec = LLMScalerSpec::new(target_ref, server_address, min, max);
    spec.metrics = Some(metrics);
    spec.scale_down = Some(scale_down);
    spec.scale_up = Some(scale_up);
    Draft { metadata, spec }
}

fn convert_metric(
    item: &Value,
    path: &str,
    namespace: Option<&str>,
    options: &Options,
    findings: &mut Findings,
) -> Option<MetricSpec> {
    let kind = item["type"].as_str().unwrap_or_default();
    let (key, kind_known) = match kind {
        "Pods" => ("pods", true),
        "Object" => ("object", true),
        "External" => ("external", true),
        "Resource" | "ContainerResource" => {
            findings.refuse(
                format!("{path}.type"),
                format!(
                    "{kind:?} has no equivalent: llmscaler scales on PromQL queries, not on \
                     resource usage; GPU servers are better scaled on queue depth or KV-cache \
                     usage"
                ),
            );
            return None;
        }
        other => {
            findings.refuse(
                format!("{path}.type"),
                format!("{other:?} is not a metric type"),
            );
            return None;
        }
    };
    debug_assert!(kind_known);
    findings.unknown_keys(item, path, &["type", key]);
    let body = &item[key];
    let bpath = format!("{path}.{key}");
    findings.unknown_keys(body, &bpath, &["metric", "target", "describedObject"]);
    let metric = &body["metric"];
    findings.unknown_keys(metric, &format!("{bpath}.metric"), &["name", "selector"]);
    let name = metric["name"].as_str().unwrap_or_default();
    if name.is_empty() {
        findings.refuse(format!("{bpath}.metric.name"), "is required");
        return None;
    }
    let target = &body["target"];
    let tpath = format!("{bpath}.target");
    findings.unknown_keys(
        target,
        &tpath,
        &["type", "value", "averageValue", "averageUtilization"],
    );
    let (semantics, raw_target) = match (kind, target["type"].as_str()) {
        // The HPA averages a Pods metric over the pods itself, then applies the ratio.
        ("Pods", Some("AverageValue")) => (Semantics::Ratio, &target["averageValue"]),
        (_, Some("Value")) if kind != "Pods" => (Semantics::Ratio, &target["value"]),
        (_, Some("AverageValue")) => (Semantics::Total, &target["averageValue"]),
        (_, other) => {
            findings.refuse(
                format!("{tpath}.type"),
                format!("{other:?} has no equivalent for a {kind} metric"),
            );
            return None;
        }
    };
    let target_value = match quantity(raw_target) {
        Ok(t) => t,
        Err(e) => {
            findings.refuse(&tpath, e);
            return None;
        }
    };
    let query = match options.queries.get(name) {
        Some(query) => {
            findings.note(
                format!("{bpath}.metric.name"),
                format!(
                    "{name:?} -> {query:?} (--query), used as given: it must return {}",
                    match semantics {
                        Semantics::Ratio if kind == "Pods" => "the average per pod",
                        Semantics::Ratio => "the value the HPA compared with target.value",
                        Semantics::Total => "the per-replica average of the fleet total",
                    }
                ),
            );
            query.clone()
        }
        None => {
            let mut matchers = Vec::new();
            if kind != "External"
                && let Some(ns) = namespace
            {
                matchers.push(format!("namespace=\"{ns}\""));
            }
            if kind == "Object" {
                let described = &body["describedObject"];
                let dkind = described["kind"].as_str().unwrap_or_default();
                let dname = described["name"].as_str().unwrap_or_default();
                if dkind != "Namespace" && !dkind.is_empty() {
                    matchers.push(format!("{}=\"{dname}\"", dkind.to_ascii_lowercase()));
                }
            }
            matchers.extend(selector_matchers(
                &metric["selector"],
                &format!("{bpath}.metric.selector"),
                findings,
            ));
            let series = adapter_series(name);
            if !is_metric_name(&series) {
                findings.refuse(
                    format!("{bpath}.metric.name"),
                    format!(
                        "{name:?} is not a Prometheus metric name, so no query can be guessed \
                         from it: pass --query {name}=QUERY"
                    ),
                );
                return None;
            }
            let selector = if matchers.is_empty() {
                series
            } else {
                format!("{series}{{{}}}", matchers.join(","))
            };
            let aggregation = match (kind, semantics) {
                ("Pods", _) | (_, Semantics::Total) => "avg",
                _ => "sum",
            };
            let query = format!("{aggregation}({selector})");
            findings.note(
                format!("{bpath}.metric.name"),
                format!(
                    "{name:?} -> {query:?}, guessed from the adapter name{}; check it with \
                     llmscaler probe, or pass --query {name}=QUERY",
                    if semantics == Semantics::Total {
                        " (target type AverageValue divides a fleet total: a per-pod average \
                         is equal when each ready pod has one series)"
                    } else {
                        ""
                    }
                ),
            );
            query
        }
    };
    Some(MetricSpec {
        name: Some(metric_name(name)),
        query,
        target: target_value,
        ..Default::default()
    })
}

/// The Prometheus series behind an adapter metric name: vLLM exports `vllm:…`, which the adapter
/// rules of the vLLM examples serve as `vllm_…` (Kubernetes names cannot hold `:`).
pub(crate) fn adapter_series(name: &str) -> String {
    match name.strip_prefix("vllm_") {
        Some(rest) => format!("vllm:{rest}"),
        None => name.to_owned(),
    }
}

/// Whether `name` is a valid Prometheus metric name (`[a-zA-Z_:][a-zA-Z0-9_:]*`).
fn is_metric_name(name: &str) -> bool {
    let mut chars = name.chars();
    chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_' || c == ':')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_' || c == ':')
}

/// PromQL label matchers for a metric `selector` (`matchLabels`, `matchExpressions`).
fn selector_matchers(selector: &Value, path: &str, findings: &mut Findings) -> Vec<String> {
    findings.unknown_keys(selector, path, &["matchLabels", "matchExpressions"]);
    let mut out = Vec::new();
    for (k, v) in selector["matchLabels"].as_object().into_iter().flatten() {
        out.push(format!("{k}=\"{}\"", v.as_str().unwrap_or_default()));
    }
    for (i, expr) in selector["matchExpressions"]
        .as_array()
        .into_iter()
        .flatten()
        .enumerate()
    {
        let key = expr["key"].as_str().unwrap_or_default();
        let values: Vec<&str> = expr["values"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(Value::as_str)
            .collect();
        match expr["operator"].as_str() {
            Some("In") => out.push(format!("{key}=~\"{}\"", values.join("|"))),
            Some("NotIn") => out.push(format!("{key}!~\"{}\"", values.join("|"))),
            Some("Exists") => out.push(format!("{key}!=\"\"")),
            Some("DoesNotExist") => out.push(format!("{key}=\"\"")),
            other => findings.refuse(
                format!("{path}.matchExpressions[{i}].operator"),
                format!("{other:?} is not a label selector operator"),
            ),
        }
    }
    out
}
