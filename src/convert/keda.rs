//! KEDA `ScaledObject` (`keda.sh/v1alpha1`) → LLMScaler (docs/migrate.md#keda-scaledobject).
//!
//! Prometheus triggers become `spec.metrics`, cron triggers `spec.schedules` floors, the HPA
//! behavior `spec.scaleDown`/`spec.scaleUp`. A Prometheus trigger's default `metricType`
//! (`AverageValue`) divides the query's fleet total by `threshold`, while llmscaler multiplies a
//! per-replica value by the ready replicas: a top-level `sum(...)` becomes `avg(...)` (equal when
//! each ready pod contributes one series, as vLLM's per-pod metrics do); any other query is
//! refused for that trigger.

use std::collections::BTreeMap;

use llmscaler_api::names::PAUSED_ANNOTATION;
use llmscaler_api::{LLMScalerSpec, MetricSpec, ScheduleSpec};
use serde_json::Value;

use super::{Draft, Findings, Options, behavior, int_field, metric_name, quantity, scalar_string};

/// KEDA's default `maxReplicaCount`.
const KEDA_MAX_REPLICAS: i32 = 100;
/// KEDA's default `cooldownPeriod`, seconds.
const KEDA_COOLDOWN_SECONDS: i32 = 300;

/// Converts one ScaledObject.
pub fn convert(doc: &Value, options: &Options, findings: &mut Findings) -> Draft {
    findings.unknown_keys(
        doc,
        "",
        &["apiVersion", "kind", "metadata", "spec", "status"],
    );
    let metadata = super::metadata(
        &doc["metadata"],
        &[
            ("autoscaling.keda.sh/paused", PAUSED_ANNOTATION),
            ("autoscaling.keda.sh/paused-replicas", ""),
        ],
        findings,
    );
    let spec = &doc["spec"];
    findings.unknown_keys(
        spec,
        "spec",
        &[
            "scaleTargetRef",
            "pollingInterval",
            "cooldownPeriod",
            "initialCooldownPeriod",
            "idleReplicaCount",
            "minReplicaCount",
            "maxReplicaCount",
            "fallback",
            "advanced",
            "triggers",
        ],
    );
    let target_ref = super::target_ref(&spec["scaleTargetRef"], "spec.scaleTargetRef", findings);
    let int = |findings: &mut Findings, key: &str| match int_field(&spec[key]) {
        Ok(v) => v,
        Err(e) => {
            findings.refuse(format!("spec.{key}"), e);
            None
        }
    };
    let min = int(findings, "minReplicaCount").unwrap_or(0);
    let max = int(findings, "maxReplicaCount").unwrap_or(KEDA_MAX_REPLICAS);
    let polling = int(findings, "pollingInterval");
    let cooldown = int(findings, "cooldownPeriod");
    if let Some(idle) = int(findings, "idleReplicaCount") {
        findings.refuse(
            "spec.idleReplicaCount",
            format!(
                "{idle} has no equivalent: llmscaler has no idle size below minReplicas; use \
                 minReplicaCount 0 (a fleet at zero wakes when a metric recommends a replica)"
            ),
        );
    }
    if !spec["initialCooldownPeriod"].is_null() {
        findings.refuse(
            "spec.initialCooldownPeriod",
            "has no equivalent: llmscaler has no start-up delay before the first scale to zero",
        );
    }
    if !spec["fallback"].is_null() {
        findings.refuse(
            "spec.fallback",
            "has no equivalent: llmscaler never substitutes a replica count; an unmeasurable \
             metric is skipped and with none measurable the fleet is held at its size",
        );
    }
    let sync = polling.unwrap_or(llmscaler_api::defaults::SYNC_PERIOD_SECONDS);
    if polling.is_none() {
        findings.note(
            "spec.pollingInterval",
            "not set: KEDA's 30 s only paces activation (0 <-> 1); the HPA behind a \
             ScaledObject reads the metrics every 15 s, llmscaler's default syncPeriodSeconds",
        );
    }

    let advanced = &spec["advanced"];
    findings.unknown_keys(
        advanced,
        "spec.advanced",
        &[
            "restoreToOriginalReplicaCount",
            "horizontalPodAutoscalerConfig",
            "scalingModifiers",
        ],
    );
    if advanced["restoreToOriginalReplicaCount"].as_bool() == Some(true) {
        findings.refuse(
            "spec.advanced.restoreToOriginalReplicaCount",
            "true has no equivalent: deleting an LLMScaler leaves the replicas as they are \
             (llmscaler release hands the field back)",
        );
    }
    if !advanced["scalingModifiers"].is_null() {
        findings.refuse(
            "spec.advanced.scalingModifiers",
            "has no equivalent: llmscaler takes the largest recommendation of its metrics; \
             write the formula as one PromQL query",
        );
    }
    let hpa_config = &advanced["horizontalPodAutoscalerConfig"];
    findings.unknown_keys(
        hpa_config,
        "spec.advanced.horizontalPodAutoscalerConfig",
        &["name", "behavior"],
    );
    if hpa_config.get("name").is_some() {
        findings.note(
            "spec.advanced.horizontalPodAutoscalerConfig.name",
            "dropped (llmscaler creates no HPA)",
        );
    }
    let (mut scale_down, scale_up) = behavior::convert(
        &hpa_config["behavior"],
        "spec.advanced.horizontalPodAutoscalerConfig.behavior",
        sync,
        findings,
    );
    let cooldown_seconds = cooldown.unwrap_or(KEDA_COOLDOWN_SECONDS);
    if min == 0 {
        let window = scale_down.stabilization_window_seconds.unwrap_or(0);
        if cooldown_seconds > window {
            scale_down.stabilization_window_seconds = Some(cooldown_seconds);
            findings.note(
                "spec.cooldownPeriod",
                format!(
                    "{cooldown_seconds} s before scaling to zero folded into \
                     spec.scaleDown.stabilizationWindowSeconds (was {window}): it now damps \
                     every scale-down, not only the last step to zero"
                ),
            );
        }
    } else if cooldown.is_some() {
        findings.note(
            "spec.cooldownPeriod",
            "dropped: KEDA applies it only when scaling to zero, and minReplicaCount is above 0",
        );
    }

    let mut server_address = options.server_address.clone();
    let mut headers = BTreeMap::new();
    let mut metrics = Vec::new();
    let mut schedules = Vec::new();
    let triggers = spec["triggers"].as_array().cloned().unwrap_or_default();
    if triggers.is_empty() {
        findings.refuse("spec.triggers", "is empty: nothing to scale on");
    }
    for (i, trigger) in triggers.iter().enumerate() {
        let path = format!("spec.triggers[{i}]");
        findings.unknown_keys(
            trigger,
            &path,
            &[
                "type",
                "name",
                "metadata",
                "metricType",
                "authenticationRef",
                "useCachedMetrics",
            ],
        );
        let kind = trigger["type"].as_str().unwrap_or_default();
        match kind {
            "prometheus" => {
                let converted = prometheus_trigger(
                    trigger,
                    &path,
                    i,
                    min,
                    &mut server_address,
                    &mut headers,
                    options,
                    findings,
                );
                metrics.extend(converted);
            }
            "cron" => schedules.extend(cron_trigger(trigger, &path, i, findings)),
            "cpu" | "memory" => findings.refuse(
                format!("{path}.type"),
                format!(
                    "{kind:?} has no equivalent: llmscaler scales on PromQL queries, not on \
                     resource usage; GPU servers are better scaled on queue depth or KV-cache \
                     usage (a prometheus trigger)"
                ),
            ),
            other => findings.refuse(
                format!("{path}.type"),
                format!(
                    "{other:?} has no equivalent: llmscaler reads Prometheus (or a decision \
                     server); export the signal to Prometheus and use a prometheus trigger"
                ),
            ),
        }
    }
    let mut spec = LLMScalerSpec::new(target_ref, server_address.unwrap_or_default(), min, max);
    if min == 0 {
        spec.activation = activation(&triggers, findings);
    }
    spec.server_headers = (!headers.is_empty()).then_some(headers);
    spec.metrics = Some(metrics);
    spec.sync_period_seconds = polling;
    spec.scale_down = Some(scale_down);
    spec.scale_up = Some(scale_up);
    spec.schedules = (!schedules.is_empty()).then_some(schedules);
    Draft { metadata, spec }
}

