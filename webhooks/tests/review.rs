//! The HTTP envelope without a server: status codes and bodies for well-formed reviews and for
//! garbage, and a property test feeding arbitrary JSON to both handlers.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // a test: a failed expectation fails it

use llmscaler_api::OperatorPolicy;
use llmscaler_webhooks::review::{Endpoint, MAX_BODY_BYTES, Reply, handle};
use proptest::prelude::*;
use serde_json::{Value, json};

const JSON: Option<&str> = Some("application/json");

fn review_body(object: Value) -> Vec<u8> {
    serde_json::to_vec(&json!({
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": "uid-1",
            "kind": {"group": "autoscaling.modelsphere.dev", "version": "v1alpha1", "kind": "LLMScaler"},
            "resource": {"group": "autoscaling.modelsphere.dev", "version": "v1alpha1", "resource": "llmscalers"},
            "operation": "CREATE",
            "userInfo": {},
            "object": object,
            "oldObject": null,
        }
    }))
    .expect("serializes")
}

fn valid_object() -> Value {
    json!({
        "apiVersion": "autoscaling.modelsphere.dev/v1alpha1",
        "kind": "LLMScaler",
        "metadata": {"name": "s", "namespace": "default"},
        "spec": {
            "targetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "vllm"},
            "serverAddress": "http://prometheus:9090",
            "minReplicas": 1, "maxReplicas": 3,
            "metrics": [{"query": "avg(q)", "target": "1"}],
        }
    })
}

fn body_json(reply: &Reply) -> Value {
    serde_json::from_slice(&reply.body).expect("every reply body is JSON")
}

/// A 4xx reply carries a Kubernetes Status with the same code.
fn assert_status(reply: &Reply, code: u16, reason: &str) {
    assert_eq!(
        reply.status,
        code,
        "{}",
        String::from_utf8_lossy(&reply.body)
    );
    let body = body_json(reply);
    assert_eq!(body["kind"], "Status");
    assert_eq!(body["apiVersion"], "v1");
    assert_eq!(body["status"], "Failure");
    assert_eq!(body["code"], code);
    assert_eq!(body["reason"], reason);
    assert!(body["message"].as_str().is_some_and(|m| !m.is_empty()));
}

#[test]
fn well_formed_reviews_get_200_and_the_uid() {
    for endpoint in [Endpoint::Validate, Endpoint::Mutate] {
        let reply = handle(
            endpoint,
            &OperatorPolicy::default(),
            JSON,
            &review_body(valid_object()),
        );
        assert_eq!(reply.status, 200);
        let body = body_json(&reply);
        assert_eq!(body["apiVersion"], "admission.k8s.io/v1");
        assert_eq!(body["kind"], "AdmissionReview");
        assert_eq!(body["response"]["uid"], "uid-1");
        assert_eq!(body["response"]["allowed"], true);
    }
}

#[test]
fn content_type_parameters_and_case_are_accepted() {
    let body = review_body(valid_object());
    for content_type in ["application/json; charset=utf-8", "Application/JSON"] {
        assert_eq!(
            handle(
                Endpoint::Validate,
                &OperatorPolicy::default(),
                Some(content_type),
                &body
            )
            .status,
            200
        );
    }
}

#[test]
fn wrong_or_missing_content_type_is_415() {
    let body = review_body(valid_object());
    for content_type in [None, Some("text/plain"), Some("application/yaml"), Some("")] {
        assert_status(
            &handle(
                Endpoint::Validate,
                &OperatorPolicy::default(),
                content_type,
                &body,
            ),
            415,
            "UnsupportedMediaType",
        );
    }
}

#[test]
fn oversized_body_is_413() {
    let body = vec![b' '; MAX_BODY_BYTES + 1];
    assert_status(
        &handle(Endpoint::Mutate, &OperatorPolicy::default(), JSON, &body),
        413,
        "RequestEntityTooLarge",
    );
}

#[test]
fn garbage_is_400() {
    let v1beta1 = String::from_utf8(review_body(valid_object()))
        .expect("utf8")
        .replace("admission.k8s.io/v1", "admission.k8s.io/v1beta1");
    let no_request = r#"{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview"}"#;
    let wrong_kind = r#"{"apiVersion":"admission.k8s.io/v1","kind":"Pod","request":{}}"#;
    let bad_request =
        r#"{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"uid":1}}"#;
    for body in [
        "",
        "{",
        "null",
        "[]",
        "\"AdmissionReview\"",
        "{\"apiVersion\":\"v1\"}",
        v1beta1.as_str(),
        no_request,
        wrong_kind,
        bad_request,
        "\u{feff}{}",
    ] {
        for endpoint in [Endpoint::Validate, Endpoint::Mutate] {
            assert_status(
                &handle(endpoint, &OperatorPolicy::default(), JSON, body.as_bytes()),
                400,
                "BadRequest",
            );
        }
    }
}

