//! `llmscaler release --target KIND/NAME -n NAMESPACE`: hands a workload's `spec.replicas` back
//! to whatever manages it next (Helm 4, Argo CD, an HPA), without changing its value
//! (docs/uninstall.md#handing-spec-replicas-back).
//!
//! 1. `llmscaler`'s ownership of `f:spec.f:replicas` is removed from the target's
//!    `managedFields` by a merge patch guarded by the `resourceVersion` read. A server-side apply
//!    of an object without `spec.replicas` under `llmscaler` would also drop the ownership, but
//!    when `llmscaler` is the field's only owner Kubernetes then *removes the field*, and the
//!    Deployment's default sets the fleet to 1 replica; the patch keeps the value, with no owner,
//!    so that the next tool's server-side apply of any value meets no conflict.
//! 2. The `pod-deletion-cost` marks on the target's pods are cleared by a server-side apply of
//!    an empty pod under `llmscaler`, which removes only the fields it owns.
//!
//! It refuses while an LLMScaler that is neither paused nor `Advisory` still targets the
//! workload (it would claim the field back at its next sync), unless `--force`.

use std::process::ExitCode;

use crate::process::fail;

use kube::api::{Api, DynamicObject, ListParams, Patch, PatchParams};
use llmscaler_api::names::{
    DRAIN_FIELD_MANAGER, FIELD_MANAGER, PAUSED_ANNOTATION, POD_DELETION_COST, ROTATION_IN,
    ROTATION_LABEL, ROTATION_OUT,
};
use llmscaler_api::{LLMScaler, ScalerMode, TargetRef};
use serde_json::{Value, json};

use crate::controller::target::{Resolver, TargetError, replicas_owners};
use crate::controller::victims::selector_string;

/// Exit status when the field and the marks were handed back.
pub(crate) const EXIT_RELEASED: u8 = 0;
/// Exit status for a cluster or API failure.
pub(crate) const EXIT_FAILURE: u8 = 1;
/// Exit status when refused: an unknown target form, or an active LLMScaler still targets it.
pub(crate) const EXIT_REFUSED: u8 = 2;

/// Command-line arguments of `llmscaler release`.
#[derive(clap::Args, Debug, Clone)]
pub struct ReleaseArgs {
    /// The workload: `deployment/NAME`, `statefulset/NAME`, `leaderworkerset/NAME`, or
    /// `KIND.VERSION.GROUP/NAME` for any other kind (e.g. `Foo.v1.example.com/NAME`).
    #[arg(long)]
    pub target: String,
    /// The workload's namespace.
    #[arg(short = 'n', long, default_value = "default")]
    pub namespace: String,
    /// Release even though an active LLMScaler still targets the workload.
    #[arg(long)]
    pub force: bool,
}

/// Why the release did not complete.
#[derive(Debug, thiserror::Error)]
pub enum ReleaseError {
    /// `--target` is not of a known form.
    #[error(
        "--target {0:?}: expected deployment/NAME, statefulset/NAME, leaderworkerset/NAME or KIND.VERSION.GROUP/NAME"
    )]
    Target(String),
    /// No Kubernetes credentials.
    #[error("cannot build a Kubernetes client: {0}")]
    Client(#[source] kube::Error),
    /// An active LLMScaler still scales the workload.
    #[error(
        "LLMScaler {namespace}/{scaler} still scales {kind} {name}: delete it, pause it \
         (kubectl annotate llmscaler {scaler} {PAUSED_ANNOTATION}=true) or set spec.mode: \
         Advisory first, or pass --force"
    )]
    StillScaled {
        /// The namespace.
        namespace: String,
        /// The LLMScaler.
        scaler: String,
        /// The target's kind.
        kind: String,
        /// The target's name.
        name: String,
    },
    /// The target could not be resolved or read.
    #[error(transparent)]
    Resolve(Box<TargetError>),
    /// An API call failed.
    #[error("{operation}: {source}")]
    Api {
        /// What was being done, with the object.
        operation: String,
        /// The API error.
        #[source]
        source: kube::Error,
    },
}

