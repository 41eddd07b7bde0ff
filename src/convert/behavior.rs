//! The `behavior` block of an `autoscaling/v2` HorizontalPodAutoscaler (also a ScaledObject's
//! `advanced.horizontalPodAutoscalerConfig.behavior`) mapped to `spec.scaleDown` and
//! `spec.scaleUp`, with the HPA's defaults made explicit (docs/migrate.md#behavior).

use llmscaler_api::{ScaleDown, ScaleUp, ScaleUpPolicy, ScaleUpPolicyType, SelectPolicy};
use serde_json::Value;

use super::{Findings, int_field, scalar_string};

/// The HPA's default scale-down stabilization window, seconds.
pub(crate) const HPA_SCALE_DOWN_WINDOW_SECONDS: i32 = 300;
/// The HPA controller's default tolerance (`--horizontal-pod-autoscaler-tolerance`).
pub(crate) const HPA_TOLERANCE: &str = "0.1";

/// What a scale-down policy allows per period.
enum Cap {
    /// No limit (a `Percent` policy of 100 or more).
    Unlimited,
    /// At most this many replicas per sync.
    Step(i32),
}

/// Maps `behavior` (at `path`; `Value::Null` when absent) for a scaler syncing every
/// `sync_period_seconds`.
pub fn convert(
    behavior: &Value,
    path: &str,
    sync_period_seconds: i32,
    findings: &mut Findings,
) -> (ScaleDown, ScaleUp) {
    findings.unknown_keys(behavior, path, &["scaleDown", "scaleUp"]);
    let down = &behavior["scaleDown"];
    let up = &behavior["scaleUp"];
    let down_path = format!("{path}.scaleDown");
    let up_path = format!("{path}.scaleUp");
    let known = [
        "stabilizationWindowSeconds",
        "policies",
        "selectPolicy",
        "tolerance",
    ];
    findings.unknown_keys(down, &down_path, &known);
    findings.unknown_keys(up, &up_path, &known);

    let window = match int_field(&down["stabilizationWindowSeconds"]) {
        Ok(Some(w)) => w,
        Ok(None) => {
            findings.note(
                format!("{down_path}.stabilizationWindowSeconds"),
                format!(
                    "not set: the HPA's default {HPA_SCALE_DOWN_WINDOW_SECONDS} s, made explicit \
                     in spec.scaleDown.stabilizationWindowSeconds"
                ),
            );
            HPA_SCALE_DOWN_WINDOW_SECONDS
        }
        Err(e) => {
            findings.refuse(format!("{down_path}.stabilizationWindowSeconds"), e);
            HPA_SCALE_DOWN_WINDOW_SECONDS
        }
    };
    let max_step = scale_down_step(down, &down_path, sync_period_seconds, findings);
    let scale_down = ScaleDown {
        stabilization_window_seconds: Some(window),
        max_step_replicas: Some(max_step),
        ..ScaleDown::default()
    };

    match int_field(&up["stabilizationWindowSeconds"]) {
        Ok(None | Some(0)) => {}
        Ok(Some(w)) => findings.refuse(
            format!("{up_path}.stabilizationWindowSeconds"),
            format!(
                "{w} has no equivalent: llmscaler scales up at once, damped only by \
                 spec.scaleUp.policies (rate caps) and spec.scaleUp.tolerance"
            ),
        ),
        Err(e) => findings.refuse(format!("{up_path}.stabilizationWindowSeconds"), e),
    }
    let select = match up["selectPolicy"].as_str() {
        None | Some("Max") => SelectPolicy::Max,
        Some("Min") => SelectPolicy::Min,
        Some(other) => {
            findings.refuse(
                format!("{up_path}.selectPolicy"),
                format!("{other:?} has no equivalent: llmscaler always scales up"),
            );
            SelectPolicy::Max
        }
    };
    let policies = if up["policies"].is_null() {
        findings.note(
            format!("{up_path}.policies"),
            "not set: the HPA's default scale-up caps (100 % or 4 pods per 15 s, the larger), \
             made explicit in spec.scaleUp.policies; delete them to scale up at once",
        );
        vec![
            policy(ScaleUpPolicyType::Percent, 100, 15),
            policy(ScaleUpPolicyType::Pods, 4, 15),
        ]
    } else {
        scale_up_policies(&up["policies"], &format!("{up_path}.policies"), findings)
    };
    let tolerance = tolerance(up, down, &up_path, &down_path, findings);
    let scale_up = ScaleUp {
        policies: Some(policies),
        select_policy: Some(select),
        tolerance: Some(tolerance),
    };
    (scale_down, scale_up)
}

