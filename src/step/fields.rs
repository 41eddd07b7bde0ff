//! How every caller of the step handles every spec field: applied as the operator applies it,
//! refused by name, or not applicable (with why). The test fails when a field is added to the
//! CRD and not classified here for every caller, so a new field cannot be ignored silently by
//! `simulate` or `probe` (docs/scaling.md#one-step-for-every-caller).

use kube::CustomResourceExt;
use llmscaler_api::{LLMScaler, LLMScalerSpec};
use serde_json::{Value, json};

/// How one caller handles one field.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Handling {
    /// Does what the operator does with it (the step applies it).
    Applied,
    /// Refused with an error naming the field.
    Refused,
    /// Has no effect on what the caller shows, and why.
    NotApplicable(&'static str),
}

use Handling::{Applied as A, NotApplicable as Na, Refused as R};

/// The callers, in the order of [`TABLE`]'s columns.
const CALLERS: [&str; 5] = [
    "controller",
    "simulate --metrics",
    "simulate --requests",
    "probe --scaler",
    "probe --name",
];

const NO_SERVER: &str = "the trace replaces the metric server";
const NO_PODS: &str = "which pods go: the replay has no pods";
const ONE_SYNC: &str = "one sync, now";
const REPLICAS_ONLY: &str = "shows the recommendation, not which pods go or how";
const NOT_YET: &str = "no effect yet (admission warns)";

/// Field path (under `spec`) → handling per caller, in [`CALLERS`] order.
const TABLE: &[(&str, [Handling; 5])] = &[
    (
        "targetRef",
        [
            A,
            Na("a target without pods is modelled"),
            Na("a Deployment is modelled"),
            Na("a fleet of --ready replicas"),
            A,
        ],
    ),
    ("metricProvider", [A, A, R, A, A]),
    ("customProvider", [A, Na(NO_SERVER), R, A, A]),
    (
        "serverAddress",
        [A, Na(NO_SERVER), Na("the replay's own Prometheus"), A, A],
    ),
    (
        "serverHeaders",
        [A, Na(NO_SERVER), Na("the replay's own Prometheus"), A, A],
    ),
    (
        "serverHeadersFrom",
        [A, Na(NO_SERVER), Na("the replay's own Prometheus"), R, A],
    ),
    ("minReplicas", [A, A, A, A, A]),
    ("maxReplicas", [A, A, A, A, A]),
    ("metrics", [A, A, A, A, A]),
    (
        "syncPeriodSeconds",
        [
            A,
            Na("the trace's rows are the syncs"),
            A,
            Na(ONE_SYNC),
            Na(ONE_SYNC),
        ],
    ),
    (
        "retryPeriodSeconds",
        [
            A,
            Na("nothing fails to be read"),
            Na("nothing fails to be read"),
            Na(ONE_SYNC),
            Na(ONE_SYNC),
        ],
    ),
    (
        "scaleDown.stabilizationWindowSeconds",
        [A, A, A, Na("one sync without history"), A],
    ),
    (
        "scaleDown.maxStepReplicas",
        [A, A, A, Na("shows desiredReplicas, before the step cap"), A],
    ),
    (
        "scaleDown.behavior",
        [A, Na(NO_PODS), A, Na(REPLICAS_ONLY), Na(REPLICAS_ONLY)],
    ),
    (
        "scaleDown.deletionCostQuery",
        [A, Na(NO_PODS), A, Na(REPLICAS_ONLY), Na(REPLICAS_ONLY)],
    ),
    (
        "scaleDown.drain",
        [
            A,
            R,
            A,
            Na(REPLICAS_ONLY),
            Na("status.draining shows the drain"),
        ],
    ),
    ("scaleUp", [A, A, A, A, A]),
    (
        "mode",
        [
            A,
            A,
            A,
            Na("shows what would be written"),
            Na("status.paused says whether it is written"),
        ],
    ),
    ("activation", [A, R, A, A, A]),
    ("schedules", [A, A, A, A, A]),
    (
        "preemption",
        [
            Na(NOT_YET),
            Na(NOT_YET),
            Na(NOT_YET),
            Na(NOT_YET),
            Na(NOT_YET),
        ],
    ),
    ("capacity", [A, R, A, A, A]),
    ("objective", [A, R, A, A, A]),
    ("startup", [A, A, A, A, A]),
    (
        "scaleToZero",
        [
            A,
            Na(NO_HELD),
            Na(NO_HELD),
            Na(NO_HELD),
            Na("shows the metrics' decision; the activator's held requests are not read"),
        ],
    ),
];