/// What the release did.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Released {
    /// `spec.replicas` of the target, unchanged.
    pub replicas: Option<i64>,
    /// Whether `llmscaler` owned `spec.replicas` before.
    pub dropped_replicas: bool,
    /// The owners of `spec.replicas` left (may be empty).
    pub owners_left: Vec<String>,
    /// Pods on which `llmscaler`'s fields (its `pod-deletion-cost` marks) were cleared.
    pub pods_cleared: Vec<String>,
    /// Pods a drain had taken out of the Service's rotation, put back in
    /// (docs/scale-down.md#drain).
    pub pods_returned: Vec<String>,
}

/// The `TargetRef` of a `--target` value.
///
/// # Errors
/// [`ReleaseError::Target`] for an unknown form.
pub fn parse_target(raw: &str) -> Result<TargetRef, ReleaseError> {
    let bad = || ReleaseError::Target(raw.to_owned());
    let (kind, name) = raw.split_once('/').ok_or_else(bad)?;
    if name.is_empty() || name.contains('/') {
        return Err(bad());
    }
    let (api_version, kind) = match kind.to_ascii_lowercase().as_str() {
        "deployment" | "deployments" | "deploy" => ("apps/v1".to_owned(), "Deployment".to_owned()),
        "statefulset" | "statefulsets" | "sts" => ("apps/v1".to_owned(), "StatefulSet".to_owned()),
        "leaderworkerset" | "leaderworkersets" | "lws" => (
            "leaderworkerset.x-k8s.io/v1".to_owned(),
            "LeaderWorkerSet".to_owned(),
        ),
        _ => {
            let mut parts = kind.splitn(3, '.');
            match (parts.next(), parts.next(), parts.next()) {
                (Some(k), Some(v), Some(g)) if !k.is_empty() && !v.is_empty() && !g.is_empty() => {
                    (format!("{g}/{v}"), k.to_owned())
                }
                _ => return Err(bad()),
            }
        }
    };
    Ok(TargetRef {
        api_version,
        kind,
        name: name.to_owned(),
    })
}

/// `managedFields` without `manager`'s ownership of `f:spec.f:replicas` (entries on the main
/// resource only; an entry left owning nothing is removed). `None` when `manager` owned no
/// `spec.replicas`.
pub(crate) fn without_replicas_ownership(managed_fields: &Value, manager: &str) -> Option<Value> {
    let entries = managed_fields.as_array()?;
    let mut changed = false;
    let mut out = Vec::new();
    for entry in entries {
        let mine = entry["manager"].as_str() == Some(manager)
            && entry["subresource"].as_str().unwrap_or_default().is_empty()
            && !entry["fieldsV1"]["f:spec"]["f:replicas"].is_null();
        if !mine {
            out.push(entry.clone());
            continue;
        }
        changed = true;
        let mut entry = entry.clone();
        if let Some(spec) = entry["fieldsV1"]["f:spec"].as_object_mut() {
            spec.remove("f:replicas");
            if spec.is_empty()
                && let Some(fields) = entry["fieldsV1"].as_object_mut()
            {
                fields.remove("f:spec");
            }
        }
        let owns_something = entry["fieldsV1"]
            .as_object()
            .is_some_and(|f| f.keys().any(|k| k != "."));
        if owns_something {
            out.push(entry);
        }
    }
    changed.then_some(Value::Array(out))
}

