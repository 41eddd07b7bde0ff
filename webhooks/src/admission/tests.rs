//! Unit tests for each rule, each default and each kind of request, and a table test comparing
//! the full responses of both handlers over many specs.

use super::*;
use kube::core::admission::AdmissionReview;
use llmscaler_api::FieldError;
use pretty_assertions::assert_eq;
use serde_json::json;

const UID: &str = "705ab4f5-6393-11e8-b7cc-42010a800002";

fn request(operation: &str, object: Value) -> AdmissionRequest<DynamicObject> {
    request_for(
        operation,
        object,
        json!({"group": names::group(), "version": "v1alpha1", "kind": names::kind()}),
    )
}

fn request_for(operation: &str, object: Value, kind: Value) -> AdmissionRequest<DynamicObject> {
    let review = json!({
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": UID,
            "kind": kind,
            "resource": {"group": names::group(), "version": "v1alpha1", "resource": "llmscalers"},
            "name": "scaler",
            "namespace": "default",
            "operation": operation,
            "userInfo": {"username": "admin"},
            "object": object,
            "oldObject": null,
        }
    });
    let review: AdmissionReview<DynamicObject> =
        serde_json::from_value(review).expect("test review parses");
    review.try_into().expect("review has a request")
}

fn scaler(spec: Value) -> Value {
    json!({
        "apiVersion": "autoscaling.modelsphere.dev/v1alpha1",
        "kind": "LLMScaler",
        "metadata": {"name": "scaler", "namespace": "default"},
        "spec": spec,
    })
}

fn base() -> Value {
    json!({
        "targetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "vllm"},
        "serverAddress": "http://prometheus.monitoring:9090",
        "minReplicas": 1,
        "maxReplicas": 5,
        "metrics": [{"query": "avg(vllm:num_requests_waiting)", "target": "0.5"}],
    })
}

/// `base()` with `changes` merged in at the top of the spec (`null` removes a field).
fn with(changes: Value) -> Value {
    let mut spec = base();
    if let (Some(spec), Some(changes)) = (spec.as_object_mut(), changes.as_object()) {
        for (key, value) in changes {
            if value.is_null() {
                spec.remove(key);
            } else {
                spec.insert(key.clone(), value.clone());
            }
        }
    }
    spec
}

/// The review as JSON, with the patch decoded from bytes to JSON and its operations sorted by
/// path (their order carries no meaning).
fn as_json(response: AdmissionResponse) -> Value {
    let patch: Option<Value> = response
        .patch
        .as_ref()
        .map(|bytes| serde_json::from_slice(bytes).expect("patch is JSON"));
    let mut review = serde_json::to_value(response.into_review()).expect("review serializes");
    if let Some(Value::Array(mut ops)) = patch {
        ops.sort_by_key(|op| op["path"].as_str().unwrap_or_default().to_string());
        review["response"]["patch"] = Value::Array(ops);
    }
    review
}

fn expected(allowed: bool, status: Value, warnings: &[&str], patch: Option<Value>) -> Value {
    let mut response = json!({"uid": UID, "allowed": allowed, "status": status});
    if !warnings.is_empty() {
        response["warnings"] = json!(warnings);
    }
    if let Some(patch) = patch {
        response["patch"] = patch;
        response["patchType"] = json!("JSONPatch");
    }
    json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "response": response})
}

fn invalid_status(lines: &[&str]) -> Value {
    json!({"status": "Failure", "code": 422, "reason": "Invalid", "message": lines.join("\n")})
}

fn add(path: &str, value: Value) -> Value {
    json!({"op": "add", "path": path, "value": value})
}

fn scale_down_default() -> Value {
    add(
        "/spec/scaleDown",
        json!({"stabilizationWindowSeconds": 0, "maxStepReplicas": 0, "behavior": "CacheAware"}),
    )
}

/// The patch for a Prometheus spec with no optional field set.
fn full_defaults() -> Vec<Value> {
    vec![
        add("/spec/metricProvider", json!("Prometheus")),
        add("/spec/retryPeriodSeconds", json!(10)),
        scale_down_default(),
        add("/spec/syncPeriodSeconds", json!(15)),
    ]
}

fn sorted(mut ops: Vec<Value>) -> Option<Value> {
    if ops.is_empty() {
        return None;
    }
    ops.sort_by_key(|op| op["path"].as_str().unwrap_or_default().to_string());
    Some(Value::Array(ops))
}

