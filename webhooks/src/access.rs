//! No confused deputy (`docs/security.md#target-access`, `docs/admission.md`): an `LLMScaler`
//! makes the operator write `spec.replicas` of its target with the operator's own rights, so
//! on create, and on an update that changes `spec.targetRef`, the validating webhook asks the
//! API server (a `SubjectAccessReview`) whether the *requesting user* may `update` the
//! target's `scale` subresource. If not, the request is denied naming the missing permission.
//!
//! This is the one part of admission with I/O; it runs after the pure rules of
//! [`crate::admission::validate`] allowed the request, and fails closed: a review that cannot be
//! made (API server unreachable, unknown target kind) denies.

use k8s_openapi::api::authorization::v1::{
    ResourceAttributes, SubjectAccessReview, SubjectAccessReviewSpec,
};
use k8s_openapi::api::autoscaling::v2::HorizontalPodAutoscaler;
use kube::api::{Api, PostParams};
use kube::core::admission::{AdmissionReview, Operation};
use kube::core::{DynamicObject, GroupVersionKind};
use serde_json::{Value, json};

use crate::review::Reply;

/// `status.reason` of a denial for a missing permission on the target.
pub(crate) const REASON_FORBIDDEN: &str = "Forbidden";
/// `status.code` of such a denial (HTTP 403).
pub(crate) const CODE_FORBIDDEN: u16 = 403;

/// Asks the API server whether requesting users may scale the targets they name.
#[derive(Clone)]
pub(crate) struct TargetAccess {
    client: kube::Client,
}

impl std::fmt::Debug for TargetAccess {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("TargetAccess")
    }
}

/// What must be checked for one request.
#[derive(Debug, PartialEq, Eq)]
pub struct Check {
    /// The requesting user's name.
    pub user: String,
    /// Their groups.
    pub groups: Vec<String>,
    /// Their UID, when the API server sent one.
    pub uid: Option<String>,
    /// Extra attributes of the user (scopes and the like), passed through.
    pub extra: std::collections::BTreeMap<String, Vec<String>>,
    /// The scaler's namespace (the target's).
    pub namespace: String,
    /// `spec.targetRef.apiVersion`.
    pub api_version: String,
    /// `spec.targetRef.kind`.
    pub kind: String,
    /// `spec.targetRef.name`.
    pub name: String,
    /// Whether the target must be checked (create, or `targetRef` changed).
    pub target: bool,
    /// The admitted LLMScaler's name (another scaler on the same target is refused).
    pub scaler: String,
    /// Secrets named by `serverHeadersFrom` that are new in this request: the user must be
    /// allowed to `get` each (else a scaler would send a Secret they cannot read to a server
    /// they choose).
    pub secrets: Vec<String>,
}

/// The check a validated review needs, if any: on CREATE, and on UPDATE when `spec.targetRef`
/// changed; never for DELETE, CONNECT, subresources or other kinds (already allowed or denied
/// by the pure handler).
pub fn needed(body: &[u8]) -> Option<Check> {
    let review: AdmissionReview<DynamicObject> = serde_json::from_slice(body).ok()?;
    let request = review.request?;
    if request
        .sub_resource
        .as_deref()
        .is_some_and(|s| !s.is_empty())
    {
        return None;
    }
    let new = serde_json::to_value(request.object.as_ref()?).ok()?;
    let target = new.pointer("/spec/targetRef")?;
    let old = match request.operation {
        Operation::Create => None,
        Operation::Update => request
            .old_object
            .as_ref()
            .and_then(|o| serde_json::to_value(o).ok()),
        _ => return None,
    };
    let target_changed = old.as_ref().and_then(|o| o.pointer("/spec/targetRef")) != Some(target);
    let secret_names = |object: Option<&Value>| -> Vec<String> {
        object
            .and_then(|o| o.pointer("/spec/serverHeadersFrom"))
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter_map(|e| e.pointer("/secretKeyRef/name").and_then(Value::as_str))
            .map(str::to_owned)
            .collect()
    };
    let before = secret_names(old.as_ref());
    let mut secrets: Vec<String> = secret_names(Some(&new))
        .into_iter()
        .filter(|s| !before.contains(s))
        .collect();
    secrets.sort();
    secrets.dedup();
    if !target_changed && secrets.is_empty() {
        return None;
    }
    let field = |key: &str| {
        target
            .get(key)
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_owned()
    };
    let user = request.user_info;
    let scaler = new
        .pointer("/metadata/name")
        .and_then(Value::as_str)
        .map_or_else(|| request.name.clone(), str::to_owned);
    Some(Check {
        scaler,
        user: user.username.unwrap_or_default(),
        groups: user.groups.unwrap_or_default(),
        uid: user.uid,
        extra: user.extra.unwrap_or_default(),
        namespace: request.namespace.unwrap_or_default(),
        api_version: field("apiVersion"),
        kind: field("kind"),
        name: field("name"),
        target: target_changed,
        secrets,
    })
}

