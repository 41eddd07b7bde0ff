//! The `LLMScaler` custom resource (`autoscaling.modelsphere.dev/v1alpha1`), docs/resource.md.
//!
//! Doc comments on fields become the OpenAPI descriptions that `kubectl explain` prints.
//! Optional fields are `Option`s so that "not set" stays visible: the mutating webhook
//! ([`crate::defaults::apply_defaults`]) writes the defaults into the stored object, and the
//! `effective_*` accessors fall back to the same defaults when it did not run.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use kube::{CustomResource, KubeSchema};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::defaults;

/// Desired state of an LLMScaler: the workload to scale, where its load signal comes from, and
/// the bounds and damping of the replica count.
// `printcolumn(...)` repeats by design: one attribute per column.
#[allow(clippy::duplicated_attributes)]
#[derive(CustomResource, KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[kube(
    group = "autoscaling.modelsphere.dev",
    version = "v1alpha1",
    kind = "LLMScaler",
    plural = "llmscalers",
    singular = "llmscaler",
    shortname = "llms",
    category = "autoscaling",
    namespaced,
    status = "LLMScalerStatus",
    printcolumn(
        name = "MinReplicas",
        type_ = "integer",
        json_path = ".spec.minReplicas"
    ),
    printcolumn(
        name = "MaxReplicas",
        type_ = "integer",
        json_path = ".spec.maxReplicas"
    ),
    printcolumn(
        name = "CurrentReplicas",
        type_ = "integer",
        json_path = ".status.currentReplicas"
    ),
    printcolumn(
        name = "DesiredReplicas",
        type_ = "integer",
        json_path = ".status.desiredReplicas"
    ),
    printcolumn(
        name = "Ready",
        type_ = "string",
        json_path = ".status.conditions[?(@.type==\"Ready\")].status"
    ),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    )
)]
#[x_kube(
    validation = Rule::new("self.minReplicas <= self.maxReplicas")
        .message("minReplicas must be less than or equal to maxReplicas")
        .field_path(".minReplicas"),
    validation = Rule::new("(has(self.metricProvider) && self.metricProvider == 'Custom') || (has(self.metrics) && size(self.metrics) > 0) || has(self.objective)")
        .message("metrics must not be empty under the Prometheus provider (unless objective is set)")
        .field_path(".metrics"),
    validation = Rule::new("!has(self.metricProvider) || self.metricProvider != 'Custom' || has(self.customProvider)")
        .message("customProvider is required when metricProvider is Custom")
        .field_path(".customProvider"),
)]
#[serde(rename_all = "camelCase")]
pub struct LLMScalerSpec {
    /// The workload to scale, in the LLMScaler's own namespace. Deployment, StatefulSet,
    /// LeaderWorkerSet, or any kind with `spec.replicas` and `status.readyReplicas`.
    pub target_ref: TargetRef,

    /// Where metric values come from: `Prometheus` (PromQL queries in `metrics`) or `Custom`
    /// (an external decision server, see `customProvider`). Never layered: no fallback.
    /// Default `Prometheus`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metric_provider: Option<MetricProvider>,

    /// The decision server to ask under the `Custom` provider. Ignored under `Prometheus`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub custom_provider: Option<CustomProvider>,