/// Hands `spec.replicas` of `target` in `namespace` back and clears `llmscaler`'s pod marks.
///
/// # Errors
/// [`ReleaseError`].
pub async fn release(
    client: &kube::Client,
    target: &TargetRef,
    namespace: &str,
    force: bool,
) -> Result<Released, ReleaseError> {
    if !force {
        check_no_active_scaler(client, target, namespace).await?;
    }
    let resource = Resolver::default()
        .resolve(client, target)
        .await
        .map_err(|err| ReleaseError::Resolve(Box::new(err)))?;
    let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), namespace, &resource);
    let what = format!("{} {namespace}/{}", target.kind, target.name);
    let api_error = |operation: &str| {
        let operation = format!("{operation} {what}");
        move |source| ReleaseError::Api { operation, source }
    };
    let object = api.get(&target.name).await.map_err(api_error("get"))?;
    let mut released = Released {
        replicas: object.data["spec"]["replicas"].as_i64(),
        ..Released::default()
    };
    let managed = serde_json::to_value(&object.metadata.managed_fields).unwrap_or(Value::Null);
    if let Some(fields) = without_replicas_ownership(&managed, FIELD_MANAGER) {
        released.dropped_replicas = true;
        // A merge patch replaces the list whole; the resourceVersion makes it fail (409) if the
        // object changed since it was read.
        let patch = json!({"metadata": {
            "resourceVersion": object.metadata.resource_version,
            "managedFields": fields,
        }});
        api.patch(&target.name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .map_err(api_error("drop llmscaler's ownership of spec.replicas of"))?;
    }
    let after = api.get(&target.name).await.map_err(api_error("get"))?;
    released.owners_left = replicas_owners(&after);

    if let Some(selector) = selector_string(&after.data) {
        let pods: Api<DynamicObject> = Api::namespaced_with(
            client.clone(),
            namespace,
            &kube::api::ApiResource::erase::<k8s_openapi::api::core::v1::Pod>(&()),
        );
        let list = pods
            .list(&ListParams::default().labels(&selector))
            .await
            .map_err(api_error("list the pods of"))?;
        let params = PatchParams::apply(FIELD_MANAGER);
        for pod in &list.items {
            // A drain left behind: back into rotation, or the pod would never serve again.
            let out = pod
                .metadata
                .labels
                .as_ref()
                .and_then(|l| l.get(ROTATION_LABEL));
            let Some(name) = pod
                .metadata
                .name
                .clone()
                .filter(|_| out.map(String::as_str) == Some(ROTATION_OUT))
            else {
                continue;
            };
            let body = json!({
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {"name": name, "namespace": namespace,
                             "labels": {ROTATION_LABEL: ROTATION_IN}},
            });
            pods.patch(
                &name,
                &PatchParams::apply(DRAIN_FIELD_MANAGER).force(),
                &Patch::Apply(&body),
            )
            .await
            .map_err(|source| ReleaseError::Api {
                operation: format!("put pod {namespace}/{name} back in rotation"),
                source,
            })?;
            released.pods_returned.push(name);
        }
        for pod in list.items {
            let owned = pod
                .metadata
                .managed_fields
                .iter()
                .flatten()
                .any(|e| e.manager.as_deref() == Some(FIELD_MANAGER));
            let Some(name) = pod.metadata.name.clone().filter(|_| owned) else {
                continue;
            };
            let body = json!({
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {"name": name, "namespace": namespace},
            });
            pods.patch(&name, &params, &Patch::Apply(&body))
                .await
                .map_err(|source| ReleaseError::Api {
                    operation: format!("clear {POD_DELETION_COST} on pod {namespace}/{name}"),
                    source,
                })?;
            released.pods_cleared.push(name);
        }
    }
    Ok(released)
}

async fn check_no_active_scaler(
    client: &kube::Client,
    target: &TargetRef,
    namespace: &str,
) -> Result<(), ReleaseError> {
    let scalers: Api<LLMScaler> = Api::namespaced(client.clone(), namespace);
    let list = match scalers.list(&ListParams::default()).await {
        Ok(list) => list,
        // The CRD is gone (after an uninstall): no scaler can claim the field back.
        Err(kube::Error::Api(status)) if status.code == 404 => return Ok(()),
        Err(source) => {
            return Err(ReleaseError::Api {
                operation: format!("list LLMScalers in {namespace}"),
                source,
            });
        }
    };
    for scaler in list.items {
        let t = &scaler.spec.target_ref;
        let paused = scaler
            .metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(PAUSED_ANNOTATION))
            .is_some_and(|v| v == "true");
        let advisory = scaler.spec.effective_mode() == ScalerMode::Advisory;
        if t.kind == target.kind && t.name == target.name && !paused && !advisory {
            return Err(ReleaseError::StillScaled {
                namespace: namespace.to_owned(),
                scaler: scaler.metadata.name.unwrap_or_default(),
                kind: target.kind.clone(),
                name: target.name.clone(),
            });
        }
    }
    Ok(())
}