impl TargetAccess {
    /// Reviews with `client` (the operator's own credentials: it needs `create` on
    /// `subjectaccessreviews.authorization.k8s.io` and API discovery).
    pub(crate) fn new(client: kube::Client) -> Self {
        Self { client }
    }

    /// Runs the check `reply` (the pure handler's answer to `body`) needs: when the reply
    /// allows a create or a `targetRef` change, a `SubjectAccessReview` for `update` on the
    /// target's `scale` subresource; a refusal (or a review that fails) turns the reply into a
    /// denial (code 403) naming the user, the verb, the resource and the target.
    pub(crate) async fn check(&self, body: &[u8], reply: Reply) -> Reply {
        if reply.status != 200 || !allowed(&reply) {
            return reply;
        }
        let Some(check) = needed(body) else {
            return reply;
        };
        match self.review(&check).await {
            Ok(None) => {}
            Ok(Some(message)) | Err(message) => return deny(reply, &message),
        }
        if !check.target {
            return reply;
        }
        match self.autoscalers(&check).await {
            Ok((None, warnings)) => warn(reply, &warnings),
            Ok((Some(message), _)) | Err(message) => deny_conflict(reply, &message),
        }
    }

    /// One autoscaler per workload (`docs/writing-replicas.md#competing-autoscalers`): another
    /// LLMScaler on the same target refuses the request (naming it); a HorizontalPodAutoscaler
    /// (also a KEDA ScaledObject's) on it adds a warning. `Err` when the lists fail (fails
    /// closed, like the access review).
    async fn autoscalers(&self, check: &Check) -> Result<(Option<String>, Vec<String>), String> {
        let scalers: Api<llmscaler_api::LLMScaler> =
            Api::namespaced(self.client.clone(), &check.namespace);
        let list = scalers.list(&Default::default()).await.map_err(|err| {
            tracing::warn!(error = %err, "listing LLMScalers for the one-per-workload check failed");
            "spec.targetRef: cannot check for another LLMScaler on the same target: listing LLMScalers failed".to_owned()
        })?;
        if let Some(other) = list.items.iter().find(|other| {
            other.metadata.name.as_deref() != Some(check.scaler.as_str())
                && other.spec.target_ref.kind == check.kind
                && other.spec.target_ref.name == check.name
        }) {
            return Ok((
                Some(format!(
                    "spec.targetRef: {} {:?} is already scaled by LLMScaler {:?}; one autoscaler per workload (two would fight over spec.replicas)",
                    check.kind,
                    check.name,
                    other.metadata.name.as_deref().unwrap_or_default()
                )),
                Vec::new(),
            ));
        }
        let hpas: Api<HorizontalPodAutoscaler> =
            Api::namespaced(self.client.clone(), &check.namespace);
        // A failed HPA list only loses a warning: the controller still holds against an HPA.
        let warnings = match hpas.list(&Default::default()).await {
            Ok(list) => list
                .items
                .iter()
                .filter(|hpa| {
                    hpa.spec.as_ref().is_some_and(|s| {
                        s.scale_target_ref.kind == check.kind && s.scale_target_ref.name == check.name
                    })
                })
                .map(|hpa| {
                    let name = hpa.metadata.name.clone().unwrap_or_default();
                    let owner = hpa
                        .metadata
                        .owner_references
                        .iter()
                        .flatten()
                        .find(|o| o.kind == "ScaledObject")
                        .map(|o| format!("KEDA ScaledObject {:?} (its ", o.name))
                        .unwrap_or_default();
                    let close = if owner.is_empty() { "" } else { ")" };
                    format!(
                        "spec.targetRef: {owner}HorizontalPodAutoscaler {name:?}{close} also scales {} {:?}: llmscaler will hold and write nothing while it exists (remove one of the two)",
                        check.kind, check.name
                    )
                })
                .collect(),
            Err(err) => {
                tracing::debug!(error = %err, "listing HorizontalPodAutoscalers for a warning failed");
                Vec::new()
            }
        };
        Ok((None, warnings))
    }