    /// Base URL of Prometheus (queries go to `{serverAddress}/api/v1/query`) or of the decision
    /// server: `http` or `https`, no user info. The operator's allow-list may restrict it
    /// further (`docs/security.md#egress`).
    #[schemars(length(min = 1, max = 2048))]
    #[x_kube(validation = Rule::new("self.matches('^https?://[^/?#@]+([/?#].*)?$')")
        .message("serverAddress must be an http or https URL without user info"))]
    pub server_address: String,

    /// Extra HTTP headers sent verbatim on every metric request (e.g. `Authorization`). Values
    /// are never logged. At most 32; hop-by-hop, routing and metadata headers are refused
    /// (`docs/security.md#headers`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("maxProperties" = 32))]
    #[x_kube(validation = Rule::new("self.all(k, size(k) <= 256 && !(k.lowerAscii() in ['host', 'range', 'if-range', 'content-length', 'transfer-encoding', 'connection', 'keep-alive', 'proxy-connection', 'proxy-authorization', 'te', 'trailer', 'upgrade', 'expect', 'forwarded', 'via', 'x-real-ip', 'metadata', 'metadata-flavor']) && !k.lowerAscii().startsWith('x-forwarded-'))")
        .message("serverHeaders must not set hop-by-hop, routing or metadata headers"))]
    pub server_headers: Option<BTreeMap<String, String>>,

    /// Extra HTTP headers whose values come from Secrets in the LLMScaler's own namespace,
    /// read at every sync (a rotated Secret is used at the next sync, no restart). Values are
    /// never logged or shown in status or Events. At most 16 (`docs/security.md#credentials`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 16))]
    pub server_headers_from: Option<Vec<HeaderFromSecret>>,

    /// Lower bound on replicas, at least 0. 0 enables scale-to-zero.
    #[schemars(range(min = 0, max = 2147483647))]
    pub min_replicas: i32,

    /// Upper bound on replicas, at least 0. 0 pins the fleet at zero.
    #[schemars(range(min = 0, max = 2147483647))]
    pub max_replicas: i32,

    /// Load signals, each with a target value per replica: PromQL queries returning exactly one
    /// series, or runtime signals and `perPod` queries read over the target's Ready pods
    /// (docs/signals.md). The largest recommendation across entries wins (a guardrail's only
    /// while above its target). Required (non-empty) under `Prometheus`;
    /// at most 16 entries.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 16))]
    pub metrics: Option<Vec<MetricSpec>>,

    /// Seconds between evaluations, at least 1 and at least the operator's
    /// `--min-sync-period-seconds` (default 5; at most 16 requests per second per scaler, under
    /// the operator's process-wide request limit). Default 15.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 2147483647))]
    pub sync_period_seconds: Option<i32>,

    /// Seconds before the next attempt when the target is missing or a sync fails, at least the
    /// operator's `--min-sync-period-seconds` (default 5). Default 10.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 2147483647))]
    pub retry_period_seconds: Option<i32>,

    /// Damping of scale-down and cache-aware choice of the pods removed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scale_down: Option<ScaleDown>,

    /// Rate cap on scale-up (HPA semantics) and a tolerance band. Off by default: scale-up is
    /// immediate.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scale_up: Option<ScaleUp>,

    /// `Active` (default): act on the target. `Advisory`: compute and report everything
    /// (status, Events, metrics) but never write the target or its pods.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mode: Option<ScalerMode>,

    /// Wakes a fleet at zero replicas: while `spec.replicas` is 0, a PromQL query on a series that
    /// exists without pods (a gateway's queue or request rate) is read, and a value above
    /// `threshold` scales to at least one replica. Prometheus provider only.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub activation: Option<Activation>,

    /// Scheduled floors and ceilings: while a schedule is active it raises `minReplicas` and/or
    /// lowers `maxReplicas`. Overlapping schedules combine as the highest floor and the lowest
    /// ceiling.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 32))]
    pub schedules: Option<Vec<ScheduleSpec>>,

    /// Accepted for compatibility with the reference operator; has no effect (admission warns).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub preemption: Option<Preemption>,

    /// Opt-in queueing capacity recommender (docs/scaling.md#capacity-recommender): replicas
    /// sized from the fleet's arrival rate and a replica's service rate with Erlang C, as one
    /// more recommendation next to `metrics` (the largest wins). Prometheus provider only.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub capacity: Option<Capacity>,

    /// The service-level objective (docs/objective.md): the operator chooses the fewest
    /// replicas that keep the TTFT objective, with a per-replica capacity it learns from the
    /// fleet's own runtime metrics (`status.capacity`). Prometheus provider only; `metrics` may
    /// then be left out.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub objective: Option<Objective>,

    /// Opt-in start-up awareness (docs/guards.md#start-up-awareness): the scale-down
    /// stabilization window follows the measured time from scale-up to Ready
    /// (`status.startupSeconds`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub startup: Option<Startup>,

    /// Opt-in holding of requests while the fleet wakes from zero
    /// (docs/scaling.md#holding-requests-while-waking-from-zero): while the target has no Ready
    /// replica, the workload's Service routes to the activator, which holds each request, wakes
    /// the fleet at once and forwards the held requests to the first Ready replica. Needs the
    /// operator's activator (`--activator`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scale_to_zero: Option<ScaleToZero>,
}

/// Requests held while the fleet wakes from zero
/// (docs/scaling.md#holding-requests-while-waking-from-zero).
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct ScaleToZero {
    /// Route the Service to the activator while no replica is Ready, and hold its requests.
    /// Default `false`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hold_requests: Option<bool>,
    /// The Service of the workload, in the scaler's namespace (a DNS label). Required with
    /// `holdRequests: true`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub service: Option<String>,
    /// The name of the Service port whose requests are held (as in the Service's
    /// `spec.ports[].name`); default `""`, a Service's single unnamed port.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub port: Option<String>,
    /// At most this many requests held at once, 1 to 10000; beyond it `503` with `Retry-After`.
    /// Default 100.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 10000))]
    pub max_held_requests: Option<i32>,
    /// Seconds a request is held at most, 1 to 600; then `503` with `Retry-After`. Default 300
    /// (a model load of minutes).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 600))]
    pub hold_timeout_seconds: Option<i32>,
}