/// `spec.activation` of a ScaledObject with `minReplicaCount: 0`: KEDA wakes the target when any
/// trigger's value exceeds its `activationThreshold` (default 0); llmscaler takes one query, the
/// first Prometheus trigger's (as written: a fleet total is what wakes a fleet at zero). Further
/// triggers are named in a note.
fn activation(triggers: &[Value], findings: &mut Findings) -> Option<llmscaler_api::Activation> {
    let mut prometheus = triggers
        .iter()
        .enumerate()
        .filter(|(_, t)| t["type"] == "prometheus");
    let (first, trigger) = prometheus.next()?;
    let meta = &trigger["metadata"];
    let query = scalar_string(&meta["query"]).filter(|q| !q.is_empty())?;
    let threshold = scalar_string(&meta["activationThreshold"]).unwrap_or_else(|| "0".to_owned());
    let others: Vec<String> = prometheus
        .map(|(i, _)| format!("spec.triggers[{i}]"))
        .collect();
    findings.note(
        format!("spec.triggers[{first}].metadata.activationThreshold"),
        format!(
            "the fleet wakes from zero on this trigger's query above {threshold} \
             (spec.activation){}",
            if others.is_empty() {
                String::new()
            } else {
                format!("; {} do not wake it", others.join(", "))
            }
        ),
    );
    Some(llmscaler_api::Activation {
        query,
        threshold: Some(threshold),
    })
}