    /// `Ok(None)` when allowed, `Ok(Some(why))` when refused, `Err(why)` when the review could
    /// not be made.
    async fn review(&self, check: &Check) -> Result<Option<String>, String> {
        for secret in &check.secrets {
            let attributes = ResourceAttributes {
                namespace: Some(check.namespace.clone()),
                verb: Some("get".to_owned()),
                group: Some(String::new()),
                version: Some("v1".to_owned()),
                resource: Some("secrets".to_owned()),
                name: Some(secret.clone()),
                ..ResourceAttributes::default()
            };
            if !self.allowed(check, attributes).await? {
                return Ok(Some(format!(
                    "spec.serverHeadersFrom: {} may not get secrets {secret:?} in namespace {:?}; \
                     a scaler may only send a Secret its author may read",
                    shown_user(check),
                    check.namespace
                )));
            }
        }
        if !check.target {
            return Ok(None);
        }
        let (group, version) = match check.api_version.split_once('/') {
            Some((group, version)) => (group.to_owned(), version.to_owned()),
            None => (String::new(), check.api_version.clone()),
        };
        let gvk = GroupVersionKind::gvk(&group, &version, &check.kind);
        let (resource, _) = kube::discovery::pinned_kind(&self.client, &gvk)
            .await
            .map_err(|err| {
                tracing::debug!(error = %err, kind = %check.kind, "discovery for the access review failed");
                format!(
                    "spec.targetRef: cannot check that {} may scale {} {:?}: kind {} in {} is not served by this cluster",
                    shown_user(check),
                    check.kind,
                    check.name,
                    check.kind,
                    check.api_version
                )
            })?;
        let attributes = ResourceAttributes {
            namespace: Some(check.namespace.clone()),
            verb: Some("update".to_owned()),
            group: Some(group.clone()),
            version: Some(version),
            resource: Some(resource.plural.clone()),
            subresource: Some("scale".to_owned()),
            name: Some(check.name.clone()),
            ..ResourceAttributes::default()
        };
        if self.allowed(check, attributes).await? {
            Ok(None)
        } else {
            let resource_name = if group.is_empty() {
                resource.plural
            } else {
                format!("{}.{group}", resource.plural)
            };
            Ok(Some(format!(
                "spec.targetRef: {} may not update {resource_name}/scale {:?} in namespace {:?}; an LLMScaler \
                 may only target a workload its author may scale (grant `update` on `{resource_name}/scale`)",
                shown_user(check),
                check.name,
                check.namespace
            )))
        }
    }
}

impl TargetAccess {
    /// One `SubjectAccessReview` for the requesting user on `attributes`.
    async fn allowed(&self, check: &Check, attributes: ResourceAttributes) -> Result<bool, String> {
        let review = SubjectAccessReview {
            spec: SubjectAccessReviewSpec {
                user: Some(check.user.clone()),
                groups: Some(check.groups.clone()),
                uid: check.uid.clone(),
                extra: Some(check.extra.clone()),
                resource_attributes: Some(attributes),
                ..SubjectAccessReviewSpec::default()
            },
            ..SubjectAccessReview::default()
        };
        let api: Api<SubjectAccessReview> = Api::all(self.client.clone());
        let answer = api
            .create(&PostParams::default(), &review)
            .await
            .map_err(|err| {
                tracing::warn!(error = %err, "SubjectAccessReview failed");
                format!(
                    "cannot check the access of {}: the access review failed",
                    shown_user(check)
                )
            })?;
        Ok(answer.status.is_some_and(|s| s.allowed))
    }
}

fn shown_user(check: &Check) -> String {
    format!("user {:?}", check.user)
}

fn allowed(reply: &Reply) -> bool {
    serde_json::from_slice::<Value>(&reply.body)
        .ok()
        .and_then(|v| v.pointer("/response/allowed").and_then(Value::as_bool))
        .unwrap_or(false)
}

/// `status.reason` of a denial for a target another LLMScaler already scales.
pub(crate) const REASON_CONFLICT: &str = "Conflict";
/// `status.code` of such a denial (HTTP 409).
pub(crate) const CODE_CONFLICT: u16 = 409;