/// [`ScaleToZero::max_held_requests`]'s default, requests.
pub const DEFAULT_MAX_HELD_REQUESTS: i32 = 100;
/// [`ScaleToZero::hold_timeout_seconds`]'s default, seconds.
pub const DEFAULT_HOLD_TIMEOUT_SECONDS: i32 = 300;
/// [`ScaleToZero::hold_timeout_seconds`]'s largest value, seconds.
pub const MAX_HOLD_TIMEOUT_SECONDS: i32 = 600;

impl ScaleToZero {
    /// Whether requests are held (`holdRequests: true`).
    pub fn holds(&self) -> bool {
        self.hold_requests.unwrap_or(false)
    }

    /// `maxHeldRequests` or its default, requests.
    pub fn effective_max_held_requests(&self) -> i32 {
        self.max_held_requests.unwrap_or(DEFAULT_MAX_HELD_REQUESTS)
    }

    /// `holdTimeoutSeconds` or its default, seconds.
    pub fn effective_hold_timeout_seconds(&self) -> i32 {
        self.hold_timeout_seconds
            .unwrap_or(DEFAULT_HOLD_TIMEOUT_SECONDS)
    }

    /// `port` or `""`.
    pub fn effective_port(&self) -> &str {
        self.port.as_deref().unwrap_or("")
    }
}

/// The queueing capacity recommender (docs/scaling.md#capacity-recommender): the fewest replicas
/// `c` for which an M/M/c queue with arrival rate `λ` (requests/s, plus the backlog spread over
/// `backlogSeconds`) and service rate `μ = replicaRequestsPerSecond` per replica keeps the mean
/// wait in queue (Erlang C) within `maxQueueWaitSeconds`.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct Capacity {
    /// PromQL instant query returning one series: requests per second arriving at the fleet,
    /// e.g. `sum(rate(vllm:request_success_total{app="vllm"}[1m]))`.
    #[schemars(length(min = 1, max = 8192))]
    pub arrival_rate_query: String,
    /// Requests per second one Ready replica completes at full load (`μ`), a quoted number
    /// greater than zero, measured for the model, GPU and request mix (e.g. with
    /// `llmscaler simulate --requests`).
    #[schemars(length(min = 1, max = 64))]
    pub replica_requests_per_second: String,
    /// Bound on the mean wait in queue (Erlang C), seconds, a quoted number greater than zero.
    /// Default `"0.5"`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 64))]
    pub max_queue_wait_seconds: Option<String>,
    /// Optional PromQL instant query returning one series: requests waiting in the fleet, e.g.
    /// `sum(vllm:num_requests_waiting{app="vllm"})`. The backlog counts as
    /// `backlog / max(backlogSeconds, start-up time)` more requests per second (the start-up
    /// time in force with `spec.startup`, 0 without).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 8192))]
    pub backlog_query: Option<String>,
    /// Seconds within which a backlog should be served, 1 to 3600. Default 60. With
    /// `spec.startup`, at least the start-up time in force (added replicas serve it only once
    /// Ready).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 3600))]
    pub backlog_seconds: Option<i32>,
}

/// A TTFT objective (docs/objective.md): at least `attainment` of the requests get their first
/// token within `ttftSeconds`.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct Objective {
    /// The time-to-first-token bound, seconds, a quoted number greater than zero, e.g. `"2"`.
    #[schemars(length(min = 1, max = 64))]
    pub ttft_seconds: String,
    /// The share of requests that must meet `ttftSeconds`, a quoted number in `(0, 1)`, e.g.
    /// `"0.99"`.
    #[schemars(length(min = 1, max = 64))]
    pub attainment: String,
    /// The serving runtime whose metrics are read. Default `vllm` (the only one so far).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub runtime: Option<Runtime>,
    /// PromQL label matchers naming the workload's series, without braces, e.g.
    /// `namespace="inference",model_name="llama"`.
    #[schemars(length(min = 1, max = 1024))]
    pub series_selector: String,
    /// How far ahead the demand trend is projected, seconds, 0 to 3600; at least the start-up
    /// time is used under `spec.startup`. Default 0 (the start-up time, or no projection).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0, max = 3600))]
    pub lookahead_seconds: Option<i32>,
}

/// Start-up awareness (docs/guards.md#start-up-awareness).
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct Startup {
    /// Start-up time assumed until one is measured, seconds, 0 to 3600. Default 0.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0, max = 3600))]
    pub initial_seconds: Option<i32>,
    /// The scale-down stabilization window is at least this multiple of the start-up time
    /// (measured, else `initialSeconds`), a quoted number in `(0, 20]`, e.g. `"2"`; the larger
    /// of it and `scaleDown.stabilizationWindowSeconds` applies. Unset: the window is not
    /// changed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 64))]
    pub window_multiple: Option<String>,
    /// Replicas requested by a scale-up count as coming capacity: for two start-up times after
    /// a scale-up (one for them to start, one for the metrics to see them), `metrics` do not
    /// raise `spec.replicas` further (the capacity recommender still may: it does not
    /// compound). Default false.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub count_starting_replicas: Option<bool>,
}

