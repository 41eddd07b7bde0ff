//! The Kubernetes side: the Secret that holds the certificates, and the `caBundle` of the
//! webhook configurations.

use std::collections::BTreeMap;

use k8s_openapi::ByteString;
use k8s_openapi::api::admissionregistration::v1::{
    MutatingWebhookConfiguration, ValidatingWebhookConfiguration,
};
use k8s_openapi::api::core::v1::Secret;
use kube::Client;
use kube::api::{Api, ObjectMeta, Patch, PatchParams, PostParams};
use kube::core::{ApiResource, DynamicObject};
use serde_json::{Value, json};
use time::OffsetDateTime;

use crate::pki::{self, CertState, ServingPems};
use crate::{
    CA_BUNDLE, CA_BUNDLE_FIELD_MANAGER, CA_CERT, CA_KEY, CertConfig, Error, MANAGED_BY,
    MANAGED_BY_LABEL, NEXT_CA_CERT, NEXT_CA_KEY, PREVIOUS_CA_CERT, SECRET_FIELD_MANAGER, TLS_CERT,
    TLS_KEY,
};

/// How many conflicting writes [`sync_secret`] retries before giving up until the next check.
pub(crate) const MAX_WRITE_ATTEMPTS: u32 = 5;

impl CertState {
    /// Reads the state from a Secret's `data`; `None` when a required entry (CA, serving
    /// certificate or their keys) is missing or not UTF-8.
    pub fn from_secret(secret: &Secret) -> Option<Self> {
        let data = secret.data.as_ref()?;
        let text = |key: &str| {
            data.get(key)
                .and_then(|b| String::from_utf8(b.0.clone()).ok())
                .filter(|s| !s.trim().is_empty())
        };
        Some(Self {
            ca_cert_pem: text(CA_CERT)?,
            ca_key_pem: text(CA_KEY)?,
            next_ca_cert_pem: text(NEXT_CA_CERT),
            next_ca_key_pem: text(NEXT_CA_KEY),
            previous_ca_cert_pem: text(PREVIOUS_CA_CERT),
            tls_cert_pem: text(TLS_CERT)?,
            tls_key_pem: text(TLS_KEY)?,
        })
    }

    /// The Secret `data` for this state (see the crate docs for the keys).
    pub fn to_secret_data(&self) -> BTreeMap<String, ByteString> {
        let mut data = BTreeMap::new();
        let mut put = |key: &str, value: &str| {
            data.insert(key.to_string(), ByteString(value.as_bytes().to_vec()));
        };
        put(CA_CERT, &self.ca_cert_pem);
        put(CA_KEY, &self.ca_key_pem);
        put(TLS_CERT, &self.tls_cert_pem);
        put(TLS_KEY, &self.tls_key_pem);
        put(CA_BUNDLE, &self.ca_bundle_pem());
        if let Some(cert) = &self.next_ca_cert_pem {
            put(NEXT_CA_CERT, cert);
        }
        if let Some(key) = &self.next_ca_key_pem {
            put(NEXT_CA_KEY, key);
        }
        if let Some(cert) = &self.previous_ca_cert_pem {
            put(PREVIOUS_CA_CERT, cert);
        }
        data
    }
}

/// The Secret holding `state`. Replacing an existing Secret (`current`) keeps its labels,
/// annotations and owner references (the chart creates it empty with Helm's ownership labels,
/// so `helm uninstall` removes it and `helm upgrade` still recognises it) and carries its
/// `resourceVersion`; [`MANAGED_BY_LABEL`] is only added when absent.
fn secret_for(cfg: &CertConfig, state: &CertState, current: Option<&ObjectMeta>) -> Secret {
    let mut labels = current.and_then(|m| m.labels.clone()).unwrap_or_default();
    labels
        .entry(MANAGED_BY_LABEL.to_string())
        .or_insert_with(|| MANAGED_BY.to_string());
    Secret {
        metadata: ObjectMeta {
            name: Some(cfg.secret_name.clone()),
            namespace: Some(cfg.namespace.clone()),
            labels: Some(labels),
            annotations: current.and_then(|m| m.annotations.clone()),
            owner_references: current.and_then(|m| m.owner_references.clone()),
            resource_version: current.and_then(|m| m.resource_version.clone()),
            ..ObjectMeta::default()
        },
        type_: Some("Opaque".to_string()),
        data: Some(state.to_secret_data()),
        ..Secret::default()
    }
}