/// Runs `llmscaler release`; prints what was done. Exit 0 released, 2 refused, 1 failure.
pub fn run(args: &ReleaseArgs) -> ExitCode {
    crate::process::install_crypto_provider();
    let target = match parse_target(&args.target) {
        Ok(target) => target,
        Err(err) => return fail(EXIT_REFUSED, &err.to_string()),
    };
    let runtime = match crate::process::runtime() {
        Ok(runtime) => runtime,
        Err(err) => return fail(EXIT_FAILURE, &format!("cannot start the runtime: {err}")),
    };
    let result = runtime.block_on(async {
        let client = kube::Client::try_default()
            .await
            .map_err(ReleaseError::Client)?;
        release(&client, &target, &args.namespace, args.force).await
    });
    match result {
        Ok(released) => {
            let what = format!("{} {}/{}", target.kind, args.namespace, target.name);
            let replicas = released
                .replicas
                .map_or_else(|| "unset".to_owned(), |n| n.to_string());
            if released.dropped_replicas {
                println!(
                    "{what}: spec.replicas ({replicas}) is no longer owned by {FIELD_MANAGER}"
                );
            } else {
                println!("{what}: {FIELD_MANAGER} did not own spec.replicas ({replicas})");
            }
            if released.owners_left.is_empty() {
                println!("  owners of spec.replicas now: none");
            } else {
                println!(
                    "  owners of spec.replicas now: {}",
                    released.owners_left.join(", ")
                );
            }
            println!(
                "  {FIELD_MANAGER}'s {POD_DELETION_COST} marks cleared on {} pod(s){}",
                released.pods_cleared.len(),
                if released.pods_cleared.is_empty() {
                    String::new()
                } else {
                    format!(": {}", released.pods_cleared.join(", "))
                }
            );
            if !released.pods_returned.is_empty() {
                println!(
                    "  pods back in rotation ({ROTATION_LABEL}={ROTATION_IN}): {}",
                    released.pods_returned.join(", ")
                );
            }
            ExitCode::from(EXIT_RELEASED)
        }
        Err(err @ (ReleaseError::StillScaled { .. } | ReleaseError::Target(_))) => {
            fail(EXIT_REFUSED, &err.to_string())
        }
        Err(err) => fail(EXIT_FAILURE, &err.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn targets() {
        let t = parse_target("deployment/vllm").expect("deployment");
        assert_eq!(
            (t.api_version.as_str(), t.kind.as_str(), t.name.as_str()),
            ("apps/v1", "Deployment", "vllm")
        );
        let t = parse_target("sts/db").expect("sts");
        assert_eq!(t.kind, "StatefulSet");
        let t = parse_target("Foo.v1.example.com/x").expect("generic");
        assert_eq!(
            (t.api_version.as_str(), t.kind.as_str()),
            ("example.com/v1", "Foo")
        );
        assert!(parse_target("vllm").is_err());
        assert!(parse_target("deployment/").is_err());
        assert!(parse_target("Foo/x").is_err());
    }

    #[test]
    fn ownership_of_replicas_only_is_removed() {
        let fields = json!([
            {"manager": "helm", "operation": "Apply",
             "fieldsV1": {"f:spec": {"f:replicas": {}, "f:template": {}}}},
            {"manager": "llmscaler", "operation": "Apply",
             "fieldsV1": {"f:spec": {"f:replicas": {}}}},
            {"manager": "llmscaler", "operation": "Apply", "subresource": "status",
             "fieldsV1": {"f:status": {}}},
        ]);
        let out = without_replicas_ownership(&fields, "llmscaler").expect("changed");
        assert_eq!(
            out,
            json!([
                {"manager": "helm", "operation": "Apply",
                 "fieldsV1": {"f:spec": {"f:replicas": {}, "f:template": {}}}},
                {"manager": "llmscaler", "operation": "Apply", "subresource": "status",
                 "fieldsV1": {"f:status": {}}},
            ])
        );
        let kept = json!([{"manager": "llmscaler", "operation": "Apply",
             "fieldsV1": {"f:metadata": {"f:labels": {}}, "f:spec": {"f:replicas": {}}}}]);
        assert_eq!(
            without_replicas_ownership(&kept, "llmscaler"),
            Some(json!([{"manager": "llmscaler", "operation": "Apply",
                         "fieldsV1": {"f:metadata": {"f:labels": {}}}}]))
        );
        assert_eq!(without_replicas_ownership(&json!([]), "llmscaler"), None);
    }
}