/// One `serverHeadersFrom` entry: a header whose value is a Secret key.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct HeaderFromSecret {
    /// The HTTP header name, e.g. `Authorization`.
    #[schemars(length(min = 1, max = 256))]
    pub name: String,
    /// The Secret key holding the value, in the LLMScaler's namespace.
    pub secret_key_ref: SecretKeyRef,
    /// Text sent before the Secret's value, e.g. `Bearer ` (with its space) when the Secret holds
    /// the bare token, as a KEDA TriggerAuthentication's does. At most 64 visible ASCII
    /// characters and spaces. Unset: the value alone.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 64))]
    #[x_kube(validation = Rule::new("self.matches('^[ -~]*$')")
        .message("valuePrefix must be visible ASCII characters and spaces"))]
    pub value_prefix: Option<String>,
}

/// A key of a Secret in the LLMScaler's own namespace.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct SecretKeyRef {
    /// The Secret's name.
    #[schemars(length(min = 1, max = 253))]
    pub name: String,
    /// The key in its `data`.
    #[schemars(length(min = 1, max = 253))]
    pub key: String,
}

/// Reference to the scaled workload (no namespace: always the LLMScaler's own).
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct TargetRef {
    /// API version of the workload, e.g. `apps/v1` or `leaderworkerset.x-k8s.io/v1`.
    #[schemars(length(min = 1, max = 253))]
    pub api_version: String,
    /// Kind of the workload, e.g. `Deployment`, `StatefulSet`, `LeaderWorkerSet`.
    #[schemars(length(min = 1, max = 63))]
    pub kind: String,
    /// Name of the workload in the LLMScaler's namespace.
    #[schemars(length(min = 1, max = 253))]
    pub name: String,
}

/// Where metric values come from: `Prometheus` (default; PromQL queries in `metrics`, ratio to a
/// target per replica) or `Custom` (an external decision server returning an absolute replica
/// count, see `customProvider`). Never layered: no fallback from one to the other.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum MetricProvider {
    /// PromQL instant queries against `serverAddress`, ratio to a target per replica.
    #[default]
    Prometheus,
    /// An external decision server returning an absolute replica count.
    Custom,
}

/// The decision server's coordinates under the `Custom` provider
/// (docs/providers.md#custom-provider-decision-server).
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct CustomProvider {
    /// Service identifier sent as the `serviceId` query parameter and matched in the reply.
    #[schemars(length(min = 1, max = 253))]
    pub service_id: String,
    /// When set, the reply's decision must also match this namespace.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
    /// Path of the decisions endpoint under `serverAddress`. Default `/decisions`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path: Option<String>,
}

/// One load signal and the value per replica the fleet should run at: a PromQL `query`, or a
/// serving runtime's `signal` read per pod over the target's Ready pods
/// (docs/resource.md#metrics, docs/signals.md).
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
#[x_kube(
    validation = Rule::new("has(self.query) ? !has(self.runtime) && !has(self.signal) : has(self.runtime) && has(self.signal)")
        .message("set either query, or runtime and signal")
)]
#[serde(rename_all = "camelCase")]
pub struct MetricSpec {
    /// Name shown in status, events and `simulate` columns. Default `metric<index>`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// PromQL instant query returning exactly one series (aggregate with `avg(...)` or
    /// `sum(...)`), or with `perPod: true` one series per pod, each with a `pod` label. Exactly
    /// one of `query` and `runtime` + `signal`.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    #[schemars(length(max = 8192))]
    pub query: String,
    /// The serving runtime whose per-pod `signal` is read: `vllm`, `sglang`, `llamacpp`, `tgi`
    /// (docs/signals.md#runtimes). The operator builds the query from the target's namespace
    /// and pod selector.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub runtime: Option<Runtime>,
    /// The runtime signal: `waiting` (queued requests per pod), `running` (requests in the
    /// batch per pod), `kvCacheUsage` (KV-cache use per pod, ratio 0..1) or `ttftP90` (P90
    /// time to first token over the last minute per pod, seconds). Averaged over the target's
    /// current Ready pods (docs/signals.md#runtimes).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub signal: Option<RuntimeSignal>,
    /// The `query` returns one series per pod (each with a `pod` label) instead of one value:
    /// the operator keeps the series of the target's current Ready pods and averages them, with
    /// the `coverage` rule (docs/signals.md#per-pod-queries). Default false.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub per_pod: Option<bool>,
    /// `Normal` (default): the metric's recommendation may raise or lower replicas.
    /// `Guardrail`: it may raise replicas or hold a scale-down while the value is above
    /// `target`, but never lowers replicas; unmeasurable, it neither holds nor lowers
    /// (docs/signals.md#guardrails).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub role: Option<MetricRole>,
    /// Share of the target's Ready pods that must report a fresh sample for a per-pod metric
    /// (`runtime` or `perPod`) to be measured, a quoted number in (0, 1]. Below it the metric
    /// is unmeasurable (the fleet may only go up) and the condition names the missing pods.
    /// Default `"0.5"` (docs/signals.md#coverage).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub coverage: Option<String>,
    /// Prometheus' scrape interval of the pods' metrics, seconds, 1 to 3600: a per-pod sample
    /// older than two of them is stale and its pod counts as missing. Runtime signals only
    /// (a `perPod` query sets its own windows). Default 30 (docs/signals.md#staleness).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 3600))]
    pub scrape_interval_seconds: Option<i32>,
    /// Target value per replica, a quoted plain number on the query's own scale (`"0.8"`
    /// against a 0-1 ratio, `"80"` against a 0-100 series, seconds for `ttftP90`). Finite and
    /// greater than zero; a `%` suffix is refused.
    #[schemars(length(min = 1, max = 64))]
    pub target: String,
}