fn kube_error(action: String) -> impl FnOnce(kube::Error) -> Error {
    move |source| Error::Kube { action, source }
}

fn is_status(err: &kube::Error, check: fn(&kube::core::Status) -> bool) -> bool {
    matches!(err, kube::Error::Api(status) if check(status))
}

/// Brings the Secret up to date at `now` and returns the state it holds afterwards:
/// - absent: a fresh state is created with `POST`; when another replica created it first
///   (409 AlreadyExists) the winner's Secret is read and used, so replicas starting together
///   end up with one CA;
/// - present but incomplete or unreadable: replaced by a fresh state (by the held one in
///   [`sync_secret_from`]);
/// - present: [`pki::renew`] decides; a change is written with `PUT` carrying the
///   `resourceVersion` read, so a concurrent writer makes it fail (409 Conflict) and the loop
///   starts again from a fresh read.
///
/// # Errors
/// [`Error::Kube`] for API failures, [`Error::Contended`] after [`MAX_WRITE_ATTEMPTS`]
/// conflicting writes, and the errors of [`pki::new_state`] / [`pki::renew`].
pub async fn sync_secret(
    client: &Client,
    cfg: &CertConfig,
    now: OffsetDateTime,
) -> Result<CertState, Error> {
    sync_secret_from(client, cfg, now, None)
        .await
        .map(|held| held.state)
}

/// What a process holds of its certificate Secret after a successful round: the state it
/// serves with, and the Secret's labels and annotations (the chart's Helm ownership, which a
/// Secret written again must carry, or the next `helm upgrade` fails on it).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HeldSecret {
    /// The CA and serving certificate.
    pub state: CertState,
    labels: Option<BTreeMap<String, String>>,
    annotations: Option<BTreeMap<String, String>>,
}

impl HeldSecret {
    fn of(state: CertState, meta: &ObjectMeta) -> Self {
        Self {
            state,
            labels: meta.labels.clone(),
            annotations: meta.annotations.clone(),
        }
    }

    /// The metadata a Secret written again starts from (no `resourceVersion`: it is created).
    fn metadata(&self) -> ObjectMeta {
        ObjectMeta {
            labels: self.labels.clone(),
            annotations: self.annotations.clone(),
            ..ObjectMeta::default()
        }
    }
}

/// What an absent Secret is filled with: the state this process `held` (renewed first when
/// [`pki::renew`] says so) or, with nothing held, a fresh CA and serving certificate.
fn refill(
    cfg: &CertConfig,
    held: Option<&CertState>,
    now: OffsetDateTime,
) -> Result<CertState, Error> {
    match held {
        Some(state) => Ok(pki::renew(state, cfg, now)?.unwrap_or_else(|| state.clone())),
        None => pki::new_state(cfg, now),
    }
}