fn policy(type_: ScaleUpPolicyType, value: i32, period_seconds: i32) -> ScaleUpPolicy {
    ScaleUpPolicy {
        type_,
        value,
        period_seconds,
    }
}

fn scale_up_policies(list: &Value, path: &str, findings: &mut Findings) -> Vec<ScaleUpPolicy> {
    let Some(items) = list.as_array() else {
        findings.refuse(path, "is not a list");
        return Vec::new();
    };
    let mut out = Vec::new();
    for (i, item) in items.iter().enumerate() {
        let p = format!("{path}[{i}]");
        findings.unknown_keys(item, &p, &["type", "value", "periodSeconds"]);
        let type_ = match item["type"].as_str() {
            Some("Pods") => ScaleUpPolicyType::Pods,
            Some("Percent") => ScaleUpPolicyType::Percent,
            other => {
                findings.refuse(
                    format!("{p}.type"),
                    format!("{other:?} is not Pods or Percent"),
                );
                continue;
            }
        };
        match (int_field(&item["value"]), int_field(&item["periodSeconds"])) {
            (Ok(Some(value)), Ok(Some(period))) => out.push(policy(type_, value, period)),
            _ => findings.refuse(&p, "value and periodSeconds must be whole numbers"),
        }
    }
    out
}

fn scale_down_step(
    down: &Value,
    path: &str,
    sync_period_seconds: i32,
    findings: &mut Findings,
) -> i32 {
    let Some(items) = down["policies"].as_array() else {
        return 0; // the HPA's default: 100 % per 15 s, i.e. unlimited.
    };
    let mut caps = Vec::new();
    for (i, item) in items.iter().enumerate() {
        let p = format!("{path}.policies[{i}]");
        findings.unknown_keys(item, &p, &["type", "value", "periodSeconds"]);
        let (Ok(Some(value)), Ok(Some(period))) =
            (int_field(&item["value"]), int_field(&item["periodSeconds"]))
        else {
            findings.refuse(&p, "value and periodSeconds must be whole numbers");
            continue;
        };
        match item["type"].as_str() {
            Some("Percent") if value >= 100 => caps.push(Cap::Unlimited),
            Some("Percent") => findings.refuse(
                &p,
                format!(
                    "Percent {value} has no equivalent: spec.scaleDown.maxStepReplicas is a \
                     number of replicas per sync"
                ),
            ),
            Some("Pods") if period == sync_period_seconds => caps.push(Cap::Step(value)),
            Some("Pods") => findings.refuse(
                &p,
                format!(
                    "{value} pods per {period} s has no equivalent: \
                     spec.scaleDown.maxStepReplicas counts per sync (syncPeriodSeconds \
                     {sync_period_seconds})"
                ),
            ),
            other => findings.refuse(
                format!("{p}.type"),
                format!("{other:?} is not Pods or Percent"),
            ),
        }
    }
    let steps = || {
        caps.iter().filter_map(|c| match c {
            Cap::Step(n) => Some(*n),
            Cap::Unlimited => None,
        })
    };
    match down["selectPolicy"].as_str() {
        None | Some("Max") => {
            if caps.iter().any(|c| matches!(c, Cap::Unlimited)) {
                0
            } else {
                steps().max().unwrap_or(0)
            }
        }
        Some("Min") => steps().min().unwrap_or(0),
        Some(other) => {
            findings.refuse(
                format!("{path}.selectPolicy"),
                format!("{other:?} has no equivalent: llmscaler always scales down"),
            );
            0
        }
    }
}

fn tolerance(
    up: &Value,
    down: &Value,
    up_path: &str,
    down_path: &str,
    findings: &mut Findings,
) -> String {
    let up_t = scalar_string(&up["tolerance"]);
    let down_t = scalar_string(&down["tolerance"]);
    match (up_t, down_t) {
        (Some(u), Some(d)) if u != d => {
            findings.refuse(
                format!("{down_path}.tolerance"),
                format!(
                    "{d} differs from {up_path}.tolerance {u}: spec.scaleUp.tolerance is one \
                     band for both directions"
                ),
            );
            u
        }
        (Some(t), _) | (None, Some(t)) => t,
        (None, None) => HPA_TOLERANCE.to_owned(),
    }
}