/// A serving runtime whose metrics the operator knows by name (docs/signals.md#runtimes).
#[derive(JsonSchema, Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum Runtime {
    /// vLLM (`vllm:` metrics, V1 engine names).
    Vllm,
    /// SGLang (`sglang:` metrics).
    Sglang,
    /// llama.cpp's `llama-server` started with `--metrics` (`llamacpp:` metrics).
    Llamacpp,
    /// Hugging Face Text Generation Inference (`tgi_` metrics of its router).
    Tgi,
}

/// A load signal of a serving runtime, read per pod (docs/signals.md#runtimes).
#[derive(JsonSchema, Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub enum RuntimeSignal {
    /// Requests queued, not yet in the batch, per pod.
    Waiting,
    /// Requests in the running batch, per pod.
    Running,
    /// KV-cache use per pod, ratio 0..1.
    KvCacheUsage,
    /// P90 time to first token over the last minute per pod, seconds.
    #[serde(rename = "ttftP90")]
    TtftP90,
}

/// What a metric may do to replicas (docs/signals.md#guardrails).
#[derive(JsonSchema, Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum MetricRole {
    /// Raises and lowers replicas; unmeasurable, the fleet may only go up.
    #[default]
    Normal,
    /// Raises replicas or holds a scale-down while above its target; never lowers;
    /// unmeasurable, it neither holds nor lowers.
    Guardrail,
}

/// Scale-down damping and cache-aware teardown (docs/guards.md, docs/scale-down.md).
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct ScaleDown {
    /// Seconds of recommendations whose maximum is used when scaling down. 0 (default) = off.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0, max = 2147483647))]
    pub stabilization_window_seconds: Option<i32>,
    /// Largest number of replicas removed in one step. 0 (default) = unlimited.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0, max = 2147483647))]
    pub max_step_replicas: Option<i32>,
    /// `CacheAware` (default): mark the pods to remove with a low `pod-deletion-cost` before
    /// lowering replicas (Deployments only). `None`: leave the choice to the ReplicaSet.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub behavior: Option<ScaleDownBehavior>,
    /// PromQL returning one series per pod (each with a `pod` label); the pods with the lowest
    /// values are removed first. Without it the newest pods go first.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deletion_cost_query: Option<String>,
    /// Opt-in drain before a scale-down (docs/scale-down.md#drain): the pods to remove are
    /// first taken out of the Service's rotation (label `autoscaling.modelsphere.dev/rotation`
    /// set to `out`), and replicas are lowered only once their in-flight requests reach 0 or
    /// `drainSeconds` has passed. Deployments only; needs `behavior: CacheAware`. Unset: off.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub drain: Option<Drain>,
}

/// Drain before scale-down (docs/scale-down.md#drain). Present = on (`drain: {}` takes the
/// defaults).
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct Drain {
    /// Longest wait for the drained pods' in-flight requests to reach 0, seconds, 1 to 3600.
    /// When it passes, replicas are lowered anyway. Default 120.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 3600))]
    pub drain_seconds: Option<i32>,
    /// PromQL returning one series per pod (label `pod`) whose value is the pod's in-flight
    /// requests (running + waiting). Default for vLLM:
    /// `sum by (pod) (vllm:num_requests_running{namespace="<ns>"}) + sum by (pod)
    /// (vllm:num_requests_waiting{namespace="<ns>"})`. Prometheus provider only; under
    /// `Custom` the drain waits the full `drainSeconds`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 8192))]
    pub in_flight_query: Option<String>,
}