/// [`sync_secret`] for a process that already serves with `held` (the state of its last
/// successful round): a Secret deleted behind the operator's back (by hand, by a `helm upgrade`
/// or a GitOps prune) is written again **with the CA this process holds** and the labels and
/// annotations it last carried (Helm's ownership), so the `caBundle` the API server trusts and
/// the certificate every replica serves stay valid, no admission fails, and the next `helm
/// upgrade` still owns the Secret (`docs/security.md#availability`). Only a process that holds
/// nothing creates a new CA.
///
/// # Errors
/// As [`sync_secret`].
pub async fn sync_secret_from(
    client: &Client,
    cfg: &CertConfig,
    now: OffsetDateTime,
    held: Option<&HeldSecret>,
) -> Result<HeldSecret, Error> {
    let secrets: Api<Secret> = Api::namespaced(client.clone(), &cfg.namespace);
    let params = PostParams {
        dry_run: false,
        field_manager: Some(SECRET_FIELD_MANAGER.to_string()),
    };
    let name = &cfg.secret_name;
    for _ in 0..MAX_WRITE_ATTEMPTS {
        let current = secrets.get_opt(name).await.map_err(kube_error(format!(
            "reading Secret {}/{name}",
            cfg.namespace
        )))?;
        let Some(current) = current else {
            let state = refill(cfg, held.map(|h| &h.state), now)?;
            let meta = held.map(HeldSecret::metadata);
            match secrets
                .create(&params, &secret_for(cfg, &state, meta.as_ref()))
                .await
            {
                Ok(created) => {
                    if held.is_some() {
                        tracing::warn!(secret = %name, "the webhook Secret was missing; written again from the CA held in memory");
                    } else {
                        tracing::info!(secret = %name, "created the webhook CA and serving certificate");
                    }
                    return Ok(HeldSecret::of(state, &created.metadata));
                }
                Err(err) if is_status(&err, kube::core::Status::is_already_exists) => continue,
                Err(err) => {
                    return Err(kube_error(format!(
                        "creating Secret {}/{name}",
                        cfg.namespace
                    ))(err));
                }
            }
        };
        let (wanted, why) = match CertState::from_secret(&current) {
            // Emptied or re-created empty (a `helm upgrade` after the Secret was deleted puts
            // the chart's empty Secret back): refilled like an absent one.
            None => (
                refill(cfg, held.map(|h| &h.state), now)?,
                "Secret was incomplete",
            ),
            Some(state) => match pki::renew(&state, cfg, now)? {
                None => return Ok(HeldSecret::of(state, &current.metadata)),
                Some(renewed) => (renewed, "rotation due"),
            },
        };
        let secret = secret_for(cfg, &wanted, Some(&current.metadata));
        match secrets.replace(name, &params, &secret).await {
            Ok(replaced) => {
                tracing::info!(secret = %name, reason = why, "updated the webhook certificates");
                return Ok(HeldSecret::of(wanted, &replaced.metadata));
            }
            Err(err)
                if is_status(&err, kube::core::Status::is_conflict)
                    || is_status(&err, kube::core::Status::is_not_found) =>
            {
                continue;
            }
            Err(err) => {
                return Err(kube_error(format!(
                    "updating Secret {}/{name}",
                    cfg.namespace
                ))(err));
            }
        }
    }
    Err(Error::Contended {
        namespace: cfg.namespace.clone(),
        name: name.clone(),
        attempts: MAX_WRITE_ATTEMPTS,
    })
}

/// Writes `ca_bundle_pem` into `clientConfig.caBundle` of every webhook of the configurations
/// named in `cfg`, by server-side apply (forced) under [`CA_BUNDLE_FIELD_MANAGER`], sending
/// only `webhooks[].name` and `webhooks[].clientConfig.caBundle` (the list is keyed by name).
/// A configuration whose webhooks already all carry this bundle is left alone; a missing
/// configuration is logged and skipped (it may not be installed yet).
///
/// # Errors
/// [`Error::Kube`] for the first failing read or apply; the other configuration is still tried.
pub async fn inject_ca_bundle(
    client: &Client,
    cfg: &CertConfig,
    ca_bundle_pem: &str,
) -> Result<(), Error> {
    let encoded =
        serde_json::to_value(ByteString(ca_bundle_pem.as_bytes().to_vec())).unwrap_or(Value::Null);
    let targets = [
        (
            cfg.validating_webhook_configuration.as_deref(),
            ApiResource::erase::<ValidatingWebhookConfiguration>(&()),
        ),
        (
            cfg.mutating_webhook_configuration.as_deref(),
            ApiResource::erase::<MutatingWebhookConfiguration>(&()),
        ),
    ];
    let mut first_error = None;
    for (name, resource) in targets {
        let Some(name) = name else { continue };
        if let Err(err) = inject_one(client, &resource, name, &encoded).await {
            tracing::warn!(error = %err, "caBundle injection failed");
            first_error.get_or_insert(err);
        }
    }
    first_error.map_or(Ok(()), Err)
}