#[test]
fn v1beta1_is_refused_with_a_hint() {
    let body = String::from_utf8(review_body(valid_object()))
        .expect("utf8")
        .replace("admission.k8s.io/v1", "admission.k8s.io/v1beta1");
    let reply = handle(
        Endpoint::Validate,
        &OperatorPolicy::default(),
        JSON,
        body.as_bytes(),
    );
    let message = body_json(&reply)["message"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    assert!(
        message.contains("admissionReviewVersions: [v1]"),
        "{message}"
    );
}

#[test]
fn deeply_nested_json_is_refused_not_overflowed() {
    let depth = 100_000;
    let body = format!("{}{}", "[".repeat(depth), "]".repeat(depth));
    assert_status(
        &handle(
            Endpoint::Validate,
            &OperatorPolicy::default(),
            JSON,
            body.as_bytes(),
        ),
        400,
        "BadRequest",
    );
}

/// Arbitrary JSON, up to a few levels deep.
fn arb_json() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::from),
        any::<i64>().prop_map(Value::from),
        any::<f64>()
            .prop_map(|f| serde_json::Number::from_f64(f).map_or(Value::Null, Value::Number)),
        ".{0,12}".prop_map(Value::from),
        prop_oneof![
            Just("LLMScaler"),
            Just("CREATE"),
            Just("UPDATE"),
            Just("DELETE"),
            Just("80%"),
            Just("apps/v1"),
            Just("Custom"),
            Just("Prometheus"),
            Just("CacheAware"),
        ]
        .prop_map(Value::from),
    ];
    leaf.prop_recursive(4, 48, 6, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..6).prop_map(Value::Array),
            prop::collection::btree_map(
                prop_oneof![
                    ".{0,8}".boxed(),
                    prop_oneof![
                        Just("spec"),
                        Just("metadata"),
                        Just("name"),
                        Just("minReplicas"),
                        Just("maxReplicas"),
                        Just("metrics"),
                        Just("target"),
                        Just("query"),
                        Just("scaleDown"),
                        Just("behavior"),
                        Just("metricProvider"),
                        Just("customProvider"),
                        Just("serviceId"),
                        Just("targetRef"),
                        Just("serverAddress"),
                        Just("preemption"),
                        Just("deletionTimestamp"),
                    ]
                    .prop_map(String::from)
                    .boxed(),
                ],
                inner,
                0..6,
            )
            .prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
}

/// An object that looks like an LLMScaler with arbitrary spec fields mixed in.
fn arb_object() -> impl Strategy<Value = Value> {
    (arb_json(), arb_json(), any::<bool>()).prop_map(|(spec_extra, junk, keep_base)| {
        let mut object = valid_object();
        if keep_base {
            if let (Some(spec), Value::Object(extra)) = (object["spec"].as_object_mut(), spec_extra)
            {
                spec.extend(extra);
            }
        } else {
            object["spec"] = spec_extra;
        }
        if let (Value::Object(junk), Some(meta)) = (junk, object["metadata"].as_object_mut()) {
            meta.extend(junk);
        }
        object
    })
}

fn check_reply(reply: &Reply, expect_uid: Option<&str>) -> Result<(), TestCaseError> {
    let body: Value = serde_json::from_slice(&reply.body)
        .map_err(|e| TestCaseError::fail(format!("body is not JSON: {e}")))?;
    match reply.status {
        200 => {
            prop_assert_eq!(&body["apiVersion"], "admission.k8s.io/v1");
            prop_assert_eq!(&body["kind"], "AdmissionReview");
            prop_assert!(body["response"]["allowed"].is_boolean());
            if let Some(uid) = expect_uid {
                prop_assert_eq!(&body["response"]["uid"], uid);
            }
            if let Some(patch) = body["response"]["patch"].as_array() {
                let bytes: Vec<u8> = patch
                    .iter()
                    .filter_map(|b| b.as_u64().map(|b| b as u8))
                    .collect();
                let patch: json_patch::Patch = serde_json::from_slice(&bytes)
                    .map_err(|e| TestCaseError::fail(format!("patch: {e}")))?;
                prop_assert!(
                    patch
                        .0
                        .iter()
                        .all(|op| matches!(op, json_patch::PatchOperation::Add(_)))
                );
            }
        }
        400..=499 => {
            prop_assert_eq!(&body["kind"], "Status");
            prop_assert_eq!(&body["code"], reply.status);
        }
        other => prop_assert!(false, "status {}", other),
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 400, ..ProptestConfig::default() })]

    #[test]
    fn arbitrary_json_body_never_panics(body in arb_json()) {
        let bytes = serde_json::to_vec(&body).expect("serializes");
        for endpoint in [Endpoint::Validate, Endpoint::Mutate] {
            check_reply(&handle(endpoint, &OperatorPolicy::default(), JSON, &bytes), None)?;
        }
    }

    #[test]
    fn arbitrary_request_object_gets_an_admission_review(object in arb_object(), op in prop_oneof![Just("CREATE"), Just("UPDATE"), Just("DELETE")]) {
        let mut review: Value = serde_json::from_slice(&review_body(object)).expect("json");
        review["request"]["operation"] = Value::from(op);
        let bytes = serde_json::to_vec(&review).expect("serializes");
        for endpoint in [Endpoint::Validate, Endpoint::Mutate] {
            let reply = handle(endpoint, &OperatorPolicy::default(), JSON, &bytes);
            check_reply(&reply, Some("uid-1"))?;
        }
    }

    #[test]
    fn arbitrary_bytes_never_panic(bytes in prop::collection::vec(any::<u8>(), 0..256)) {
        for endpoint in [Endpoint::Validate, Endpoint::Mutate] {
            check_reply(&handle(endpoint, &OperatorPolicy::default(), JSON, &bytes), None)?;
        }
    }
}
