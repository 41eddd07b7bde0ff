//! A KEDA `TriggerAuthentication` (`keda.sh/v1alpha1`) behind a Prometheus trigger →
//! `spec.serverHeadersFrom` (docs/migrate.md#keda-triggerauthentication): the Secret KEDA reads is
//! referenced as it is, never copied, and the `Bearer ` prefix KEDA adds to a bearer token is
//! the entry's `valuePrefix`.
//!
//! Authentication modes of KEDA's Prometheus scaler (`authModes`, comma-separated): `bearer`
//! (parameter `bearerToken`), `custom` (`customAuthHeader`, `customAuthValue`), `basic`
//! (`username`, `password`), `tls` (`cert`, `key`, `ca`).

use std::collections::BTreeMap;

use llmscaler_api::{HeaderFromSecret, SecretKeyRef};
use serde_json::Value;

use super::Findings;

/// Where a trigger's credentials are read: the ScaledObject's namespace, the
/// TriggerAuthentications of the input, and `--custom-auth-header`.
pub struct AuthContext<'a> {
    /// The ScaledObject's namespace (`None`: not written, any matches).
    pub namespace: Option<&'a str>,
    /// Every TriggerAuthentication and ClusterTriggerAuthentication of the input.
    pub auths: &'a [&'a Value],
    /// The header name of a `custom` authentication.
    pub custom_header: Option<&'a str>,
}

/// The `serverHeadersFrom` entries of one Prometheus trigger at `path` (its `authModes` and
/// `authenticationRef`); refusals name the field and what to do.
pub fn headers_from(
    trigger: &Value,
    path: &str,
    context: &AuthContext<'_>,
    findings: &mut Findings,
) -> Vec<HeaderFromSecret> {
    let modes_path = format!("{path}.metadata.authModes");
    let modes: Vec<String> = trigger["metadata"]["authModes"]
        .as_str()
        .unwrap_or_default()
        .split(',')
        .map(|m| m.trim().to_owned())
        .filter(|m| !m.is_empty())
        .collect();
    let reference = &trigger["authenticationRef"];
    let ref_path = format!("{path}.authenticationRef");
    if reference.is_null() {
        if !modes.is_empty() {
            findings.refuse(
                modes_path,
                format!(
                    "{:?} without an authenticationRef: no credentials to send",
                    modes.join(",")
                ),
            );
        }
        return Vec::new();
    }
    if modes.is_empty() {
        findings.refuse(
            &ref_path,
            "has no equivalent without metadata.authModes (bearer or custom convert to \
             spec.serverHeadersFrom; a pod identity or cloud credentials do not)",
        );
        return Vec::new();
    }
    let Some(params) = secret_params(reference, &ref_path, context, findings) else {
        return Vec::new();
    };
    let mut headers = Vec::new();
    let mut used = Vec::new();
    for mode in &modes {
        if let Some(header) = mode_header(mode, &params, context, &modes_path, &mut used, findings)
        {
            headers.push(header);
        }
    }
    for (param, key) in &params {
        if !used.contains(&param.as_str()) {
            findings.refuse(
                &ref_path,
                format!(
                    "parameter {param:?} ({}) has no equivalent for the authModes given",
                    shown(key)
                ),
            );
        }
    }
    headers
}

/// The header of one `authModes` entry, or `None` (refused, naming what to do). `used` collects
/// the parameters the mode reads.
fn mode_header(
    mode: &str,
    params: &BTreeMap<String, SecretKeyRef>,
    context: &AuthContext<'_>,
    modes_path: &str,
    used: &mut Vec<&'static str>,
    findings: &mut Findings,
) -> Option<HeaderFromSecret> {
    match mode {
        "bearer" => match params.get("bearerToken") {
            Some(key) => {
                used.push("bearerToken");
                return Some(entry("Authorization", key, Some("Bearer ")));
            }
            None => findings.refuse(
                modes_path,
                "\"bearer\" needs the parameter bearerToken in the TriggerAuthentication's secretTargetRef",
            ),
        },
        "custom" => {
            used.extend(["customAuthHeader", "customAuthValue"]);
            match (params.get("customAuthValue"), context.custom_header) {
                (Some(value), Some(header)) => return Some(entry(header, value, None)),
                (None, _) => findings.refuse(
                    modes_path,
                    "\"custom\" needs the parameter customAuthValue in the TriggerAuthentication's secretTargetRef",
                ),
                (Some(_), None) => findings.refuse(
                    modes_path,
                    format!(
                        "\"custom\": the header's name (customAuthHeader) is in {}, which \
                         convert does not read: pass --custom-auth-header NAME",
                        params
                            .get("customAuthHeader")
                            .map_or_else(|| "no secretTargetRef".to_owned(), shown)
                    ),
                ),
            }
        }
        "basic" => {
            used.extend(["username", "password"]);
            findings.refuse(
                modes_path,
                format!(
                    "\"basic\" has no equivalent: KEDA sends `Basic base64(username:password)` \
                     built from two keys{}; add one key holding that base64 text to the \
                     Secret and reference it in spec.serverHeadersFrom (name Authorization, \
                     valuePrefix \"Basic \")",
                    params
                        .get("username")
                        .map(|k| format!(" ({})", shown(k)))
                        .unwrap_or_default()
                ),
            );
        }
        "tls" => {
            used.extend(["cert", "key", "ca"]);
            findings.refuse(
                modes_path,
                "\"tls\" has no equivalent: llmscaler presents no client certificate",
            );
        }
        other => findings.refuse(
            modes_path,
            format!("{other:?} has no equivalent (bearer and custom convert)"),
        ),
    }
    None
}