/// Scale-up rate cap and tolerance (docs/guards.md#scale-up-policy).
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct ScaleUp {
    /// Rate caps, as the HorizontalPodAutoscaler's `behavior.scaleUp.policies`: each allows at
    /// most `value` pods (`Pods`) or `value` percent of the replicas at the start of the period
    /// (`Percent`) to be added within `periodSeconds`. Empty: no cap.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 8))]
    pub policies: Option<Vec<ScaleUpPolicy>>,
    /// Which policy applies when there are several: `Max` (default, the most permissive) or
    /// `Min` (the most restrictive).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub select_policy: Option<SelectPolicy>,
    /// Tolerance band on each metric's ratio `value / target`, a quoted number in `[0, 1)`
    /// (e.g. `"0.1"`): while `|ratio - 1| <= tolerance` the metric recommends the current
    /// `spec.replicas` (no change). Unset: no band.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tolerance: Option<String>,
}

/// One scale-up rate cap.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct ScaleUpPolicy {
    /// `Pods` (an absolute number of pods) or `Percent` (of the replicas at the period start).
    #[serde(rename = "type")]
    pub type_: ScaleUpPolicyType,
    /// Pods or percent per period, at least 1.
    #[schemars(range(min = 1, max = 2147483647))]
    pub value: i32,
    /// The period, seconds, 1 to 1800.
    #[schemars(range(min = 1, max = 1800))]
    pub period_seconds: i32,
}

/// How a scale-up policy counts: `Pods` (at most `value` pods added per period) or `Percent` (at
/// most `value` percent of the replicas at the start of the period).
#[derive(JsonSchema, Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq)]
pub enum ScaleUpPolicyType {
    /// An absolute number of pods per period.
    Pods,
    /// A percentage of the replicas at the start of the period.
    Percent,
}

/// Which of several scale-up policies applies: `Max` (default, the most permissive) or `Min`
/// (the most restrictive).
#[derive(JsonSchema, Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum SelectPolicy {
    /// The policy allowing the largest change.
    #[default]
    Max,
    /// The policy allowing the smallest change.
    Min,
}

/// Whether the operator acts on the target: `Active` (default) writes `spec.replicas` and pod
/// marks; `Advisory` computes and reports everything (status, Events, metrics) but never writes
/// the target or its pods.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum ScalerMode {
    /// Write `spec.replicas` and pod marks.
    #[default]
    Active,
    /// Compute and report only; never write the target or its pods.
    Advisory,
}

/// The wake-up signal of a fleet at zero (docs/scaling.md#scale-to-zero-and-activation).
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct Activation {
    /// PromQL instant query returning one series that exists while no pod runs, e.g.
    /// `sum(gateway_queue_size{model="llama"})` or `sum(rate(gateway_requests_total[1m]))`.
    pub query: String,
    /// The fleet wakes when the value is greater than this quoted number (0 or more). Default
    /// `"0"`: any queued request wakes it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub threshold: Option<String>,
}

/// A scheduled floor and/or ceiling (docs/guards.md#schedules).
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct ScheduleSpec {
    /// Name shown in status while the schedule is active.
    pub name: String,
    /// When the schedule starts: a standard 5-field cron expression (`minute hour day-of-month
    /// month day-of-week`, e.g. `0 8 * * Mon-Fri`) in `timeZone`.
    pub start: String,
    /// When it ends: a 5-field cron expression; the schedule is active from each `start` until
    /// the next `end` after it. Exactly one of `end` and `durationSeconds`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub end: Option<String>,
    /// How long each `start` lasts, seconds (at least 60). Exactly one of `end` and
    /// `durationSeconds`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 60, max = 2147483647))]
    pub duration_seconds: Option<i32>,
    /// IANA time zone of the cron expressions, e.g. `Europe/Berlin`. Default `UTC`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub time_zone: Option<String>,
    /// Floor while active (raises `spec.minReplicas`); at most `spec.maxReplicas`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0, max = 2147483647))]
    pub min_replicas: Option<i32>,
    /// Ceiling while active (lowers `spec.maxReplicas`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0, max = 2147483647))]
    pub max_replicas: Option<i32>,
}

/// How the pods removed by a scale-down are chosen: `CacheAware` (default) marks the pods to
/// remove with a low `controller.kubernetes.io/pod-deletion-cost` before lowering replicas
/// (Deployments only); `None` leaves the choice to the workload controller.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum ScaleDownBehavior {
    /// Mark victims with `controller.kubernetes.io/pod-deletion-cost` first.
    #[default]
    CacheAware,
    /// Let the workload controller choose.
    None,
}

