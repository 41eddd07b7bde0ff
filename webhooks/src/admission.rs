//! Pure admission handlers for `LLMScaler` (docs/admission.md): no I/O, no panics, one response per
//! request.
//!
//! Both handlers answer any request: a DELETE or CONNECT is allowed untouched, a status update
//! or an object already being deleted is allowed untouched (so finalizers can always be
//! removed), and a request for another kind is denied with a message saying what this webhook
//! admits. Everything about the spec itself comes from `llmscaler-api`, never re-implemented
//! here.

use json_patch::jsonptr::PointerBuf;
use json_patch::{AddOperation, Patch, PatchOperation};
use kube::core::admission::{AdmissionRequest, AdmissionResponse, Operation};
use kube::core::{DynamicObject, Status};
use llmscaler_api::names;
use llmscaler_api::validation::parse_json_value;
use llmscaler_api::{
    LLMScaler, LLMScalerSpec, OperatorPolicy, ValidationErrors, apply_defaults, spec_warnings,
    validate_spec,
};
use serde_json::Value;

/// `status.reason` of a denial for an invalid spec (kubectl prints `Error from server
/// (Invalid)`).
pub(crate) const REASON_INVALID: &str = "Invalid";
/// `status.code` of a denial for an invalid spec (HTTP 422 Unprocessable Entity, like the API
/// server's own field validation).
pub(crate) const CODE_INVALID: u16 = 422;
/// `status.reason` of a denial for a request this webhook should never have been sent.
pub(crate) const REASON_BAD_REQUEST: &str = "BadRequest";
/// `status.code` of such a denial (HTTP 400).
pub(crate) const CODE_BAD_REQUEST: u16 = 400;

/// Validating admission (docs/admission.md) of a CREATE or UPDATE of an `LLMScaler`.
///
/// - Allowed: DELETE and CONNECT, status subresource updates, objects with a
///   `deletionTimestamp`, UPDATEs that leave the spec as it was (a finalizer, a label), and
///   valid specs. Valid specs get `warnings` from
///   [`llmscaler_api::spec_warnings`] (`preemption` has no effect; a Prometheus query without
///   top-level aggregation).
/// - Denied with `status.reason = "Invalid"`, `status.code = 422` and a message listing every
///   violation as `path: reason`, one per line: a field of the wrong type (the first one serde
///   meets, with its path, e.g. `spec.minReplicas: invalid type: ...`), then every rule of
///   [`llmscaler_api::validate_spec`] and [`llmscaler_api::validation::validate_namespace_rules`]
///   under `policy` (the operator's flags, `docs/security.md`). Warnings are attached to a denial too when the spec
///   could be read.
/// - Denied with `status.reason = "BadRequest"`, code 400: another kind, or no object.
///
/// An UPDATE that changes the spec is checked exactly like CREATE: only the new object counts.
pub fn validate(
    req: &AdmissionRequest<DynamicObject>,
    policy: &OperatorPolicy,
) -> AdmissionResponse {
    let response = AdmissionResponse::from(req);
    let object = match admitted_object(req) {
        Admit::Skip => return response,
        Admit::Refuse(message) => return bad_request(response, &message),
        Admit::Check(object) => object,
    };
    let scaler: LLMScaler = match read(&object) {
        Ok(scaler) => scaler,
        Err(errors) => return invalid(response, &errors),
    };
    let mut errors = validate_spec(&scaler.spec, policy);
    errors.extend(llmscaler_api::validation::validate_namespace_rules(
        &scaler.spec,
        req.namespace.as_deref().unwrap_or_default(),
        policy,
    ));
    let warnings = spec_warnings(&scaler.spec);
    let mut response = if errors.is_empty() {
        response
    } else {
        invalid(response, &ValidationErrors(errors))
    };
    if !warnings.is_empty() {
        response.warnings = Some(warnings);
    }
    response
}