#[allow(clippy::too_many_arguments)]
fn prometheus_trigger(
    trigger: &Value,
    path: &str,
    index: usize,
    min: i32,
    server_address: &mut Option<String>,
    headers: &mut BTreeMap<String, String>,
    options: &Options,
    findings: &mut Findings,
) -> Option<MetricSpec> {
    let meta = &trigger["metadata"];
    let mpath = format!("{path}.metadata");
    findings.unknown_keys(
        meta,
        &mpath,
        &[
            "serverAddress",
            "query",
            "threshold",
            "activationThreshold",
            "metricName",
            "namespace",
            "customHeaders",
            "cortexOrgID",
            "ignoreNullValues",
            "unsafeSsl",
            "queryParameters",
            "authModes",
        ],
    );
    let credentials = "has no equivalent: credentials from a TriggerAuthentication (a Secret or a \
                       pod identity) are not read; llmscaler sends spec.serverHeaders verbatim \
                       (e.g. Authorization: Bearer <token>), set them after converting";
    if !trigger["authenticationRef"].is_null() {
        findings.refuse(format!("{path}.authenticationRef"), credentials);
    }
    if let Some(modes) = meta["authModes"].as_str() {
        findings.refuse(
            format!("{mpath}.authModes"),
            format!("{modes:?} {credentials}"),
        );
    }
    for key in ["namespace", "queryParameters"] {
        if !meta[key].is_null() {
            findings.refuse(
                format!("{mpath}.{key}"),
                "has no equivalent: llmscaler sends no query parameters besides the query",
            );
        }
    }
    if scalar_string(&meta["unsafeSsl"]).as_deref() == Some("true") {
        findings.refuse(
            format!("{mpath}.unsafeSsl"),
            "true has no equivalent: llmscaler always verifies the server's certificate",
        );
    }
    if !trigger["useCachedMetrics"].is_null() {
        findings.note(
            format!("{path}.useCachedMetrics"),
            "dropped (every sync queries once)",
        );
    }
    match scalar_string(&meta["ignoreNullValues"]).as_deref() {
        Some("false") => {}
        _ => findings.note(
            format!("{mpath}.ignoreNullValues"),
            "KEDA reads an empty result as 0; llmscaler skips the metric (never read as 0) \
             and holds the fleet when no metric is measurable",
        ),
    }
    if let Some(org) = scalar_string(&meta["cortexOrgID"]) {
        headers.insert("X-Scope-OrgID".to_owned(), org);
    }
    if let Some(raw) = scalar_string(&meta["customHeaders"]) {
        for pair in raw.split(',').filter(|p| !p.trim().is_empty()) {
            match pair.split_once('=') {
                Some((k, v)) => {
                    headers.insert(k.trim().to_owned(), v.trim().to_owned());
                }
                None => findings.refuse(
                    format!("{mpath}.customHeaders"),
                    format!("{pair:?} is not KEY=VALUE"),
                ),
            }
        }
    }
    let address = scalar_string(&meta["serverAddress"]).unwrap_or_default();
    match (options.server_address.as_deref(), server_address.as_deref()) {
        (Some(_), _) => {}
        (None, None) => *server_address = Some(address),
        (None, Some(first)) if first == address => {}
        (None, Some(first)) => findings.refuse(
            format!("{mpath}.serverAddress"),
            format!(
                "{address:?} differs from the first trigger's {first:?}: an LLMScaler reads one \
                 Prometheus (pass --server-address to choose)"
            ),
        ),
    }

    let threshold = match quantity(&meta["threshold"]) {
        Ok(t) => t,
        Err(e) => {
            findings.refuse(format!("{mpath}.threshold"), e);
            return None;
        }
    };
    match scalar_string(&meta["activationThreshold"]).map(|a| a.parse::<f64>()) {
        None | Some(Ok(0.0)) => {}
        Some(Ok(a)) if min > 0 => findings.note(
            format!("{mpath}.activationThreshold"),
            format!("{a} dropped: KEDA applies it only between 0 and 1 replica, and minReplicaCount is above 0"),
        ),
        Some(Ok(a)) if a.is_finite() && a >= 0.0 => {}
        Some(_) => findings.refuse(
            format!("{mpath}.activationThreshold"),
            format!("{} is not a number of 0 or more", meta["activationThreshold"]),
        ),
    }
    let query = scalar_string(&meta["query"]).unwrap_or_default();
    if query.is_empty() {
        findings.refuse(format!("{mpath}.query"), "is required");
        return None;
    }
    let query = match trigger["metricType"].as_str() {
        Some("Value") => query,
        None | Some("AverageValue") => match per_replica(&query) {
            Some(rewritten) => {
                if rewritten != query {
                    findings.note(
                        format!("{mpath}.query"),
                        format!(
                            "{query:?} -> {rewritten:?}: metricType AverageValue divides the fleet \
                             total by threshold, llmscaler multiplies a per-replica value by the \
                             ready replicas; equal when each ready pod has one series"
                        ),
                    );
                }
                rewritten
            }
            None => {
                findings.refuse(
                    format!("{mpath}.query"),
                    format!(
                        "{query:?} under metricType AverageValue has no equivalent: KEDA divides \
                         this fleet total by threshold, llmscaler multiplies a per-replica value \
                         by the ready replicas; write it as a per-replica average (avg(...)), or \
                         set metricType: Value if it already is one"
                    ),
                );
                return None;
            }
        },
        Some(other) => {
            findings.refuse(
                format!("{path}.metricType"),
                format!("{other:?} has no equivalent for a Prometheus query"),
            );
            return None;
        }
    };
    let name = trigger["name"]
        .as_str()
        .or_else(|| meta["metricName"].as_str())
        .map(metric_name)
        .unwrap_or_else(|| format!("metric{index}"));
    Some(MetricSpec {
        name: Some(name),
        query,
        target: threshold,
        ..Default::default()
    })
}