const NO_HELD: &str = "no activator: no request is held";

/// The spec's field paths in the CRD schema: every property of `spec`, and of `spec.scaleDown`
/// (whose fields callers treat differently).
fn schema_fields() -> Vec<String> {
    let crd = serde_json::to_value(LLMScaler::crd()).unwrap_or_default();
    let spec = &crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"];
    let mut fields = Vec::new();
    for (name, schema) in spec.as_object().into_iter().flatten() {
        if name == "scaleDown" {
            for child in schema["properties"].as_object().into_iter().flatten() {
                fields.push(format!("scaleDown.{}", child.0));
            }
        } else {
            fields.push(name.clone());
        }
    }
    fields.sort();
    fields
}

/// A valid Prometheus spec with `field` set (for the refusals).
fn spec_with(field: &str) -> LLMScalerSpec {
    let mut spec = json!({
        "targetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "vllm"},
        "serverAddress": "http://prometheus:9090",
        "minReplicas": 0, "maxReplicas": 4,
        "metrics": [{"query": "avg(w)", "target": "2"}]
    });
    let set: Value = match field {
        "capacity" => {
            json!({"capacity": {"arrivalRateQuery": "sum(rate(x[1m]))", "replicaRequestsPerSecond": "2"}})
        }
        "objective" => json!({"objective": {"ttftSeconds": "2", "attainment": "0.99",
            "seriesSelector": "namespace=\"x\""}}),
        "activation" => json!({"activation": {"query": "sum(q)"}}),
        "scaleToZero" => json!({"scaleToZero": {"holdRequests": true, "service": "vllm"}}),
        "scaleDown.drain" => json!({"scaleDown": {"drain": {}}}),
        "serverHeadersFrom" => {
            json!({"serverHeadersFrom": [{"name": "Authorization", "secretKeyRef": {"name": "s", "key": "k"}}]})
        }
        "metricProvider" | "customProvider" => json!({"metricProvider": "Custom", "metrics": null,
            "customProvider": {"serviceId": "decider"}}),
        _ => json!({}),
    };
    for (k, v) in set.as_object().into_iter().flatten() {
        spec[k] = v.clone();
    }
    serde_json::from_value(spec).unwrap_or_else(|err| panic!("spec with {field}: {err}"))
}

/// The refusal of `caller` for `spec`, if any.
fn refusal(caller: &str, spec: &LLMScalerSpec) -> Option<String> {
    match caller {
        "simulate --metrics" => crate::simulate::refused_by_metrics(spec).err(),
        "simulate --requests" => (spec.effective_provider()
            == llmscaler_api::MetricProvider::Custom)
            .then(|| crate::simulate::compare::CompareError::CustomProvider.to_string()),
        "probe --scaler" => crate::probe::refused_by_scaler_file(spec).err(),
        _ => None,
    }
}

#[test]
fn every_spec_field_is_applied_refused_or_not_applicable_in_every_caller() {
    let mut table: Vec<String> = TABLE.iter().map(|(f, _)| (*f).to_owned()).collect();
    table.sort();
    assert_eq!(
        schema_fields(),
        table,
        "a spec field is missing from (or stale in) the table of src/step/fields.rs: say how \
         the controller, simulate and probe handle it"
    );
    for (field, row) in TABLE {
        for (caller, handling) in CALLERS.iter().zip(row) {
            let refused = refusal(caller, &spec_with(field));
            match handling {
                Handling::Refused => {
                    let message = refused.unwrap_or_default();
                    let named = field.rsplit('.').next().unwrap_or(field);
                    assert!(
                        message.contains(named)
                            || (field.contains("Provider") && message.contains("metricProvider")),
                        "{caller} must refuse {field} by name: {message:?}"
                    );
                }
                Handling::Applied | Handling::NotApplicable(_) => {
                    assert_eq!(
                        refused, None,
                        "{caller} refuses {field} although the table says {handling:?}"
                    );
                }
            }
        }
    }
    assert_eq!(refusal("simulate --metrics", &spec_with("none")), None);
}