/// Mutating admission (docs/admission.md): writes every default of
/// [`llmscaler_api::apply_defaults`] into a CREATE or UPDATE of an `LLMScaler`, as a JSON patch
/// (RFC 6902) made only of `add` operations under `/spec`. A missing parent is added whole with
/// its defaulted children (`/spec/scaleDown` with `stabilizationWindowSeconds`,
/// `maxStepReplicas` and `behavior`), and a field set to `null` counts as missing. Values that
/// are set are never changed.
///
/// Allowed without a patch: nothing to default, DELETE and CONNECT, status updates, objects
/// being deleted, and specs that cannot be read (wrong types, no `spec`), which the validating
/// webhook then denies with the field path. Denied (code 400) only for another kind or a
/// request with no object.
pub fn mutate(req: &AdmissionRequest<DynamicObject>) -> AdmissionResponse {
    let response = AdmissionResponse::from(req);
    let object = match admitted_object(req) {
        Admit::Skip => return response,
        Admit::Refuse(message) => return bad_request(response, &message),
        Admit::Check(object) => object,
    };
    let Some(original) = object.get("spec") else {
        return response;
    };
    let Ok(mut spec) = read::<LLMScalerSpec>(original) else {
        return response;
    };
    apply_defaults(&mut spec);
    let defaulted = match serde_json::to_value(&spec) {
        Ok(value) => value,
        Err(err) => return bad_request(response, &format!("cannot serialize the spec: {err}")),
    };
    let operations = default_additions(original, &defaulted);
    if operations.is_empty() {
        return response;
    }
    match response.clone().with_patch(Patch(operations)) {
        Ok(patched) => patched,
        Err(err) => bad_request(response, &err.to_string()),
    }
}

/// The `add` operations that turn `original` (the request's `spec`) into `defaulted` (the same
/// spec after [`apply_defaults`]), with pointers under `/spec`. Only members missing from
/// `original` (or `null` there) are added; objects present on both sides are walked; arrays and
/// scalars are never touched, so a user's value can never be replaced.
pub(crate) fn default_additions(original: &Value, defaulted: &Value) -> Vec<PatchOperation> {
    let mut operations = Vec::new();
    collect_additions(
        &mut PointerBuf::from_tokens(["spec"]),
        original,
        defaulted,
        &mut operations,
    );
    operations
}

fn collect_additions(
    at: &mut PointerBuf,
    original: &Value,
    defaulted: &Value,
    operations: &mut Vec<PatchOperation>,
) {
    let (Value::Object(original), Value::Object(defaulted)) = (original, defaulted) else {
        return;
    };
    for (key, value) in defaulted {
        if value.is_null() {
            continue;
        }
        at.push_back(key.as_str());
        match original.get(key) {
            None | Some(Value::Null) => operations.push(PatchOperation::Add(AddOperation {
                path: at.clone(),
                value: value.clone(),
            })),
            Some(present) => collect_additions(at, present, value, operations),
        }
        at.pop_back();
    }
}

/// Deserializes `value`; on failure, again with path tracking for the message
/// ([`parse_json_value`]), so the common case pays nothing for it.
fn read<T: serde::de::DeserializeOwned>(value: &Value) -> Result<T, ValidationErrors> {
    T::deserialize(value).or_else(|_| parse_json_value(value))
}

/// What to do with a request before looking at the spec.
enum Admit {
    /// Allow untouched.
    Skip,
    /// Deny as a request this webhook must not receive.
    Refuse(String),
    /// Check this object (as JSON).
    Check(Value),
}

fn admitted_object(req: &AdmissionRequest<DynamicObject>) -> Admit {
    if !matches!(req.operation, Operation::Create | Operation::Update) {
        return Admit::Skip;
    }
    let (group, kind) = (names::group(), names::kind());
    if req.kind.group != group || req.kind.kind != kind {
        return Admit::Refuse(format!(
            "this webhook admits only {group} {kind}, not {:?} in group {:?}; check the rules of the webhook configuration",
            req.kind.kind, req.kind.group
        ));
    }
    if req.sub_resource.as_deref().is_some_and(|s| !s.is_empty()) {
        return Admit::Skip;
    }
    let Some(object) = &req.object else {
        return Admit::Refuse(format!("{:?} request has no object", req.operation));
    };
    if object.metadata.deletion_timestamp.is_some() {
        return Admit::Skip;
    }
    if req.operation == Operation::Update
        && req
            .old_object
            .as_ref()
            .is_some_and(|old| old.data.get("spec") == object.data.get("spec"))
    {
        // Metadata only (the operator's finalizer, labels, annotations): the spec was admitted.
        return Admit::Skip;
    }
    match serde_json::to_value(object) {
        Ok(value) => Admit::Check(value),
        Err(err) => Admit::Refuse(format!("cannot read the object: {err}")),
    }
}

fn invalid(mut response: AdmissionResponse, errors: &ValidationErrors) -> AdmissionResponse {
    let message = errors.to_string();
    response.allowed = false;
    response.result = Status::failure(&message, REASON_INVALID).with_code(CODE_INVALID);
    response
}

fn bad_request(mut response: AdmissionResponse, message: &str) -> AdmissionResponse {
    response.allowed = false;
    response.result = Status::failure(message, REASON_BAD_REQUEST).with_code(CODE_BAD_REQUEST);
    response
}

#[cfg(test)]
mod tests;