fn deny_conflict(reply: Reply, message: &str) -> Reply {
    edit_response(reply, |response| {
        response.insert("allowed".to_owned(), Value::Bool(false));
        response.remove("patch");
        response.remove("patchType");
        response.insert(
            "status".to_owned(),
            json!({"status": "Failure", "message": message, "reason": REASON_CONFLICT, "code": CODE_CONFLICT}),
        );
    })
}

fn warn(reply: Reply, warnings: &[String]) -> Reply {
    if warnings.is_empty() {
        return reply;
    }
    edit_response(reply, |response| {
        let list = response
            .entry("warnings")
            .or_insert_with(|| Value::Array(Vec::new()));
        if let Some(list) = list.as_array_mut() {
            list.extend(warnings.iter().cloned().map(Value::String));
        }
    })
}

fn edit_response(reply: Reply, edit: impl FnOnce(&mut serde_json::Map<String, Value>)) -> Reply {
    let Ok(mut review) = serde_json::from_slice::<Value>(&reply.body) else {
        return reply;
    };
    if let Some(response) = review.get_mut("response").and_then(Value::as_object_mut) {
        edit(response);
    }
    match serde_json::to_vec(&review) {
        Ok(body) => Reply {
            status: reply.status,
            body,
        },
        Err(_) => reply,
    }
}

fn deny(reply: Reply, message: &str) -> Reply {
    let Ok(mut review) = serde_json::from_slice::<Value>(&reply.body) else {
        return reply;
    };
    if let Some(response) = review.get_mut("response").and_then(Value::as_object_mut) {
        response.insert("allowed".to_owned(), Value::Bool(false));
        response.remove("patch");
        response.remove("patchType");
        response.insert(
            "status".to_owned(),
            json!({
                "status": "Failure",
                "message": message,
                "reason": REASON_FORBIDDEN,
                "code": CODE_FORBIDDEN,
            }),
        );
    }
    match serde_json::to_vec(&review) {
        Ok(body) => Reply {
            status: reply.status,
            body,
        },
        Err(_) => reply,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn review(operation: &str, old_target: Option<&str>) -> Vec<u8> {
        let object = |name: &str| {
            json!({"apiVersion": "autoscaling.modelsphere.dev/v1alpha1", "kind": "LLMScaler",
                   "metadata": {"name": "s", "namespace": "t"},
                   "spec": {"targetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": name}}})
        };
        let mut request = json!({
            "uid": "u", "kind": {"group": "autoscaling.modelsphere.dev", "version": "v1alpha1", "kind": "LLMScaler"},
            "resource": {"group": "autoscaling.modelsphere.dev", "version": "v1alpha1", "resource": "llmscalers"},
            "namespace": "t", "operation": operation,
            "userInfo": {"username": "alice", "groups": ["dev"]},
            "object": object("vllm"),
        });
        if let Some(old) = old_target {
            request["oldObject"] = object(old);
        }
        serde_json::to_vec(&json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": request}))
            .expect("json")
    }

    #[test]
    fn create_and_target_changes_need_a_check_other_updates_do_not() {
        let check = needed(&review("CREATE", None)).expect("create");
        assert_eq!(
            (
                check.user.as_str(),
                check.namespace.as_str(),
                check.kind.as_str(),
                check.name.as_str()
            ),
            ("alice", "t", "Deployment", "vllm")
        );
        assert_eq!(check.groups, vec!["dev"]);
        assert!(needed(&review("UPDATE", Some("other"))).is_some());
        assert!(needed(&review("UPDATE", Some("vllm"))).is_none());
        assert!(needed(&review("DELETE", None)).is_none());
        assert!(needed(b"garbage").is_none());
    }

    #[test]
    fn deny_keeps_the_uid_and_drops_the_patch() {
        let reply = Reply {
            status: 200,
            body: serde_json::to_vec(&json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
                "response": {"uid": "u", "allowed": true, "patch": "W10=", "patchType": "JSONPatch"}}))
            .expect("json"),
        };
        let denied = deny(reply, "no");
        let v: Value = serde_json::from_slice(&denied.body).expect("json");
        assert_eq!(v["response"]["uid"], "u");
        assert_eq!(v["response"]["allowed"], false);
        assert_eq!(v["response"]["status"]["code"], 403);
        assert!(v["response"].get("patch").is_none());
    }
}