/// The per-replica form of a fleet-total query: `sum(X)` → `avg(X)`, a bare vLLM selector
/// (one series per pod) → `avg(selector)`; `None` when there is no faithful rewrite.
pub fn per_replica(query: &str) -> Option<String> {
    let q = query.trim();
    if let Some(inner) = q.strip_prefix("sum").map(str::trim_start)
        && inner.starts_with('(')
        && closes_at_end(inner)
    {
        return Some(format!("avg{inner}"));
    }
    let bare = q
        .chars()
        .take_while(|c| c.is_ascii_alphanumeric() || *c == '_' || *c == ':')
        .count();
    let rest = &q[bare..];
    let selector_only = rest.is_empty()
        || (rest.starts_with('{') && rest.ends_with('}') && rest.matches('}').count() == 1);
    if q.starts_with("vllm:") && selector_only {
        return Some(format!("avg({q})"));
    }
    None
}

/// Whether the parenthesis opening `text` closes at its last character.
fn closes_at_end(text: &str) -> bool {
    let mut depth = 0usize;
    let mut in_string: Option<char> = None;
    for (i, c) in text.char_indices() {
        match (in_string, c) {
            (Some(q), c) if c == q => in_string = None,
            (Some(_), _) => {}
            (None, '"' | '\'' | '`') => in_string = Some(c),
            (None, '(') => depth += 1,
            (None, ')') => {
                depth = depth.saturating_sub(1);
                if depth == 0 {
                    return i == text.len() - 1;
                }
            }
            _ => {}
        }
    }
    false
}