/// Accepted for compatibility; has no effect.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct Preemption {
    /// Has no effect.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub enable: Option<bool>,
    /// Has no effect.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub priority_class: Option<String>,
}

/// Observed state, written by the operator with server-side apply on the status subresource.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct LLMScalerStatus {
    /// The target's ready replicas at the last sync (the figure the ratio uses).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0, max = 2147483647))]
    pub current_replicas: Option<i32>,
    /// Last recommendation after clamping and stabilization, before the step cap: while a step
    /// cap walks the fleet down it shows the destination.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0, max = 2147483647))]
    pub desired_replicas: Option<i32>,
    /// The generation of the spec the last sync acted on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// When `spec.replicas` of the target was last changed by the operator.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_scale_time: Option<Time>,
    /// Recommendations inside the scale-down stabilization window, oldest first, so that a
    /// restart or a leader change cannot forget them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub recommendations: Option<Vec<RecommendationRecord>>,
    /// Names of the schedules active at the last sync.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub active_schedules: Option<Vec<String>>,
    /// Set while the operator does not act on the target: by which annotation or mode, and
    /// since when.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub paused: Option<PausedStatus>,
    /// The scale-down drain in progress (`spec.scaleDown.drain`): the pods out of rotation and
    /// since when. Unset when no drain is in progress.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub draining: Option<DrainingStatus>,
    /// Measured time from a scale-up to its replicas Ready, seconds, smoothed over scale-ups
    /// (docs/guards.md#start-up-awareness). Set only with `spec.startup`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0, max = 2147483647))]
    pub startup_seconds: Option<i32>,
    /// The per-replica capacity learned for `spec.objective` (docs/objective.md#status); unset
    /// without an objective.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub capacity: Option<CapacityStatus>,
    /// `Ready`, `ScalingActive`, `AbleToScale`, `ScalingLimited`, `ReplicasContested`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[x_kube(merge_strategy = ListMerge::Map(vec!["type".into()]))]
    pub conditions: Option<Vec<Condition>>,
}

/// The per-replica capacity estimate of `spec.objective` (docs/objective.md#status). Written
/// only when it changes materially (a new basis or template, a rate 5 % away), so a steady
/// fleet causes no status writes.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct CapacityStatus {
    /// How the estimate was obtained: `calibrated` (the step-time fit extrapolated to the batch
    /// limit), `saturated` (completions per replica while every replica queued), `lowerBound`
    /// (the best throughput observed; too little evidence yet).
    pub basis: String,
    /// Requests per second one Ready replica completes at full load, as a decimal string.
    pub requests_per_second: String,
    /// Prompt tokens per second one Ready replica processes at full load, as a decimal string.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prompt_tokens_per_second: Option<String>,
    /// The best throughput per Ready replica observed, requests per second (a lower bound).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lower_bound: Option<String>,
    /// The correction factor on demand from observed vs predicted TTFT, 1 to 2.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub correction: Option<String>,
    /// Syncs of evidence behind the estimate.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0, max = 2147483647))]
    pub samples: Option<i32>,
    /// When the estimate was last written.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_at: Option<Time>,
    /// A hash of the target's pod template the estimate was learned on: a rollout (new model,
    /// image or GPU) starts the estimate over.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub template: Option<String>,
    /// What the estimate rests on, for people.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
}

/// Why and since when the operator does not act on the target.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct PausedStatus {
    /// What holds it: `annotation autoscaling.modelsphere.dev/paused` or `spec.mode: Advisory`.
    pub by: String,
    /// Since when.
    pub since: Time,
}

/// A drain in progress (docs/scale-down.md#drain).
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct DrainingStatus {
    /// The pods taken out of rotation, waiting for their in-flight requests to finish.
    pub pods: Vec<String>,
    /// When they were taken out; a new leader that finds the drain continues from this time.
    pub since: Time,
    /// In-flight requests (running + waiting) on those pods at the last sync; unset when not
    /// read.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub in_flight: Option<i64>,
}

/// One entry of the stabilization window history.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct RecommendationRecord {
    /// When the recommendation was made.
    pub time: Time,
    /// The clamped recommendation, in replicas.
    #[schemars(range(min = 0, max = 2147483647))]
    pub replicas: i32,
}

/// Most `spec.metrics` entries (the CRD's `maxItems`, `docs/security.md#memory`): each is one
/// request per sync, so this bounds one scaler's share of the operator's request slots.
pub(crate) const MAX_METRICS: usize = 16;