const UNAGGREGATED: &str = "spec.metrics[0].query has no aggregation at its top; it must return exactly one series (wrap it in avg(...) or sum(...))";
const PREEMPTION: &str = "spec.preemption is accepted but has no effect";
const TARGET_HINT: &str = "targets are plain numbers on the query's own scale";

struct Case {
    name: &'static str,
    spec: Value,
    /// Violations, one `path: reason` line each; empty when the spec is valid.
    errors: Vec<String>,
    warnings: Vec<&'static str>,
    /// The mutating patch operations (any order).
    patch: Vec<Value>,
}

fn case(name: &'static str, spec: Value) -> Case {
    Case {
        name,
        spec,
        errors: vec![],
        warnings: vec![],
        patch: full_defaults(),
    }
}

impl Case {
    fn errors(mut self, errors: &[&str]) -> Self {
        self.errors = errors.iter().map(|e| (*e).to_string()).collect();
        self
    }
    fn warn(mut self, warnings: &[&'static str]) -> Self {
        self.warnings = warnings.to_vec();
        self
    }
    fn patch(mut self, patch: Vec<Value>) -> Self {
        self.patch = patch;
        self
    }
}

fn cases() -> Vec<Case> {
    let all_set = with(json!({
        "metricProvider": "Prometheus", "syncPeriodSeconds": 30, "retryPeriodSeconds": 5,
        "scaleDown": {"stabilizationWindowSeconds": 300, "maxStepReplicas": 2, "behavior": "None"},
    }));
    let custom = with(json!({
        "metricProvider": "Custom", "metrics": null,
        "customProvider": {"serviceId": "llama-70b"},
        "serverAddress": "http://decisions.llm:8080",
    }));
    let metric = |target: &str| json!([{"query": "avg(q)", "target": target}]);
    let type_error = vec![]; // a spec serde cannot read: the mutating webhook leaves it alone
    vec![
        // Valid specs and what the mutating webhook adds.
        case("minimal Prometheus spec gets every default", base()),
        case("every default already set: no patch", all_set.clone()).patch(vec![]),
        case("Custom provider gets the decisions path", custom.clone()).patch(vec![
            add("/spec/customProvider/path", json!("/decisions")),
            add("/spec/retryPeriodSeconds", json!(10)),
            scale_down_default(),
            add("/spec/syncPeriodSeconds", json!(15)),
        ]),
        case(
            "Custom provider with a path keeps it",
            with(json!({
                "metricProvider": "Custom", "metrics": null,
                "customProvider": {"serviceId": "llama", "path": "/v2/decisions", "namespace": "llm"},
                "syncPeriodSeconds": 15, "retryPeriodSeconds": 10,
                "scaleDown": {"stabilizationWindowSeconds": 0, "maxStepReplicas": 0, "behavior": "CacheAware"},
            })),
        )
        .patch(vec![]),
        case(
            "partial scaleDown gets the missing children only",
            with(json!({"scaleDown": {"stabilizationWindowSeconds": 300}})),
        )
        .patch(vec![
            add("/spec/metricProvider", json!("Prometheus")),
            add("/spec/retryPeriodSeconds", json!(10)),
            add("/spec/scaleDown/behavior", json!("CacheAware")),
            add("/spec/scaleDown/maxStepReplicas", json!(0)),
            add("/spec/syncPeriodSeconds", json!(15)),
        ]),
        case("null scaleDown counts as missing", with(json!({"scaleDown": null})))
            .patch(full_defaults()),
        case(
            "scaleDown with only a deletion cost query",
            with(json!({"scaleDown": {"deletionCostQuery": "sum by (pod) (kv_cache)"}})),
        )
        .patch(vec![
            add("/spec/metricProvider", json!("Prometheus")),
            add("/spec/retryPeriodSeconds", json!(10)),
            add("/spec/scaleDown/behavior", json!("CacheAware")),
            add("/spec/scaleDown/maxStepReplicas", json!(0)),
            add("/spec/scaleDown/stabilizationWindowSeconds", json!(0)),
            add("/spec/syncPeriodSeconds", json!(15)),
        ]),
        case("preemption warns", with(json!({"preemption": {"enable": true}})))
            .warn(&[PREEMPTION]),
        case(
            "query without aggregation warns",
            with(json!({"metrics": [{"query": "vllm:num_requests_waiting", "target": "2"}]})),
        )
        .warn(&[UNAGGREGATED]),
        case(
            "both warnings",
            with(json!({
                "preemption": {"priorityClass": "high"},
                "metrics": [{"query": "rate(x[1m])", "target": "2"}],
            })),
        )
        .warn(&[PREEMPTION, UNAGGREGATED]),
        case("zero bounds pin the fleet at zero", with(json!({"minReplicas": 0, "maxReplicas": 0}))),
        case("target on a 0-100 scale", with(json!({"metrics": metric("80")}))),
        case("target in exponent form", with(json!({"metrics": metric("1e-3")}))),
        case(
            "two named metrics",
            with(json!({"metrics": [
                {"name": "queue", "query": "avg(q)", "target": "4"},
                {"name": "kv", "query": "max(kv)", "target": "0.8"},
            ]})),
        ),
        case(
            "LeaderWorkerSet target",
            with(json!({"targetRef": {"apiVersion": "leaderworkerset.x-k8s.io/v1", "kind": "LeaderWorkerSet", "name": "lws"}})),
        ),
        case(
            "valid server headers over https",
            with(json!({
                "serverAddress": "https://prometheus.example:443",
                "serverHeaders": {"Authorization": "Bearer t0ken", "X-Api-Key": "team-a"},
            })),
        ),
        case(
            "Custom provider ignores metrics",
            with(json!({"metricProvider": "Custom", "customProvider": {"serviceId": "x", "path": "/d"}})),
        )
        .patch(vec![
            add("/spec/retryPeriodSeconds", json!(10)),
            scale_down_default(),
            add("/spec/syncPeriodSeconds", json!(15)),
        ]),
        case("unknown fields are ignored", with(json!({"color": "blue"}))),
        // Invalid specs: every violation with its path.
        case("percent target", with(json!({"metrics": metric("80%")}))).errors(&[&format!(
            "spec.metrics[0].target: \"80%\" is not a number; {TARGET_HINT} (write \"80\" against a 0-100 series, or the fraction against a 0-1 ratio)"
        )]),
        case("zero target", with(json!({"metrics": metric("0")})))
            .errors(&["spec.metrics[0].target: \"0\" must be greater than zero"]),
        case("negative target", with(json!({"metrics": metric("-1")})))
            .errors(&["spec.metrics[0].target: \"-1\" must be greater than zero"]),
        case("word target", with(json!({"metrics": metric("abc")})))
            .errors(&[&format!("spec.metrics[0].target: \"abc\" is not a number; {TARGET_HINT}")]),
        case("empty target", with(json!({"metrics": metric("")}))).errors(&[&format!(
            "spec.metrics[0].target: target is empty; {TARGET_HINT} (e.g. \"0.8\" against a 0-1 ratio)"
        )]),
        case("NaN target", with(json!({"metrics": metric("NaN")})))
            .errors(&[&format!("spec.metrics[0].target: \"NaN\" is not a finite number; {TARGET_HINT}")]),
        case("minReplicas above maxReplicas", with(json!({"minReplicas": 6})))
            .errors(&["spec.minReplicas: 6 must be less than or equal to spec.maxReplicas (5)"]),
        case("negative minReplicas", with(json!({"minReplicas": -1})))
            .errors(&["spec.minReplicas: -1 must be 0 or more"]),
        case("negative maxReplicas", with(json!({"minReplicas": 0, "maxReplicas": -2}))).errors(&[
            "spec.maxReplicas: -2 must be 0 or more",
            "spec.minReplicas: 0 must be less than or equal to spec.maxReplicas (-2)",
        ]),
        case("empty metrics under Prometheus", with(json!({"metrics": []}))).errors(&[
            "spec.metrics: must list at least one {query, target} under the Prometheus provider",
        ]),
        case("no metrics under Prometheus", with(json!({"metrics": null}))).errors(&[
            "spec.metrics: must list at least one {query, target} under the Prometheus provider",
        ]),
        case("empty query", with(json!({"metrics": [{"query": " ", "target": "1"}]}))).errors(&[
            "spec.metrics[0].query: required: a PromQL query returning exactly one series, or runtime and signal (docs/signals.md)",
        ]),
        case(
            "Custom without customProvider",
            with(json!({"metricProvider": "Custom", "metrics": null})),
        )
        .errors(&["spec.customProvider: required when spec.metricProvider is Custom"])
        .patch(vec![
            add("/spec/retryPeriodSeconds", json!(10)),
            scale_down_default(),
            add("/spec/syncPeriodSeconds", json!(15)),
        ]),
        case(
            "Custom with an empty serviceId",
            with(json!({"metricProvider": "Custom", "customProvider": {"serviceId": ""}})),
        )
        .errors(&["spec.customProvider.serviceId: required and must not be empty"])
        .patch(vec![
            add("/spec/customProvider/path", json!("/decisions")),
            add("/spec/retryPeriodSeconds", json!(10)),
            scale_down_default(),
            add("/spec/syncPeriodSeconds", json!(15)),
        ]),
        case(
            "unparsable targetRef apiVersion",
            with(json!({"targetRef": {"apiVersion": "apps/v1/x", "kind": "Deployment", "name": "vllm"}})),
        )
        .errors(&[
            "spec.targetRef.apiVersion: \"apps/v1/x\" is not an API version; expected `version` or `group/version`, e.g. \"apps/v1\"",
        ]),
        case(
            "incomplete targetRef",
            with(json!({"targetRef": {"apiVersion": "apps/v1", "kind": "", "name": ""}})),
        )
        .errors(&[
            "spec.targetRef.kind: required and must not be empty",
            "spec.targetRef.name: required and must not be empty",
        ]),
        case("serverAddress without scheme", with(json!({"serverAddress": "prometheus:9090"})))
            .errors(&[
                "spec.serverAddress: \"prometheus:9090\" must be an http or https URL with a host (scheme was \"prometheus\")",
            ]),
        // Issue 11 (`docs/security.md`): the operator-wide policy, here the default one.
        case("metadata serverAddress", with(json!({"serverAddress": "http://169.254.169.254/latest"})))
            .errors(&[
                "spec.serverAddress: address 169.254.169.254 is in 169.254.0.0/16 (cloud metadata, link-local or unspecified), always refused",
            ]),
        case("metadata host name", with(json!({"serverAddress": "http://metadata.google.internal"})))
            .errors(&[
                "spec.serverAddress: host `metadata.google.internal` is a cloud metadata service, always refused",
            ]),
        case("user info in serverAddress", with(json!({"serverAddress": "http://admin:hunter2@prometheus:9090"})))
            .errors(&[
                "spec.serverAddress: must not hold user info (`user:password@`); send credentials in a serverHeaders entry, e.g. Authorization",
            ]),
        case(
            "routing and tenancy headers",
            with(json!({"serverHeaders": {"Range": "bytes=0-10", "X-Forwarded-Host": "a", "X-Scope-OrgID": "other-org", "Host": "h"}})),
        )
        .errors(&[
            "spec.serverHeaders[\"Host\"]: is a hop-by-hop, routing or metadata header, which a scaler may not set",
            "spec.serverHeaders[\"Range\"]: is a hop-by-hop, routing or metadata header, which a scaler may not set",
            "spec.serverHeaders[\"X-Forwarded-Host\"]: is a hop-by-hop, routing or metadata header, which a scaler may not set",
            "spec.serverHeaders[\"X-Scope-OrgID\"]: is a tenancy header, which chooses whose data a shared server answers with; the operator's admin has not allowed it (--allow-tenant-header)",
        ]),
        case("more than 16 metrics", with(json!({"metrics": (0..17).map(|i| json!({"name": format!("m{i}"), "query": "avg(x)", "target": "1"})).collect::<Vec<_>>()})))
            .errors(&["spec.metrics: 17 entries; at most 16 (each is one request per sync)"]),
        case("empty serverAddress", with(json!({"serverAddress": ""}))).errors(&[
            "spec.serverAddress: required: the Prometheus or decision server base URL, e.g. \"http://prometheus.monitoring:9090\"",
        ]),
        case("zero syncPeriodSeconds", with(json!({"syncPeriodSeconds": 0})))
            .errors(&["spec.syncPeriodSeconds: 0 must be at least 1 second"])
            .patch(vec![
                add("/spec/metricProvider", json!("Prometheus")),
                add("/spec/retryPeriodSeconds", json!(10)),
                scale_down_default(),
            ]),
        case("negative retryPeriodSeconds", with(json!({"retryPeriodSeconds": -5})))
            .errors(&["spec.retryPeriodSeconds: -5 must be at least 1 second"])
            .patch(vec![
                add("/spec/metricProvider", json!("Prometheus")),
                scale_down_default(),
                add("/spec/syncPeriodSeconds", json!(15)),
            ]),
        case(
            "negative scale-down window and step",
            with(json!({"scaleDown": {"stabilizationWindowSeconds": -1, "maxStepReplicas": -2, "behavior": "None"}})),
        )
        .errors(&[
            "spec.scaleDown.stabilizationWindowSeconds: -1 must be 0 or more (0 turns it off)",
            "spec.scaleDown.maxStepReplicas: -2 must be 0 or more (0 turns it off)",
        ])
        .patch(vec![
            add("/spec/metricProvider", json!("Prometheus")),
            add("/spec/retryPeriodSeconds", json!(10)),
            add("/spec/syncPeriodSeconds", json!(15)),
        ]),
        case(
            "empty deletion cost query",
            with(json!({"scaleDown": {"deletionCostQuery": "", "stabilizationWindowSeconds": 0, "maxStepReplicas": 0, "behavior": "CacheAware"}})),
        )
        .errors(&[
            "spec.scaleDown.deletionCostQuery: must not be empty when set (leave it out to remove the newest pods first)",
        ])
        .patch(vec![
            add("/spec/metricProvider", json!("Prometheus")),
            add("/spec/retryPeriodSeconds", json!(10)),
            add("/spec/syncPeriodSeconds", json!(15)),
        ]),
        case(
            "duplicate metric names",
            with(json!({"metrics": [
                {"name": "q", "query": "avg(a)", "target": "1"},
                {"name": "q", "query": "avg(b)", "target": "2"},
            ]})),
        )
        .errors(&["spec.metrics[1].name: \"q\" is already the name of spec.metrics[0]"]),
        case(
            "invalid header name",
            with(json!({"serverHeaders": {"bad header": "x"}})),
        )
        .errors(&["spec.serverHeaders[\"bad header\"]: is not a valid HTTP header name"]),
        case(
            "every violation at once, with a warning",
            with(json!({
                "minReplicas": 9, "syncPeriodSeconds": 0, "preemption": {},
                "metrics": [{"query": "up", "target": "80%"}],
            })),
        )
        .errors(&[
            "spec.minReplicas: 9 must be less than or equal to spec.maxReplicas (5)",
            "spec.syncPeriodSeconds: 0 must be at least 1 second",
            &format!(
                "spec.metrics[0].target: \"80%\" is not a number; {TARGET_HINT} (write \"80\" against a 0-100 series, or the fraction against a 0-1 ratio)"
            ),
        ])
        .warn(&[PREEMPTION, UNAGGREGATED])
        .patch(vec![
            add("/spec/metricProvider", json!("Prometheus")),
            add("/spec/retryPeriodSeconds", json!(10)),
            scale_down_default(),
        ]),
        // Type errors: the path of the field serde could not read.
        case("unknown metricProvider", with(json!({"metricProvider": "Datadog"})))
            .errors(&["spec.metricProvider: unknown variant `Datadog`, expected `Prometheus` or `Custom`"])
            .patch(type_error.clone()),
        case(
            "unknown scaleDown behavior",
            with(json!({"scaleDown": {"behavior": "Aggressive"}})),
        )
        .errors(&["spec.scaleDown.behavior: unknown variant `Aggressive`, expected `CacheAware` or `None`"])
        .patch(type_error.clone()),
        case("minReplicas as a string", with(json!({"minReplicas": "1"})))
            .errors(&["spec.minReplicas: invalid type: string \"1\", expected i32"])
            .patch(type_error.clone()),
        case("target as a number", with(json!({"metrics": [{"query": "avg(q)", "target": 0.8}]})))
            .errors(&["spec.metrics[0].target: invalid type: floating point `0.8`, expected a string"])
            .patch(type_error.clone()),
        case("missing serverAddress", with(json!({"serverAddress": null})))
            .errors(&["spec: missing field `serverAddress`"])
            .patch(type_error),
    ]
}

#[test]
fn table_of_specs_gives_the_full_response() {
    let cases = cases();
    assert!(cases.len() >= 30, "{} cases", cases.len());
    for case in cases {
        let object = scaler(case.spec.clone());
        for operation in ["CREATE", "UPDATE"] {
            let req = request(operation, object.clone());
            let errors: Vec<&str> = case.errors.iter().map(String::as_str).collect();
            let status = if errors.is_empty() {
                json!({})
            } else {
                invalid_status(&errors)
            };
            assert_eq!(
                as_json(validate(&req, &OperatorPolicy::default())),
                expected(errors.is_empty(), status, &case.warnings, None),
                "validate: {} ({operation})",
                case.name
            );
            assert_eq!(
                as_json(mutate(&req)),
                expected(true, json!({}), &[], sorted(case.patch.clone())),
                "mutate: {} ({operation})",
                case.name
            );
        }
    }
}

/// Applying the mutating patch gives exactly `apply_defaults` of the spec, and nothing else in
/// the object moves.
#[test]
fn patch_applies_and_matches_apply_defaults() {
    for case in cases().into_iter().filter(|c| !c.patch.is_empty()) {
        let mut object = scaler(case.spec.clone());
        let response = mutate(&request("CREATE", object.clone()));
        let bytes = response.patch.expect("a patch");
        let patch: Patch = serde_json::from_slice(&bytes).expect("patch parses");
        assert!(
            patch
                .0
                .iter()
                .all(|op| matches!(op, PatchOperation::Add(_))),
            "{}: only adds",
            case.name
        );
        json_patch::patch(&mut object, &patch).expect("patch applies");
        let mut spec: LLMScalerSpec =
            serde_json::from_value(case.spec.clone()).expect("spec parses");
        apply_defaults(&mut spec);
        let mut want = serde_json::to_value(&spec).expect("spec serializes");
        // Fields the typed spec does not know survive the patch untouched.
        if let (Some(want), Some(original)) = (want.as_object_mut(), case.spec.as_object()) {
            for (key, value) in original {
                if !value.is_null() {
                    want.entry(key.clone()).or_insert(value.clone());
                }
            }
        }
        assert_eq!(object["spec"], want, "{}", case.name);
        assert_eq!(object["metadata"], scaler(json!({}))["metadata"]);
    }
}

#[test]
fn defaults_are_idempotent() {
    let mut object = scaler(base());
    let bytes = mutate(&request("CREATE", object.clone()))
        .patch
        .expect("a patch");
    let patch: Patch = serde_json::from_slice(&bytes).expect("patch parses");
    json_patch::patch(&mut object, &patch).expect("applies");
    assert_eq!(mutate(&request("UPDATE", object)).patch, None);
}

#[test]
fn default_additions_escape_pointer_tokens() {
    let ops = default_additions(&json!({"a/b": {}}), &json!({"a/b": {"c~d": 1}}));
    let ops = serde_json::to_value(ops).expect("serializes");
    assert_eq!(
        ops,
        json!([{"op": "add", "path": "/spec/a~1b/c~0d", "value": 1}])
    );
}

#[test]
fn default_additions_never_touch_arrays_or_set_values() {
    let original = json!({"metrics": [{"query": "q"}], "minReplicas": 3});
    let defaulted = json!({"metrics": [{"query": "q", "name": "x"}], "minReplicas": 1});
    assert!(default_additions(&original, &defaulted).is_empty());
}

#[test]
fn delete_and_connect_are_allowed_untouched() {
    for operation in ["DELETE", "CONNECT"] {
        let invalid = scaler(with(json!({"minReplicas": 99})));
        for response in [
            validate(
                &request(operation, invalid.clone()),
                &OperatorPolicy::default(),
            ),
            mutate(&request(operation, invalid.clone())),
        ] {
            assert_eq!(as_json(response), expected(true, json!({}), &[], None));
        }
        let no_object = request(operation, Value::Null);
        assert!(validate(&no_object, &OperatorPolicy::default()).allowed);
    }
}

#[test]
fn update_is_validated_like_create() {
    let req = request(
        "UPDATE",
        scaler(with(
            json!({"metrics": [{"query": "avg(q)", "target": "80%"}]}),
        )),
    );
    let response = validate(&req, &OperatorPolicy::default());
    assert!(!response.allowed);
    assert!(
        response
            .result
            .message
            .starts_with("spec.metrics[0].target: \"80%\"")
    );
}

/// The operator policy is the caller's value (the webhook's context), not a process global:
/// the same request is allowed under one policy and denied under another in one process.
#[test]
fn the_policy_is_the_one_passed_in() {
    let req = request("CREATE", scaler(with(json!({"maxReplicas": 8}))));
    assert!(validate(&req, &OperatorPolicy::default()).allowed);
    let capped = OperatorPolicy {
        max_replicas_cap: Some(4),
        ..OperatorPolicy::default()
    };
    let response = validate(&req, &capped);
    assert!(!response.allowed);
    assert_eq!(
        response.result.message,
        "spec.maxReplicas: 8 is over the operator's replica cap 4 (--max-replicas-cap)"
    );
    let restricted = OperatorPolicy {
        restrict_secret_access: true,
        operator_namespace: Some("ops".to_owned()),
        ..OperatorPolicy::default()
    };
    let from_secret = request(
        "CREATE",
        scaler(with(json!({"serverHeadersFrom": [
            {"name": "Authorization", "secretKeyRef": {"name": "tok", "key": "token"}}
        ]}))),
    );
    assert!(validate(&from_secret, &OperatorPolicy::default()).allowed);
    assert!(!validate(&from_secret, &restricted).allowed);
}

#[test]
fn objects_being_deleted_are_allowed_so_finalizers_can_go() {
    let mut object = scaler(with(json!({"minReplicas": 99})));
    object["metadata"]["deletionTimestamp"] = json!("2026-01-01T00:00:00Z");
    let req = request("UPDATE", object);
    assert_eq!(
        as_json(validate(&req, &OperatorPolicy::default())),
        expected(true, json!({}), &[], None)
    );
    assert_eq!(as_json(mutate(&req)), expected(true, json!({}), &[], None));
}

#[test]
fn a_metadata_only_update_is_allowed_so_the_operator_can_add_its_finalizer() {
    // A stored spec that breaks a rule (admitted before the rule, or with the webhook down).
    let old = scaler(with(json!({"minReplicas": 99})));
    let mut object = old.clone();
    object["metadata"]["finalizers"] = json!(["autoscaling.modelsphere.dev/cleanup"]);
    let mut req = request("UPDATE", object.clone());
    req.old_object = Some(serde_json::from_value(old).expect("old object"));
    assert_eq!(
        as_json(validate(&req, &OperatorPolicy::default())),
        expected(true, json!({}), &[], None)
    );
    // The same spec change is still refused.
    let mut changed = request("UPDATE", object);
    changed.old_object = Some(serde_json::from_value(scaler(base())).expect("old object"));
    assert!(!validate(&changed, &OperatorPolicy::default()).allowed);
}

#[test]
fn status_updates_are_allowed_untouched() {
    let mut req = request("UPDATE", scaler(with(json!({"minReplicas": 99}))));
    req.sub_resource = Some("status".to_string());
    assert_eq!(
        as_json(validate(&req, &OperatorPolicy::default())),
        expected(true, json!({}), &[], None)
    );
    assert_eq!(as_json(mutate(&req)), expected(true, json!({}), &[], None));
}

#[test]
fn other_kinds_are_denied_with_a_hint() {
    let req = request_for(
        "CREATE",
        json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}}),
        json!({"group": "", "version": "v1", "kind": "Pod"}),
    );
    let message = "this webhook admits only autoscaling.modelsphere.dev LLMScaler, not \"Pod\" in group \"\"; check the rules of the webhook configuration";
    let status =
        json!({"status": "Failure", "code": 400, "reason": "BadRequest", "message": message});
    assert_eq!(
        as_json(validate(&req, &OperatorPolicy::default())),
        expected(false, status.clone(), &[], None)
    );
    assert_eq!(as_json(mutate(&req)), expected(false, status, &[], None));
}

#[test]
fn create_without_object_is_denied() {
    let req = request("CREATE", Value::Null);
    let status = json!({"status": "Failure", "code": 400, "reason": "BadRequest", "message": "Create request has no object"});
    assert_eq!(
        as_json(validate(&req, &OperatorPolicy::default())),
        expected(false, status, &[], None)
    );
}

#[test]
fn missing_spec_is_denied_with_the_root_path() {
    let object = json!({"apiVersion": "autoscaling.modelsphere.dev/v1alpha1", "kind": "LLMScaler", "metadata": {"name": "s"}});
    let req = request("CREATE", object);
    let response = validate(&req, &OperatorPolicy::default());
    assert!(!response.allowed);
    assert_eq!(response.result.message, "(root): missing field `spec`");
    assert_eq!(mutate(&req).patch, None);
}

#[test]
fn denial_message_is_one_line_per_violation() {
    let message = ValidationErrors(vec![
        FieldError::new("spec.a", "x"),
        FieldError::new("spec.b", "y"),
    ])
    .to_string();
    assert_eq!(message, "spec.a: x\nspec.b: y");
}