fn entry(header: &str, key: &SecretKeyRef, prefix: Option<&str>) -> HeaderFromSecret {
    HeaderFromSecret {
        name: header.to_owned(),
        secret_key_ref: key.clone(),
        value_prefix: prefix.map(str::to_owned),
    }
}

fn shown(key: &SecretKeyRef) -> String {
    format!("key {:?} of Secret {:?}", key.key, key.name)
}

/// The TriggerAuthentication `reference` names, as `parameter → Secret key`; `None` (refused)
/// when it is not in the input, is cluster-scoped, or reads anything but Secrets.
fn secret_params(
    reference: &Value,
    ref_path: &str,
    context: &AuthContext<'_>,
    findings: &mut Findings,
) -> Option<BTreeMap<String, SecretKeyRef>> {
    let name = reference["name"].as_str().unwrap_or_default();
    let kind = reference["kind"]
        .as_str()
        .unwrap_or("TriggerAuthentication");
    if kind == "ClusterTriggerAuthentication" {
        findings.refuse(
            ref_path,
            format!(
                "ClusterTriggerAuthentication {name:?}: its Secrets are in KEDA's namespace, and \
                 an LLMScaler reads Secrets of its own namespace only: copy the Secret there and \
                 set spec.serverHeadersFrom"
            ),
        );
        return None;
    }
    let same_namespace =
        |auth: &&&&Value| match (auth["metadata"]["namespace"].as_str(), context.namespace) {
            (Some(a), Some(b)) => a == b,
            _ => true,
        };
    let named: Vec<&&Value> = context
        .auths
        .iter()
        .filter(|a| a["kind"] == "TriggerAuthentication" && a["metadata"]["name"] == name)
        .collect();
    let Some(auth) = named.iter().find(same_namespace) else {
        let elsewhere = named
            .first()
            .and_then(|a| a["metadata"]["namespace"].as_str())
            .map(|ns| format!(" (the one of the input is in namespace {ns:?}; an LLMScaler reads Secrets of its own namespace)"))
            .unwrap_or_default();
        let namespace = context
            .namespace
            .map(|ns| format!(" of namespace {ns:?}"))
            .unwrap_or_default();
        findings.refuse(
            ref_path,
            format!(
                "TriggerAuthentication {name:?}{namespace} is not in the input{elsewhere}: \
                 convert it with the ScaledObject (kubectl get triggerauthentication {name} -o \
                 yaml, in the same file)"
            ),
        );
        return None;
    };
    let spec = &auth["spec"];
    let mut params = BTreeMap::new();
    for (source, value) in spec.as_object().into_iter().flatten() {
        if source != "secretTargetRef" {
            findings.refuse(
                format!("{ref_path} (TriggerAuthentication {name} spec.{source})"),
                "has no equivalent: llmscaler reads credentials from Secrets of the \
                 LLMScaler's namespace only (spec.serverHeadersFrom)",
            );
            continue;
        }
        for item in value.as_array().into_iter().flatten() {
            let (Some(param), Some(secret), Some(key)) = (
                item["parameter"].as_str(),
                item["name"].as_str(),
                item["key"].as_str(),
            ) else {
                findings.refuse(
                    format!("{ref_path} (TriggerAuthentication {name} spec.secretTargetRef)"),
                    "each entry needs parameter, name and key",
                );
                continue;
            };
            params.insert(
                param.to_owned(),
                SecretKeyRef {
                    name: secret.to_owned(),
                    key: key.to_owned(),
                },
            );
        }
    }
    Some(params)
}