impl LLMScalerSpec {
    /// A spec with the required fields and nothing else set: `targetRef`, `serverAddress`,
    /// `minReplicas` and `maxReplicas` (replicas). The one literal of the whole struct, so a
    /// new field is added here once; set the optional fields on the result.
    pub fn new(
        target_ref: TargetRef,
        server_address: impl Into<String>,
        min_replicas: i32,
        max_replicas: i32,
    ) -> Self {
        Self {
            target_ref,
            metric_provider: None,
            custom_provider: None,
            server_address: server_address.into(),
            server_headers: None,
            server_headers_from: None,
            min_replicas,
            max_replicas,
            metrics: None,
            sync_period_seconds: None,
            retry_period_seconds: None,
            scale_down: None,
            scale_up: None,
            mode: None,
            activation: None,
            scale_to_zero: None,
            schedules: None,
            preemption: None,
            capacity: None,
            objective: None,
            startup: None,
        }
    }

    /// The provider in force (`Prometheus` when unset).
    pub fn effective_provider(&self) -> MetricProvider {
        self.metric_provider.unwrap_or_default()
    }

    /// Seconds between evaluations (docs/resource.md#spec: default 15).
    pub fn effective_sync_period_seconds(&self) -> i32 {
        self.sync_period_seconds
            .unwrap_or(defaults::SYNC_PERIOD_SECONDS)
    }

    /// Seconds before retrying after a failed sync (docs/resource.md#spec: default 10).
    pub fn effective_retry_period_seconds(&self) -> i32 {
        self.retry_period_seconds
            .unwrap_or(defaults::RETRY_PERIOD_SECONDS)
    }

    /// Scale-down stabilization window in seconds; 0 = off.
    pub fn effective_stabilization_window_seconds(&self) -> i32 {
        self.scale_down
            .as_ref()
            .and_then(|s| s.stabilization_window_seconds)
            .unwrap_or(0)
    }

    /// Largest scale-down step in replicas; 0 = unlimited.
    pub fn effective_max_step_replicas(&self) -> i32 {
        self.scale_down
            .as_ref()
            .and_then(|s| s.max_step_replicas)
            .unwrap_or(0)
    }

    /// Victim-marking behaviour (`CacheAware` when unset).
    pub fn effective_scale_down_behavior(&self) -> ScaleDownBehavior {
        self.scale_down
            .as_ref()
            .and_then(|s| s.behavior)
            .unwrap_or_default()
    }

    /// The drain settings when `scaleDown.drain` is set (docs/scale-down.md#drain).
    pub fn drain(&self) -> Option<&Drain> {
        self.scale_down.as_ref().and_then(|s| s.drain.as_ref())
    }

    /// The mode in force (`Active` when unset).
    pub fn effective_mode(&self) -> ScalerMode {
        self.mode.unwrap_or_default()
    }

    /// The schedules (empty when unset).
    pub fn schedules(&self) -> &[ScheduleSpec] {
        self.schedules.as_deref().unwrap_or_default()
    }

    /// The metric list (empty when unset).
    pub fn metrics(&self) -> &[MetricSpec] {
        self.metrics.as_deref().unwrap_or_default()
    }
}

/// `scaleDown.drain.drainSeconds` default, seconds (docs/scale-down.md#drain).
pub(crate) const DEFAULT_DRAIN_SECONDS: i32 = 120;

impl Drain {
    /// The longest wait in seconds (default [`DEFAULT_DRAIN_SECONDS`]).
    pub fn effective_drain_seconds(&self) -> i32 {
        self.drain_seconds.unwrap_or(DEFAULT_DRAIN_SECONDS)
    }
}

impl MetricSpec {
    /// Whether the metric is read per pod (a `runtime` signal or a `perPod` query) and
    /// aggregated over the target's Ready pods by the operator.
    pub fn is_per_pod(&self) -> bool {
        self.runtime.is_some() || self.signal.is_some() || self.per_pod == Some(true)
    }

    /// The scrape interval in force, seconds (30 when unset).
    pub fn effective_scrape_interval_seconds(&self) -> i32 {
        self.scrape_interval_seconds
            .unwrap_or(crate::signals::DEFAULT_SCRAPE_INTERVAL_SECONDS)
    }

    /// The role in force (`Normal` when unset).
    pub fn effective_role(&self) -> MetricRole {
        self.role.unwrap_or_default()
    }

    /// Whether the metric is a guardrail (docs/signals.md#guardrails).
    pub fn is_guardrail(&self) -> bool {
        self.effective_role() == MetricRole::Guardrail
    }

    /// The metric's name, or `metric<index>` when unnamed (the `simulate` column name).
    pub fn display_name(&self, index: usize) -> String {
        match &self.name {
            Some(name) if !name.is_empty() => name.clone(),
            _ => format!("metric{index}"),
        }
    }
}