async fn inject_one(
    client: &Client,
    resource: &ApiResource,
    name: &str,
    encoded: &Value,
) -> Result<(), Error> {
    let api: Api<DynamicObject> = Api::all_with(client.clone(), resource);
    let action = |verb: &str| format!("{verb} {} {name}", resource.kind);
    let Some(current) = api
        .get_opt(name)
        .await
        .map_err(kube_error(action("reading")))?
    else {
        tracing::warn!(kind = %resource.kind, name, "webhook configuration not found; caBundle not injected");
        return Ok(());
    };
    let webhooks = current
        .data
        .get("webhooks")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    let names: Vec<&str> = webhooks
        .iter()
        .filter_map(|w| w.get("name").and_then(Value::as_str))
        .collect();
    let up_to_date = webhooks
        .iter()
        .all(|w| w.pointer("/clientConfig/caBundle") == Some(encoded));
    if names.is_empty() || up_to_date {
        return Ok(());
    }
    let patch = json!({
        "apiVersion": resource.api_version,
        "kind": resource.kind,
        "metadata": { "name": name },
        "webhooks": names
            .iter()
            .map(|n| json!({ "name": n, "clientConfig": { "caBundle": encoded } }))
            .collect::<Vec<_>>(),
    });
    api.patch(
        name,
        &PatchParams::apply(CA_BUNDLE_FIELD_MANAGER).force(),
        &Patch::Apply(&patch),
    )
    .await
    .map_err(kube_error(action("applying caBundle to")))?;
    tracing::info!(kind = %resource.kind, name, webhooks = names.len(), "caBundle injected");
    Ok(())
}

/// One round: [`sync_secret`] at the current time, then [`inject_ca_bundle`]. Call it once at
/// start-up, before serving, to get the first certificate.
///
/// # Errors
/// As [`sync_secret`] and [`inject_ca_bundle`].
pub async fn ensure(client: &Client, cfg: &CertConfig) -> Result<ServingPems, Error> {
    let state = sync_secret(client, cfg, OffsetDateTime::now_utc()).await?;
    let pems = state.serving_pems();
    inject_ca_bundle(client, cfg, &pems.ca_bundle_pem).await?;
    Ok(pems)
}

/// The certificate loop the operator runs beside its webhook server (from `llmscaler run`):
/// every [`CertConfig::check_interval`] (the first round at once) it runs [`ensure`], and calls
/// `on_change` with the serving certificate, key and bundle whenever they differ from the last
/// ones it was given (the first successful round always calls it). Typical `on_change`:
/// `move |p| resolver.set_pem(p.cert_chain_pem.as_bytes(), p.key_pem.as_bytes())` on the
/// webhook's `CertResolver`.
///
/// Errors are logged and retried at the next round; the loop never returns on its own: drop or
/// abort the future to stop it. Every replica may run it: the Secret writes are race-safe, and
/// every replica follows the Secret. A deleted Secret is written again within one interval from
/// the CA the replicas hold in memory ([`sync_secret_from`]): the `caBundle` stays the same
/// and no admission fails.
pub async fn maintain<F>(client: Client, cfg: CertConfig, on_change: F)
where
    F: Fn(&ServingPems) + Send + Sync,
{
    let mut last: Option<ServingPems> = None;
    let mut held: Option<HeldSecret> = None;
    let mut ticker = tokio::time::interval(cfg.check_interval);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        ticker.tick().await;
        match sync_secret_from(&client, &cfg, OffsetDateTime::now_utc(), held.as_ref()).await {
            Ok(state) => {
                let pems = state.state.serving_pems();
                held = Some(state);
                if last.as_ref() != Some(&pems) {
                    on_change(&pems);
                    last = Some(pems.clone());
                }
                // Errors are logged inside; the next round retries.
                let _ = inject_ca_bundle(&client, &cfg, &pems.ca_bundle_pem).await;
            }
            Err(err) => tracing::warn!(error = %err, "webhook certificate check failed; retrying"),
        }
    }
}
