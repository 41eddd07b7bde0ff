//! Cache-aware scale-down for Deployments (docs/scale-down.md): before lowering replicas, give the
//! pods to
//! remove a low `controller.kubernetes.io/pod-deletion-cost` so the ReplicaSet deletes them
//! first, clear costs left by earlier steps, and wait until the API server shows the marks.

use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, ListParams, Patch, PatchParams};
use serde_json::json;

use llmscaler_api::names::{
    DRAIN_FIELD_MANAGER, FIELD_MANAGER, NEWEST_FIRST_COST, POD_DELETION_COST, ROTATION_LABEL,
};

use super::leadership::{Leadership, NotLeader};
use crate::metrics::MetricError;

/// Why marking failed; the scale-down is then deferred to the next sync.
#[derive(Debug, thiserror::Error)]
pub enum VictimError {
    /// The Deployment has no usable `spec.selector`.
    #[error("Deployment {0} has no spec.selector to find its pods")]
    NoSelector(String),
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
    /// The `deletionCostQuery` could not be read.
    #[error("deletionCostQuery: {0}")]
    CostQuery(#[source] MetricError),
    /// This replica stopped leading before every mark was written.
    #[error(transparent)]
    NotLeader(#[from] NotLeader),
}

/// The pods of a Deployment, as the marking needs them.
#[derive(Clone, Debug, PartialEq)]
pub struct Candidate {
    /// Pod name.
    pub name: String,
    /// `metadata.creationTimestamp`, seconds since the epoch (newest = largest).
    pub created: i64,
    /// The pod's current deletion-cost annotation, as written.
    pub current_cost: Option<String>,
    /// The pod's [`ROTATION_LABEL`] value (`docs/scale-down.md#drain`).
    pub rotation: Option<String>,
}

/// The plan for one scale-down: the cost to set per pod, and the pods whose cost to clear.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Plan {
    /// Pods to annotate with a cost (as an int32).
    pub set: BTreeMap<String, i32>,
    /// Pods whose stale cost to remove.
    pub clear: Vec<String>,
    /// The pods expected to go (the `remove` cheapest).
    pub victims: Vec<String>,
}

/// Plans the marks (pure). With `costs` (from `deletionCostQuery`, pod → value): every pod the
/// query returned gets its value rounded to int32 (lowest goes first), pods it did not return
/// lose any old cost, and the victims are the `remove` lowest (ties: newest first). Without:
/// the `remove` newest pods get [`NEWEST_FIRST_COST`], every other pod loses any old cost.
/// Annotations already equal to the plan are not rewritten.
pub fn plan(
    candidates: &[Candidate],
    remove: usize,
    costs: Option<&BTreeMap<String, f64>>,
) -> Plan {
    let mut ranked: Vec<(&Candidate, Option<i32>)> = candidates
        .iter()
        .map(|c| {
            (
                c,
                costs.and_then(|m| m.get(&c.name)).map(|v| round_cost(*v)),
            )
        })
        .collect();
    // Lowest cost first (a pod without a value keeps no annotation: cost 0 for the ReplicaSet),
    // then newest first.
    ranked.sort_by(|(a, ca), (b, cb)| {
        ca.unwrap_or(0)
            .cmp(&cb.unwrap_or(0))
            .then(b.created.cmp(&a.created))
            .then(a.name.cmp(&b.name))
    });
    if costs.is_none() {
        // Newest first: no query value; ranking is by creation time only.
        ranked.sort_by(|(a, _), (b, _)| b.created.cmp(&a.created).then(a.name.cmp(&b.name)));
    }
    let victims: Vec<String> = ranked
        .iter()
        .take(remove)
        .map(|(c, _)| c.name.clone())
        .collect();
    let mut out = Plan {
        victims: victims.clone(),
        ..Plan::default()
    };
    for (candidate, cost) in &ranked {
        let wanted = match costs {
            Some(_) => *cost,
            None => victims
                .contains(&candidate.name)
                .then_some(NEWEST_FIRST_COST),
        };
        match wanted {
            Some(cost) if candidate.current_cost.as_deref() != Some(&cost.to_string()) => {
                out.set.insert(candidate.name.clone(), cost);
            }
            Some(_) => {}
            None if candidate.current_cost.is_some() => out.clear.push(candidate.name.clone()),
            None => {}
        }
    }
    out
}

/// Plans the marks of a drained scale-down (pure): exactly `victims` get [`NEWEST_FIRST_COST`],
/// every other pod loses any old cost (so a lower cost left by `deletionCostQuery` cannot send
/// another pod first). Victims that are no longer candidates are left out.
pub fn plan_for(candidates: &[Candidate], victims: &[String]) -> Plan {
    let mut out = Plan::default();
    for candidate in candidates {
        if victims.contains(&candidate.name) {
            out.victims.push(candidate.name.clone());
            if candidate.current_cost.as_deref() != Some(&NEWEST_FIRST_COST.to_string()) {
                out.set.insert(candidate.name.clone(), NEWEST_FIRST_COST);
            }
        } else if candidate.current_cost.is_some() {
            out.clear.push(candidate.name.clone());
        }
    }
    out
}

/// A query value as a deletion cost: rounded, saturated to int32.
#[allow(clippy::cast_possible_truncation)]
fn round_cost(value: f64) -> i32 {
    if value.is_nan() {
        0
    } else {
        // `as` saturates at the int32 bounds.
        value.round() as i32
    }
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

/// Lists the live (not terminating) pods matching `selector` in `namespace`.
///
/// # Errors
/// [`VictimError::Api`] when the list fails.
pub async fn candidates(
    pods: &Api<Pod>,
    selector: &str,
    deployment: &str,
) -> Result<Vec<Candidate>, VictimError> {
    let list = pods
        .list(&ListParams::default().labels(selector))
        .await
        .map_err(|source| VictimError::Api {
            operation: "list",
            deployment: deployment.to_string(),
            source,
        })?;
    Ok(list
        .items
        .into_iter()
        .filter(|p| p.metadata.deletion_timestamp.is_none())
        .filter_map(|p| {
            Some(Candidate {
                name: p.metadata.name?,
                created: p.metadata.creation_timestamp.map_or(0, |t| t.0.as_second()),
                current_cost: p
                    .metadata
                    .annotations
                    .and_then(|mut a| a.remove(POD_DELETION_COST)),
                rotation: p.metadata.labels.and_then(|mut l| l.remove(ROTATION_LABEL)),
            })
        })
        .collect())
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
    plan: &Plan,
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

    fn pod(name: &str, created: i64, cost: Option<&str>) -> Candidate {
        Candidate {
            name: name.into(),
            created,
            current_cost: cost.map(String::from),
            rotation: None,
        }
    }

    #[test]
    fn a_drained_plan_marks_exactly_the_victims_and_clears_the_rest() {
        let pods = [
            pod("a", 1, Some("-5000")),
            pod("b", 3, None),
            pod("c", 2, Some("-100")),
        ];
        let victims = ["b".to_string(), "c".to_string(), "gone".to_string()];
        let p = plan_for(&pods, &victims);
        assert_eq!(p.victims, vec!["b", "c"]);
        assert_eq!(p.set, BTreeMap::from([("b".to_string(), -100)]));
        assert_eq!(p.clear, vec!["a"]);
    }

    #[test]
    fn newest_first_marks_the_newest_and_clears_stale() {
        let pods = [
            pod("a", 1, None),
            pod("b", 3, None),
            pod("c", 2, Some("-100")),
        ];
        let p = plan(&pods, 1, None);
        assert_eq!(p.victims, vec!["b"]);
        assert_eq!(p.set, BTreeMap::from([("b".to_string(), -100)]));
        assert_eq!(p.clear, vec!["c"]);
    }

    #[test]
    fn query_costs_annotate_every_returned_pod_lowest_goes() {
        let pods = [
            pod("a", 1, None),
            pod("b", 3, None),
            pod("c", 2, Some("7")),
            pod("d", 4, Some("1")),
        ];
        let costs = BTreeMap::from([
            ("a".to_string(), 0.4),
            ("b".to_string(), 12.6),
            ("c".to_string(), 7.2),
        ]);
        let p = plan(&pods, 2, Some(&costs));
        // d has no value: its stale cost is cleared, so the ReplicaSet sees cost 0, like a
        // (0.4 -> 0); on the tie the newer pod goes first, as the ReplicaSet ranks them.
        assert_eq!(p.victims, vec!["d", "a"]);
        assert_eq!(
            p.set,
            BTreeMap::from([("a".to_string(), 0), ("b".to_string(), 13)])
        );
        assert_eq!(p.clear, vec!["d"]);
    }

    #[test]
    fn huge_costs_saturate() {
        assert_eq!(round_cost(1e300), i32::MAX);
        assert_eq!(round_cost(-1e300), i32::MIN);
    }

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
