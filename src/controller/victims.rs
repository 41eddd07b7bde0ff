//! Writing the marks of a cache-aware scale-down (docs/scale-down.md) and the drain's rotation
//! label: the pods to remove get the `controller.kubernetes.io/pod-deletion-cost` the step
//! planned ([`crate::step::victims`]), stale costs are cleared, and the marks are read back
//! until the API server shows them.

use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, Patch, PatchParams};
use serde_json::json;

use llmscaler_api::names::{DRAIN_FIELD_MANAGER, FIELD_MANAGER, POD_DELETION_COST, ROTATION_LABEL};

use super::leadership::{Leadership, NotLeader};
use crate::step::Marks;

/// Why marking failed; the scale-down is then deferred to the next sync.
#[derive(Debug, thiserror::Error)]
pub enum VictimError {
    /// Listing or patching pods failed.
    #[error("{operation} pods of {deployment}: {source}")]
    Api {
        /// `list`, `annotate`, `clear`, `relabel` or `read back`.
        operation: &'static str,
        /// `namespace/name` of the Deployment.
        deployment: String,
        /// The API error.
        #[source]
        source: kube::Error,
    },
    /// The annotations did not show up in time.
    #[error("pod-deletion-cost marks on {0:?} were not visible within {1:?}")]
    NotObserved(Vec<String>, Duration),
    /// This replica stopped leading before every mark was written.
    #[error(transparent)]
    NotLeader(#[from] NotLeader),
}

/// `spec.selector` of a Deployment as a label selector string (`matchLabels` and the
/// `In`/`NotIn`/`Exists`/`DoesNotExist` expressions).
pub fn selector_string(deployment: &serde_json::Value) -> Option<String> {
    let selector = deployment.get("spec")?.get("selector")?;
    let mut parts = Vec::new();
    if let Some(labels) = selector.get("matchLabels").and_then(|m| m.as_object()) {
        for (k, v) in labels {
            parts.push(format!("{k}={}", v.as_str()?));
        }
    }
    for expr in selector
        .get("matchExpressions")
        .and_then(|m| m.as_array())
        .into_iter()
        .flatten()
    {
        let key = expr.get("key")?.as_str()?;
        let values: Vec<&str> = expr
            .get("values")
            .and_then(|v| v.as_array())
            .into_iter()
            .flatten()
            .filter_map(|v| v.as_str())
            .collect();
        parts.push(match expr.get("operator")?.as_str()? {
            "In" => format!("{key} in ({})", values.join(",")),
            "NotIn" => format!("{key} notin ({})", values.join(",")),
            "Exists" => key.to_string(),
            "DoesNotExist" => format!("!{key}"),
            _ => return None,
        });
    }
    (!parts.is_empty()).then(|| parts.join(","))
}

/// Sets [`ROTATION_LABEL`] of each pod of `names` to `value` (server-side apply under
/// [`DRAIN_FIELD_MANAGER`], with force: the pod template's value is taken over). A pod that went
/// away is skipped. `leadership` is checked before every patch. Returns the pods patched.
///
/// # Errors
/// [`VictimError::Api`] when a patch fails, [`VictimError::NotLeader`] when leadership was lost.
pub async fn set_rotation(
    pods: &Api<Pod>,
    names: &[String],
    value: &str,
    deployment: &str,
    leadership: &Leadership,
) -> Result<usize, VictimError> {
    let params = PatchParams::apply(DRAIN_FIELD_MANAGER).force();
    let mut patched = 0;
    for name in names {
        leadership.check()?;
        let body = json!({"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "labels": {ROTATION_LABEL: value}}});
        match pods.patch(name, &params, &Patch::Apply(&body)).await {
            Ok(_) => patched += 1,
            Err(kube::Error::Api(s)) if s.code == 404 => {}
            Err(source) => {
                return Err(VictimError::Api {
                    operation: "relabel",
                    deployment: deployment.to_string(),
                    source,
                });
            }
        }
    }
    Ok(patched)
}

/// Applies a plan (server-side apply of the annotation under [`FIELD_MANAGER`]; clearing applies
/// an empty annotation set, which removes only what this manager owns), then reads the pods back
/// until every mark is visible, polling until `deadline`. Returns the number of pods patched.
/// `leadership` is checked before every patch.
///
/// # Errors
/// [`VictimError::Api`] when a patch or read fails, [`VictimError::NotObserved`] when the marks
/// did not show up in time, [`VictimError::NotLeader`] when leadership was lost.
pub async fn apply_plan(
    pods: &Api<Pod>,
    plan: &Marks,
    deployment: &str,
    deadline: Duration,
    leadership: &Leadership,
) -> Result<usize, VictimError> {
    let params = PatchParams::apply(FIELD_MANAGER).force();
    let api_err = |operation| {
        move |source| VictimError::Api {
            operation,
            deployment: deployment.to_string(),
            source,
        }
    };
    for (name, cost) in &plan.set {
        leadership.check()?;
        let body = json!({"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "annotations": {POD_DELETION_COST: cost.to_string()}}});
        pods.patch(name, &params, &Patch::Apply(&body))
            .await
            .map_err(api_err("annotate"))?;
    }
    for name in &plan.clear {
        leadership.check()?;
        let body = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name}});
        if let Err(err) = pods.patch(name, &params, &Patch::Apply(&body)).await {
            // A pod that went away has nothing left to clear.
            if !matches!(&err, kube::Error::Api(s) if s.code == 404) {
                return Err(api_err("clear")(err));
            }
        }
    }
    let started = tokio::time::Instant::now();
    loop {
        let mut missing = Vec::new();
        for (name, cost) in &plan.set {
            let pod = pods.get_opt(name).await.map_err(api_err("read back"))?;
            let seen = pod
                .and_then(|p| p.metadata.annotations)
                .and_then(|mut a| a.remove(POD_DELETION_COST));
            if seen.as_deref() != Some(&cost.to_string()) {
                missing.push(name.clone());
            }
        }
        if missing.is_empty() {
            return Ok(plan.set.len() + plan.clear.len());
        }
        if started.elapsed() >= deadline {
            return Err(VictimError::NotObserved(missing, deadline));
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn selectors() {
        let d = json!({"spec": {"selector": {"matchLabels": {"app": "vllm"},
            "matchExpressions": [{"key": "tier", "operator": "In", "values": ["a", "b"]},
                                 {"key": "canary", "operator": "DoesNotExist"}]}}});
        assert_eq!(
            selector_string(&d).as_deref(),
            Some("app=vllm,tier in (a,b),!canary")
        );
        assert_eq!(selector_string(&json!({"spec": {}})), None);
    }
}