fn cron_trigger(
    trigger: &Value,
    path: &str,
    index: usize,
    findings: &mut Findings,
) -> Option<ScheduleSpec> {
    let meta = &trigger["metadata"];
    let mpath = format!("{path}.metadata");
    findings.unknown_keys(
        meta,
        &mpath,
        &["timezone", "start", "end", "desiredReplicas"],
    );
    let desired = match int_field(&meta["desiredReplicas"]) {
        Ok(Some(n)) => n,
        Ok(None) => {
            findings.refuse(format!("{mpath}.desiredReplicas"), "is required");
            return None;
        }
        Err(e) => {
            findings.refuse(format!("{mpath}.desiredReplicas"), e);
            return None;
        }
    };
    findings.note(
        path,
        "cron trigger -> spec.schedules floor (minReplicas while active, as KEDA's \
         desiredReplicas is the largest of the triggers)",
    );
    Some(ScheduleSpec {
        name: trigger["name"]
            .as_str()
            .map(metric_name)
            .unwrap_or_else(|| format!("cron{index}")),
        start: scalar_string(&meta["start"]).unwrap_or_default(),
        end: scalar_string(&meta["end"]),
        time_zone: scalar_string(&meta["timezone"]),
        min_replicas: Some(desired),
        ..ScheduleSpec::default()
    })
}

#[cfg(test)]
mod tests {
    use super::per_replica;

    #[test]
    fn per_replica_rewrites_only_faithful_forms() {
        assert_eq!(
            per_replica("sum(rate(http_requests_total{deployment=\"my-deployment\"}[2m]))")
                .as_deref(),
            Some("avg(rate(http_requests_total{deployment=\"my-deployment\"}[2m]))")
        );
        assert_eq!(
            per_replica("vllm:num_requests_waiting").as_deref(),
            Some("avg(vllm:num_requests_waiting)")
        );
        assert_eq!(
            per_replica("vllm:num_requests_waiting{model_name=\"m\"}").as_deref(),
            Some("avg(vllm:num_requests_waiting{model_name=\"m\"})")
        );
        assert_eq!(per_replica("sum(a) / sum(b)"), None);
        assert_eq!(per_replica("sum by (pod) (a)"), None);
        assert_eq!(per_replica("vector(100)"), None);
        assert_eq!(per_replica("gateway_queue_depth"), None);
        assert_eq!(
            per_replica("sum(rate(vllm:num_incoming_requests_total[1m]) > bool 0)").as_deref(),
            Some("avg(rate(vllm:num_incoming_requests_total[1m]) > bool 0)")
        );
    }
}
