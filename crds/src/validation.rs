//! The admission rules of docs/admission.md, as pure functions shared by the webhook, the
//! controller
//! (which re-checks at reconcile time) and the `simulate` / `probe` commands.
//!
//! Every function returns *all* violations, each with the field path it is about
//! (`spec.metrics[1].target`), so a user fixes a manifest in one round.

use std::fmt;

use serde::de::DeserializeOwned;

use crate::policy::OperatorPolicy;
use crate::signals;
use crate::types::{LLMScaler, LLMScalerSpec, MAX_METRICS, MetricProvider, MetricSpec};

/// One violated rule: the field path (`spec.metrics[1].target`) and why it is refused.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FieldError {
    /// Dotted path from the object root, with list indexes, e.g. `spec.scaleDown.maxStepReplicas`.
    pub path: String,
    /// What is wrong and, where it helps, how to fix it.
    pub message: String,
}

impl FieldError {
    /// A violation at `path` (e.g. `spec.minReplicas`) with its reason.
    pub fn new(path: impl Into<String>, message: impl Into<String>) -> Self {
        Self {
            path: path.into(),
            message: message.into(),
        }
    }
}

impl fmt::Display for FieldError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.path, self.message)
    }
}

/// All violations of one object, printed one per line.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ValidationErrors(pub Vec<FieldError>);

impl fmt::Display for ValidationErrors {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let lines: Vec<String> = self.0.iter().map(ToString::to_string).collect();
        f.write_str(&lines.join("\n"))
    }
}

impl std::error::Error for ValidationErrors {}

/// Parses `metrics[].target` (docs/resource.md): a plain number on the query's own scale, finite
/// and
/// greater than zero.
///
/// # Errors
/// A message (without the field path) for an empty string, a `%` suffix, anything that is not a
/// number, NaN/±Inf, and zero or negative values.
pub fn parse_target(raw: &str) -> Result<f64, String> {
    const SCALE_HINT: &str = "targets are plain numbers on the query's own scale";
    let trimmed = raw.trim();
    if trimmed.is_empty() {
        return Err(format!(
            "target is empty; {SCALE_HINT} (e.g. \"0.8\" against a 0-1 ratio)"
        ));
    }
    if trimmed.ends_with('%') {
        let bare = trimmed.trim_end_matches('%');
        return Err(format!(
            "{raw:?} is not a number; {SCALE_HINT} (write \"{bare}\" against a 0-100 series, or the fraction against a 0-1 ratio)"
        ));
    }
    let value: f64 = trimmed
        .parse()
        .map_err(|_| format!("{raw:?} is not a number; {SCALE_HINT}"))?;
    if !value.is_finite() {
        return Err(format!("{raw:?} is not a finite number; {SCALE_HINT}"));
    }
    if value <= 0.0 {
        return Err(format!("{raw:?} must be greater than zero"));
    }
    Ok(value)
}

/// Checks every rule of docs/admission.md that a spec can break and returns all violations
/// (empty when valid). Paths start at `spec.`. Call it on a defaulted spec or a raw one: unset
/// optional fields are never errors.
///
/// The operator-wide rules (`docs/security.md`) are those of `policy`: egress allow-list and
/// metadata addresses for `spec.serverAddress`, refused `spec.serverHeaders` names, and the
/// replica cap on `spec.maxReplicas`. Commands without the operator's flags pass
/// [`OperatorPolicy::default`].
pub fn validate_spec(spec: &LLMScalerSpec, policy: &OperatorPolicy) -> Vec<FieldError> {
    let mut errors = Vec::new();
    validate_target_ref(spec, &mut errors);
    validate_server(spec, policy, &mut errors);
    validate_headers_from(spec, policy, &mut errors);
    validate_bounds(spec, policy, &mut errors);
    validate_provider(spec, &mut errors);
    validate_scale_down(spec, &mut errors);
    validate_scale_up(spec, &mut errors);
    validate_schedules(spec, &mut errors);
    validate_activation(spec, &mut errors);
    validate_capacity(spec, &mut errors);
    validate_objective(spec, &mut errors);
    validate_startup(spec, &mut errors);
    validate_scale_to_zero(spec, &mut errors);
    errors
}

/// Whether `name` is a DNS-1035 label (a Service name): 1 to 63 of `a-z`, `0-9`, `-`,
/// starting with a letter and ending with a letter or digit.
fn is_dns_label(name: &str) -> bool {
    let bytes = name.as_bytes();
    !bytes.is_empty()
        && bytes.len() <= 63
        && bytes[0].is_ascii_lowercase()
        && bytes
            .last()
            .is_some_and(|b| b.is_ascii_lowercase() || b.is_ascii_digit())
        && bytes
            .iter()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || *b == b'-')
}

fn validate_scale_to_zero(spec: &LLMScalerSpec, errors: &mut Vec<FieldError>) {
    let Some(stz) = &spec.scale_to_zero else {
        return;
    };
    match stz.service.as_deref() {
        None if stz.holds() => errors.push(FieldError::new(
            "spec.scaleToZero.service",
            "required with holdRequests: true (the workload's Service in this namespace)",
        )),
        Some(name) if !is_dns_label(name) => errors.push(FieldError::new(
            "spec.scaleToZero.service",
            format!("{name:?} is not a Service name (a DNS label: a-z, 0-9, '-', at most 63)"),
        )),
        _ => {}
    }
    if let Some(port) = stz.port.as_deref()
        && !port.is_empty()
        && !(port.len() <= 15
            && port
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-'))
    {
        errors.push(FieldError::new(
            "spec.scaleToZero.port",
            format!("{port:?} is not a Service port name (a-z, 0-9, '-', at most 15)"),
        ));
    }
    if let Some(max) = stz.max_held_requests
        && !(1..=10_000).contains(&max)
    {
        errors.push(FieldError::new(
            "spec.scaleToZero.maxHeldRequests",
            format!("{max} must be 1 to 10000"),
        ));
    }
    if let Some(timeout) = stz.hold_timeout_seconds
        && !(1..=crate::types::MAX_HOLD_TIMEOUT_SECONDS).contains(&timeout)
    {
        errors.push(FieldError::new(
            "spec.scaleToZero.holdTimeoutSeconds",
            format!(
                "{timeout} must be 1 to {} seconds",
                crate::types::MAX_HOLD_TIMEOUT_SECONDS
            ),
        ));
    }
    if stz.holds() && spec.max_replicas < 1 {
        errors.push(FieldError::new(
            "spec.scaleToZero.holdRequests",
            "needs maxReplicas of 1 or more: held requests wake the fleet to one replica",
        ));
    }
}

/// Parses `activation.threshold`: a plain finite number, 0 or more (unset: 0).
///
/// # Errors
/// A message (without the field path) otherwise.
pub fn parse_threshold(raw: Option<&str>) -> Result<f64, String> {
    let Some(raw) = raw else {
        return Ok(0.0);
    };
    match raw.trim().parse::<f64>() {
        Ok(v) if v.is_finite() && v >= 0.0 => Ok(v),
        _ => Err(format!(
            "{raw:?} is not a number of 0 or more on the query's own scale (no % suffix)"
        )),
    }
}

fn validate_activation(spec: &LLMScalerSpec, errors: &mut Vec<FieldError>) {
    let Some(activation) = &spec.activation else {
        return;
    };
    match spec.effective_provider() {
        MetricProvider::Prometheus => {}
        MetricProvider::Custom => errors.push(FieldError::new(
            "spec.activation",
            "only under the Prometheus provider (a decision server wakes the fleet itself with an active count above 0)",
        )),
    }
    if activation.query.trim().is_empty() {
        errors.push(FieldError::new(
            "spec.activation.query",
            "must not be empty",
        ));
    }
    if let Err(why) = parse_threshold(activation.threshold.as_deref()) {
        errors.push(FieldError::new("spec.activation.threshold", why));
    }
}

/// Parses `scaleUp.tolerance`: a plain number in `[0, 1)`.
///
/// # Errors
/// A message (without the field path) otherwise.
pub fn parse_tolerance(raw: &str) -> Result<f64, String> {
    match raw.trim().parse::<f64>() {
        Ok(v) if v.is_finite() && (0.0..1.0).contains(&v) => Ok(v),
        Ok(v) => Err(format!(
            "{v} is outside [0, 1); it is a band on value/target, e.g. \"0.1\" for 10%"
        )),
        Err(_) => Err(format!(
            "{raw:?} is not a number; write a fraction like \"0.1\" (no % suffix)"
        )),
    }
}

fn validate_scale_up(spec: &LLMScalerSpec, errors: &mut Vec<FieldError>) {
    let Some(scale_up) = &spec.scale_up else {
        return;
    };
    for (i, policy) in scale_up.policies.iter().flatten().enumerate() {
        let path = format!("spec.scaleUp.policies[{i}]");
        if policy.value < 1 {
            errors.push(FieldError::new(
                format!("{path}.value"),
                format!("{} must be at least 1", policy.value),
            ));
        }
        if !(1..=1800).contains(&policy.period_seconds) {
            errors.push(FieldError::new(
                format!("{path}.periodSeconds"),
                format!(
                    "{} must be between 1 and 1800 seconds",
                    policy.period_seconds
                ),
            ));
        }
    }
    if let Some(tolerance) = &scale_up.tolerance
        && let Err(why) = parse_tolerance(tolerance)
    {
        errors.push(FieldError::new("spec.scaleUp.tolerance", why));
    }
}

fn validate_schedules(spec: &LLMScalerSpec, errors: &mut Vec<FieldError>) {
    let mut names = std::collections::BTreeSet::new();
    for (i, schedule) in spec.schedules().iter().enumerate() {
        let path = format!("spec.schedules[{i}]");
        if schedule.name.trim().is_empty() {
            errors.push(FieldError::new(format!("{path}.name"), "must not be empty"));
        } else if !names.insert(schedule.name.as_str()) {
            errors.push(FieldError::new(
                format!("{path}.name"),
                format!("{:?} is used by another schedule", schedule.name),
            ));
        }
        if let Err(problems) = crate::schedule::Schedule::compile(schedule) {
            for (field, message) in problems {
                errors.push(FieldError::new(format!("{path}.{field}"), message));
            }
        }
        match (schedule.min_replicas, schedule.max_replicas) {
            (None, None) => errors.push(FieldError::new(
                path.clone(),
                "set minReplicas (a floor) and/or maxReplicas (a ceiling)",
            )),
            (Some(floor), _) if floor > spec.max_replicas => errors.push(FieldError::new(
                format!("{path}.minReplicas"),
                format!(
                    "floor {floor} exceeds spec.maxReplicas {}; the ceiling would win",
                    spec.max_replicas
                ),
            )),
            (Some(floor), Some(ceiling)) if floor > ceiling => errors.push(FieldError::new(
                format!("{path}.minReplicas"),
                format!("floor {floor} exceeds this schedule's maxReplicas {ceiling}"),
            )),
            _ => {}
        }
        for (field, value) in [
            ("minReplicas", schedule.min_replicas),
            ("maxReplicas", schedule.max_replicas),
        ] {
            if let Some(v) = value
                && v < 0
            {
                errors.push(FieldError::new(
                    format!("{path}.{field}"),
                    format!("{v} is negative"),
                ));
            }
        }
    }
}

/// Like [`validate_spec`] but returns `Err` with every violation.
///
/// # Errors
/// [`ValidationErrors`] holding each violation with its field path.
pub fn check_spec(spec: &LLMScalerSpec, policy: &OperatorPolicy) -> Result<(), ValidationErrors> {
    let errors = validate_spec(spec, policy);
    if errors.is_empty() {
        Ok(())
    } else {
        Err(ValidationErrors(errors))
    }
}

fn validate_target_ref(spec: &LLMScalerSpec, errors: &mut Vec<FieldError>) {
    let target = &spec.target_ref;
    for (field, value) in [
        ("apiVersion", &target.api_version),
        ("kind", &target.kind),
        ("name", &target.name),
    ] {
        if value.trim().is_empty() {
            errors.push(FieldError::new(
                format!("spec.targetRef.{field}"),
                "required and must not be empty",
            ));
        }
    }
    if !target.api_version.trim().is_empty() && !is_api_version(&target.api_version) {
        errors.push(FieldError::new(
            "spec.targetRef.apiVersion",
            format!(
                "{:?} is not an API version; expected `version` or `group/version`, e.g. \"apps/v1\"",
                target.api_version
            ),
        ));
    }
}

/// `v1`, `v1beta2`, `apps/v1`, `leaderworkerset.x-k8s.io/v1alpha1`.
fn is_api_version(raw: &str) -> bool {
    let (group, version) = match raw.split_once('/') {
        Some((group, version)) => (Some(group), version),
        None => (None, raw),
    };
    let group_ok = group.is_none_or(|g| {
        !g.is_empty()
            && g.split('.').all(|label| {
                !label.is_empty()
                    && label
                        .chars()
                        .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
            })
    });
    group_ok && is_version(version)
}

/// `v<digits>` optionally followed by `alpha<digits>` or `beta<digits>`.
fn is_version(raw: &str) -> bool {
    let Some(rest) = raw.strip_prefix('v') else {
        return false;
    };
    let digits = rest.chars().take_while(char::is_ascii_digit).count();
    if digits == 0 || rest.starts_with('0') {
        return false;
    }
    let tail = &rest[digits..];
    if tail.is_empty() {
        return true;
    }
    let number = tail
        .strip_prefix("alpha")
        .or_else(|| tail.strip_prefix("beta"));
    number.is_some_and(|n| !n.is_empty() && n.chars().all(|c| c.is_ascii_digit()))
}

fn validate_server(spec: &LLMScalerSpec, policy: &OperatorPolicy, errors: &mut Vec<FieldError>) {
    let address = spec.server_address.trim();
    if address.is_empty() {
        errors.push(FieldError::new(
            "spec.serverAddress",
            "required: the Prometheus or decision server base URL, e.g. \"http://prometheus.monitoring:9090\"",
        ));
    } else {
        match url::Url::parse(address) {
            Ok(url) if matches!(url.scheme(), "http" | "https") && url.has_host() => {
                if !url.username().is_empty() || url.password().is_some() {
                    // The credentials are never echoed.
                    errors.push(FieldError::new(
                        "spec.serverAddress",
                        "must not hold user info (`user:password@`); send credentials in a \
                         serverHeaders entry, e.g. Authorization",
                    ));
                }
                if let Some(host) = url.host_str()
                    && let Err(why) = policy.egress.check_host(host)
                {
                    errors.push(FieldError::new("spec.serverAddress", why));
                }
            }
            Ok(url) => errors.push(FieldError::new(
                "spec.serverAddress",
                format!(
                    "{address:?} must be an http or https URL with a host (scheme was {:?})",
                    url.scheme()
                ),
            )),
            Err(err) => errors.push(FieldError::new(
                "spec.serverAddress",
                format!("{address:?} is not a URL: {err}"),
            )),
        }
    }
    for (name, value) in spec.server_headers.iter().flatten() {
        if name.is_empty() || !name.bytes().all(is_header_token_byte) {
            errors.push(FieldError::new(
                format!("spec.serverHeaders[{name:?}]"),
                "is not a valid HTTP header name",
            ));
        }
        if let Some(why) = policy.header_refusal(name) {
            errors.push(FieldError::new(
                format!("spec.serverHeaders[{name:?}]"),
                why,
            ));
        }
        if value.bytes().any(|b| b == b'\r' || b == b'\n' || b == 0) {
            // The value itself is never echoed: it usually carries a token.
            errors.push(FieldError::new(
                format!("spec.serverHeaders[{name:?}]"),
                "value must not contain CR, LF or NUL",
            ));
        }
    }
}

/// RFC 9110 `tchar`.
fn is_header_token_byte(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b)
}

fn validate_headers_from(
    spec: &LLMScalerSpec,
    policy: &OperatorPolicy,
    errors: &mut Vec<FieldError>,
) {
    let inline: Vec<String> = spec
        .server_headers
        .iter()
        .flatten()
        .map(|(name, _)| name.to_ascii_lowercase())
        .collect();
    let mut seen = std::collections::BTreeSet::new();
    for (i, entry) in spec.server_headers_from.iter().flatten().enumerate() {
        let path = format!("spec.serverHeadersFrom[{i}]");
        let name = &entry.name;
        if name.is_empty() || !name.bytes().all(is_header_token_byte) {
            errors.push(FieldError::new(
                format!("{path}.name"),
                "is not a valid HTTP header name",
            ));
        } else if let Some(why) = policy.header_refusal(name) {
            errors.push(FieldError::new(format!("{path}.name"), why));
        }
        let lower = name.to_ascii_lowercase();
        if inline.contains(&lower) || !seen.insert(lower) {
            errors.push(FieldError::new(
                format!("{path}.name"),
                format!(
                    "header {name:?} is set more than once (serverHeaders and serverHeadersFrom)"
                ),
            ));
        }
        if let Some(prefix) = &entry.value_prefix
            && (prefix.len() > 64 || !prefix.bytes().all(|b| (b' '..=b'~').contains(&b)))
        {
            errors.push(FieldError::new(
                format!("{path}.valuePrefix"),
                "must be at most 64 visible ASCII characters and spaces (e.g. \"Bearer \")",
            ));
        }
        for (field, value) in [
            ("name", &entry.secret_key_ref.name),
            ("key", &entry.secret_key_ref.key),
        ] {
            if value.trim().is_empty() {
                errors.push(FieldError::new(
                    format!("{path}.secretKeyRef.{field}"),
                    "required and must not be empty",
                ));
            }
        }
    }
    if spec
        .server_headers_from
        .as_ref()
        .is_some_and(|v| v.len() > 16)
    {
        errors.push(FieldError::new(
            "spec.serverHeadersFrom",
            "at most 16 entries",
        ));
    }
}

/// `--restrict-secret-access`: `serverHeadersFrom` only in the operator's namespace. Needs the
/// scaler's namespace, so it is checked by [`validate_namespace_rules`], not [`validate_spec`].
pub fn validate_namespace_rules(
    spec: &LLMScalerSpec,
    namespace: &str,
    policy: &OperatorPolicy,
) -> Vec<FieldError> {
    let mut errors = Vec::new();
    if policy.restrict_secret_access
        && spec
            .server_headers_from
            .as_ref()
            .is_some_and(|v| !v.is_empty())
        && policy.operator_namespace.as_deref() != Some(namespace)
    {
        errors.push(FieldError::new(
            "spec.serverHeadersFrom",
            "the operator's admin restricts Secret access to the operator's namespace \
             (--restrict-secret-access); put the token in serverHeaders or ask the admin",
        ));
    }
    errors
}

fn validate_bounds(spec: &LLMScalerSpec, policy: &OperatorPolicy, errors: &mut Vec<FieldError>) {
    if let Some(cap) = policy.max_replicas_cap
        && spec.max_replicas > cap
    {
        errors.push(FieldError::new(
            "spec.maxReplicas",
            format!(
                "{} is over the operator's replica cap {cap} (--max-replicas-cap)",
                spec.max_replicas
            ),
        ));
    }
    if spec.min_replicas < 0 {
        errors.push(FieldError::new(
            "spec.minReplicas",
            format!("{} must be 0 or more", spec.min_replicas),
        ));
    }
    if spec.max_replicas < 0 {
        errors.push(FieldError::new(
            "spec.maxReplicas",
            format!("{} must be 0 or more", spec.max_replicas),
        ));
    }
    if spec.min_replicas > spec.max_replicas {
        errors.push(FieldError::new(
            "spec.minReplicas",
            format!(
                "{} must be less than or equal to spec.maxReplicas ({})",
                spec.min_replicas, spec.max_replicas
            ),
        ));
    }
    for (field, value) in [
        ("syncPeriodSeconds", spec.sync_period_seconds),
        ("retryPeriodSeconds", spec.retry_period_seconds),
    ] {
        if let Some(v) = value
            && v < 1
        {
            errors.push(FieldError::new(
                format!("spec.{field}"),
                format!("{v} must be at least 1 second"),
            ));
        } else if let Some(v) = value
            && v < policy.min_sync_period_seconds
        {
            errors.push(FieldError::new(
                format!("spec.{field}"),
                format!(
                    "{v} is below the operator's minimum of {} seconds \
                     (--min-sync-period-seconds): every period runs the scaler's queries \
                     against a shared Prometheus",
                    policy.min_sync_period_seconds
                ),
            ));
        }
    }
}

fn validate_provider(spec: &LLMScalerSpec, errors: &mut Vec<FieldError>) {
    match spec.effective_provider() {
        MetricProvider::Prometheus => {
            let metrics = spec.metrics();
            if metrics.is_empty() && spec.objective.is_none() {
                errors.push(FieldError::new(
                    "spec.metrics",
                    "must list at least one {query, target} under the Prometheus provider",
                ));
            }
            if metrics.len() > MAX_METRICS {
                errors.push(FieldError::new(
                    "spec.metrics",
                    format!(
                        "{} entries; at most {MAX_METRICS} (each is one request per sync)",
                        metrics.len()
                    ),
                ));
            }
            let mut seen = std::collections::BTreeMap::new();
            for (i, metric) in metrics.iter().enumerate() {
                validate_metric_source(i, metric, errors);
                if let Err(message) = parse_target(&metric.target) {
                    let message = if metric.is_guardrail() {
                        format!("a guardrail needs a target (it holds while above it): {message}")
                    } else {
                        message
                    };
                    errors.push(FieldError::new(
                        format!("spec.metrics[{i}].target"),
                        message,
                    ));
                }
                let name = metric.display_name(i);
                if let Some(first) = seen.insert(name.clone(), i) {
                    errors.push(FieldError::new(
                        format!("spec.metrics[{i}].name"),
                        format!("{name:?} is already the name of spec.metrics[{first}]"),
                    ));
                }
            }
            // With `spec.capacity` the recommender sizes the fleet (it may lower it) and the
            // guardrails protect it: a meaningful spec (docs/scaling.md#capacity-recommender).
            if !metrics.is_empty()
                && spec.capacity.is_none()
                && metrics.iter().all(MetricSpec::is_guardrail)
            {
                errors.push(FieldError::new(
                    "spec.metrics",
                    "every metric is a Guardrail: guardrails never lower replicas, so the fleet \
                     could only grow; give at least one metric role Normal, or size the fleet with \
                     spec.capacity (docs/signals.md#guardrails)",
                ));
            }
        }
        MetricProvider::Custom => match &spec.custom_provider {
            None => errors.push(FieldError::new(
                "spec.customProvider",
                "required when spec.metricProvider is Custom",
            )),
            Some(custom) => {
                if custom.service_id.trim().is_empty() {
                    errors.push(FieldError::new(
                        "spec.customProvider.serviceId",
                        "required and must not be empty",
                    ));
                }
            }
        },
    }
}

/// `spec.metrics[i]`: a `query`, or `runtime` + `signal` the runtime publishes
/// (docs/signals.md); `perPod` queries keep `pod`; `coverage` and `scrapeIntervalSeconds` only
/// where they apply.
fn validate_metric_source(i: usize, metric: &MetricSpec, errors: &mut Vec<FieldError>) {
    let path = format!("spec.metrics[{i}]");
    let has_query = !metric.query.trim().is_empty();
    match (has_query, metric.runtime, metric.signal) {
        (false, None, None) => errors.push(FieldError::new(
            format!("{path}.query"),
            "required: a PromQL query returning exactly one series, or runtime and signal \
             (docs/signals.md)",
        )),
        (true, Some(_), _) | (true, _, Some(_)) => errors.push(FieldError::new(
            format!("{path}.query"),
            "set either query, or runtime and signal, not both",
        )),
        (false, Some(_), None) => errors.push(FieldError::new(
            format!("{path}.signal"),
            "required with runtime: waiting, running, kvCacheUsage or ttftP90",
        )),
        (false, None, Some(_)) => errors.push(FieldError::new(
            format!("{path}.runtime"),
            "required with signal: vllm, sglang, llamacpp or tgi",
        )),
        (false, Some(runtime), Some(signal)) => {
            if let Err(why) = signals::published(runtime, signal) {
                errors.push(FieldError::new(
                    format!("{path}.signal"),
                    format!(
                        "runtime {} does not publish {}: {why}",
                        signals::runtime_name(runtime),
                        signals::signal_name(signal)
                    ),
                ));
            }
        }
        (true, None, None) => {}
    }
    if metric.per_pod == Some(true)
        && has_query
        && let Some(why) = signals::drops_pod_label(&metric.query)
    {
        errors.push(FieldError::new(
            format!("{path}.query"),
            format!(
                "perPod needs one series per pod, each with a `pod` label, but {why} \
                 (docs/signals.md#per-pod-queries)"
            ),
        ));
    }
    if let Some(raw) = &metric.coverage {
        if !metric.is_per_pod() {
            errors.push(FieldError::new(
                format!("{path}.coverage"),
                "applies to per-pod metrics only (runtime and signal, or perPod: true)",
            ));
        } else if let Err(why) = signals::parse_coverage(Some(raw)) {
            errors.push(FieldError::new(format!("{path}.coverage"), why));
        }
    }
    if let Some(seconds) = metric.scrape_interval_seconds {
        if metric.runtime.is_none() {
            errors.push(FieldError::new(
                format!("{path}.scrapeIntervalSeconds"),
                "applies to runtime signals only (a perPod query sets its own windows)",
            ));
        } else if !(1..=3600).contains(&seconds) {
            errors.push(FieldError::new(
                format!("{path}.scrapeIntervalSeconds"),
                format!("{seconds} must be between 1 and 3600 seconds"),
            ));
        }
    }
}

fn validate_scale_down(spec: &LLMScalerSpec, errors: &mut Vec<FieldError>) {
    let Some(scale_down) = &spec.scale_down else {
        return;
    };
    for (field, value) in [
        (
            "stabilizationWindowSeconds",
            scale_down.stabilization_window_seconds,
        ),
        ("maxStepReplicas", scale_down.max_step_replicas),
    ] {
        if let Some(v) = value
            && v < 0
        {
            errors.push(FieldError::new(
                format!("spec.scaleDown.{field}"),
                format!("{v} must be 0 or more (0 turns it off)"),
            ));
        }
    }
    if let Some(query) = &scale_down.deletion_cost_query
        && query.trim().is_empty()
    {
        errors.push(FieldError::new(
            "spec.scaleDown.deletionCostQuery",
            "must not be empty when set (leave it out to remove the newest pods first)",
        ));
    }
    if let Some(drain) = &scale_down.drain {
        validate_drain(spec, drain, errors);
    }
}

/// The kinds whose pods a drain can take out of rotation: the victims are chosen through
/// `pod-deletion-cost`, which only the ReplicaSet of a Deployment honours
/// (docs/scale-down.md#drain).
const DRAIN_KINDS: &[(&str, &str)] = &[("apps", "Deployment")];

fn validate_drain(spec: &LLMScalerSpec, drain: &crate::types::Drain, errors: &mut Vec<FieldError>) {
    let target = &spec.target_ref;
    let group = target
        .api_version
        .split_once('/')
        .map_or("", |(group, _)| group);
    if !DRAIN_KINDS
        .iter()
        .any(|(g, k)| *g == group && *k == target.kind)
    {
        errors.push(FieldError::new(
            "spec.scaleDown.drain",
            format!(
                "drain needs a target whose pods a pod selector finds and whose scale-down honours pod-deletion-cost: an apps/v1 Deployment, not {} {}",
                target.api_version, target.kind
            ),
        ));
    }
    if spec.scale_down.as_ref().and_then(|s| s.behavior)
        == Some(crate::types::ScaleDownBehavior::None)
    {
        errors.push(FieldError::new(
            "spec.scaleDown.drain",
            "drain needs behavior: CacheAware (the drained pods must be the ones the ReplicaSet deletes)",
        ));
    }
    if let Some(seconds) = drain.drain_seconds
        && !(1..=MAX_DRAIN_SECONDS).contains(&seconds)
    {
        errors.push(FieldError::new(
            "spec.scaleDown.drain.drainSeconds",
            format!("{seconds} must be between 1 and {MAX_DRAIN_SECONDS} seconds"),
        ));
    }
    if let Some(query) = &drain.in_flight_query
        && query.trim().is_empty()
    {
        errors.push(FieldError::new(
            "spec.scaleDown.drain.inFlightQuery",
            "must not be empty when set (leave it out for the vLLM default)",
        ));
    }
}

/// Parses a quoted number that must be finite and greater than zero (`capacity`'s
/// `replicaRequestsPerSecond` and `maxQueueWaitSeconds`, docs/scaling.md#capacity-recommender).
///
/// # Errors
/// A message (without the field path) for anything else, including a `%` suffix.
pub fn parse_positive(raw: &str) -> Result<f64, String> {
    match raw.trim().parse::<f64>() {
        Ok(v) if v.is_finite() && v > 0.0 => Ok(v),
        Ok(v) => Err(format!("{v} must be a finite number greater than zero")),
        Err(_) => Err(format!(
            "{raw:?} is not a number (write e.g. \"4.5\", no unit)"
        )),
    }
}

/// Largest `startup.windowMultiple` (docs/guards.md#start-up-awareness).
pub(crate) const MAX_WINDOW_MULTIPLE: f64 = 20.0;

/// Parses `startup.windowMultiple`: a quoted number in `(0, 20]`.
///
/// # Errors
/// A message (without the field path) otherwise.
pub fn parse_window_multiple(raw: &str) -> Result<f64, String> {
    match raw.trim().parse::<f64>() {
        Ok(v) if v.is_finite() && v > 0.0 && v <= MAX_WINDOW_MULTIPLE => Ok(v),
        Ok(v) => Err(format!(
            "{v} is outside (0, {MAX_WINDOW_MULTIPLE}]; the window is this multiple of the start-up time"
        )),
        Err(_) => Err(format!("{raw:?} is not a number (write e.g. \"2\")")),
    }
}

/// Parses `objective.attainment`: a quoted number strictly between 0 and 1.
///
/// # Errors
/// A message (without the field path) otherwise.
pub fn parse_attainment(raw: &str) -> Result<f64, String> {
    match raw.trim().parse::<f64>() {
        Ok(v) if v.is_finite() && v > 0.0 && v < 1.0 => Ok(v),
        Ok(v) => Err(format!(
            "{v} is outside (0, 1); write the share of requests, e.g. \"0.99\""
        )),
        Err(_) => Err(format!("{raw:?} is not a number (write e.g. \"0.99\")")),
    }
}

/// Checks `objective.seriesSelector`: PromQL label matchers without braces, each
/// `name="value"` (or `!=`, `=~`, `!~`), that parse inside a selector.
///
/// # Errors
/// A message (without the field path) otherwise.
pub fn check_series_selector(raw: &str) -> Result<(), String> {
    let raw = raw.trim();
    if raw.is_empty() {
        return Err(
            "must name the workload's series, e.g. namespace=\"x\",model_name=\"y\"".into(),
        );
    }
    if raw.contains('{') || raw.contains('}') {
        return Err(format!("{raw:?}: write the label matchers without braces"));
    }
    promql_parser::parser::parse(&format!("vllm:num_requests_running{{{raw}}}"))
        .map(|_| ())
        .map_err(|why| format!("{raw:?} is not a list of label matchers: {why}"))
}

fn validate_objective(spec: &LLMScalerSpec, errors: &mut Vec<FieldError>) {
    let Some(objective) = &spec.objective else {
        return;
    };
    match spec.effective_provider() {
        MetricProvider::Prometheus => {}
        MetricProvider::Custom => errors.push(FieldError::new(
            "spec.objective",
            "only under the Prometheus provider (its queries go to serverAddress)",
        )),
    }
    if let Err(message) = parse_positive(&objective.ttft_seconds) {
        errors.push(FieldError::new("spec.objective.ttftSeconds", message));
    }
    if let Err(message) = parse_attainment(&objective.attainment) {
        errors.push(FieldError::new("spec.objective.attainment", message));
    }
    if let Err(message) = check_series_selector(&objective.series_selector) {
        errors.push(FieldError::new("spec.objective.seriesSelector", message));
    }
    match objective.runtime {
        None | Some(crate::Runtime::Vllm) => {}
        Some(other) => errors.push(FieldError::new(
            "spec.objective.runtime",
            format!(
                "{}: only vllm publishes the step-time evidence the estimate needs",
                crate::signals::runtime_name(other)
            ),
        )),
    }
    if let Some(seconds) = objective.lookahead_seconds
        && !(0..=3600).contains(&seconds)
    {
        errors.push(FieldError::new(
            "spec.objective.lookaheadSeconds",
            format!("{seconds} is outside 0 to 3600 seconds"),
        ));
    }
}

fn validate_capacity(spec: &LLMScalerSpec, errors: &mut Vec<FieldError>) {
    let Some(capacity) = &spec.capacity else {
        return;
    };
    match spec.effective_provider() {
        MetricProvider::Prometheus => {}
        MetricProvider::Custom => errors.push(FieldError::new(
            "spec.capacity",
            "only under the Prometheus provider (its queries go to serverAddress)",
        )),
    }
    if capacity.arrival_rate_query.trim().is_empty() {
        errors.push(FieldError::new(
            "spec.capacity.arrivalRateQuery",
            "required: a PromQL query returning one series, the requests per second arriving at the fleet",
        ));
    }
    if let Some(query) = &capacity.backlog_query
        && query.trim().is_empty()
    {
        errors.push(FieldError::new(
            "spec.capacity.backlogQuery",
            "must not be empty when set (leave it out to size from the arrival rate alone)",
        ));
    }
    if let Err(message) = parse_positive(&capacity.replica_requests_per_second) {
        errors.push(FieldError::new(
            "spec.capacity.replicaRequestsPerSecond",
            message,
        ));
    }
    if let Some(wait) = &capacity.max_queue_wait_seconds
        && let Err(message) = parse_positive(wait)
    {
        errors.push(FieldError::new(
            "spec.capacity.maxQueueWaitSeconds",
            message,
        ));
    }
    if let Some(seconds) = capacity.backlog_seconds
        && !(1..=3600).contains(&seconds)
    {
        errors.push(FieldError::new(
            "spec.capacity.backlogSeconds",
            format!("{seconds} is outside 1 to 3600 seconds"),
        ));
    }
}

/// Longest `scaleDown.drain.drainSeconds` (one hour).
pub(crate) const MAX_DRAIN_SECONDS: i32 = 3600;

fn validate_startup(spec: &LLMScalerSpec, errors: &mut Vec<FieldError>) {
    let Some(startup) = &spec.startup else {
        return;
    };
    if let Some(seconds) = startup.initial_seconds
        && !(0..=3600).contains(&seconds)
    {
        errors.push(FieldError::new(
            "spec.startup.initialSeconds",
            format!("{seconds} is outside 0 to 3600 seconds"),
        ));
    }
    if let Some(multiple) = &startup.window_multiple
        && let Err(message) = parse_window_multiple(multiple)
    {
        errors.push(FieldError::new("spec.startup.windowMultiple", message));
    }
}

/// Deserializes a whole `LLMScaler` from YAML or JSON text, reporting type errors (a string
/// where a number belongs, an unknown `metricProvider`) with their field path.
///
/// # Errors
/// [`ValidationErrors`] with one entry: the path of the first field serde could not read.
pub fn parse_llmscaler_yaml(text: &str) -> Result<LLMScaler, ValidationErrors> {
    let deserializer = serde_yaml::Deserializer::from_str(text);
    from_deserializer(deserializer)
}

/// Like [`parse_llmscaler_yaml`] for an already-parsed JSON value (an AdmissionReview object).
///
/// # Errors
/// [`ValidationErrors`] with the path of the first field serde could not read.
pub fn parse_json_value<T: DeserializeOwned>(
    value: &serde_json::Value,
) -> Result<T, ValidationErrors> {
    from_deserializer(value)
}

fn from_deserializer<'de, T, D>(deserializer: D) -> Result<T, ValidationErrors>
where
    T: DeserializeOwned,
    D: serde::Deserializer<'de>,
    D::Error: fmt::Display,
{
    serde_path_to_error::deserialize(deserializer).map_err(|err| {
        let path = err.path().to_string();
        let path = if path == "." {
            "(root)".to_string()
        } else {
            path
        };
        ValidationErrors(vec![FieldError::new(path, err.inner().to_string())])
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::types::{CustomProvider, MetricSpec, ScaleDown, TargetRef};

    fn valid() -> LLMScalerSpec {
        let target = TargetRef {
            api_version: "apps/v1".into(),
            kind: "Deployment".into(),
            name: "vllm".into(),
        };
        LLMScalerSpec {
            metrics: Some(vec![MetricSpec {
                name: None,
                query: "avg(vllm:num_requests_waiting)".into(),
                target: "0.5".into(),
                ..Default::default()
            }]),
            ..LLMScalerSpec::new(target, "http://prometheus.monitoring:9090", 1, 5)
        }
    }

    fn paths(spec: &LLMScalerSpec) -> Vec<String> {
        validate_spec(spec, &OperatorPolicy::default())
            .into_iter()
            .map(|e| e.path)
            .collect()
    }

    #[test]
    fn scale_to_zero_names_each_bad_field() {
        use crate::types::ScaleToZero;
        let mut spec = valid();
        spec.min_replicas = 0;
        spec.scale_to_zero = Some(ScaleToZero {
            hold_requests: Some(true),
            service: Some("vllm".into()),
            ..ScaleToZero::default()
        });
        assert!(paths(&spec).is_empty(), "{:?}", paths(&spec));
        spec.scale_to_zero = Some(ScaleToZero {
            hold_requests: Some(true),
            ..ScaleToZero::default()
        });
        assert_eq!(paths(&spec), ["spec.scaleToZero.service"]);
        spec.scale_to_zero = Some(ScaleToZero {
            hold_requests: Some(true),
            service: Some("Other_NS/svc".into()),
            port: Some("HTTP PORT".into()),
            max_held_requests: Some(0),
            hold_timeout_seconds: Some(601),
        });
        assert_eq!(
            paths(&spec),
            [
                "spec.scaleToZero.service",
                "spec.scaleToZero.port",
                "spec.scaleToZero.maxHeldRequests",
                "spec.scaleToZero.holdTimeoutSeconds",
            ]
        );
        // Held requests wake a fleet at zero: no "may never wake" warning with them.
        let mut at_zero = valid();
        at_zero.min_replicas = 0;
        let never_wakes = |s: &LLMScalerSpec| {
            crate::spec_warnings(s)
                .iter()
                .any(|w| w.contains("may never wake"))
        };
        assert!(never_wakes(&at_zero));
        at_zero.scale_to_zero = Some(ScaleToZero {
            hold_requests: Some(true),
            service: Some("vllm".into()),
            ..ScaleToZero::default()
        });
        assert!(!never_wakes(&at_zero));
        spec.max_replicas = 0;
        spec.scale_to_zero = Some(ScaleToZero {
            hold_requests: Some(true),
            service: Some("vllm".into()),
            ..ScaleToZero::default()
        });
        assert_eq!(paths(&spec), ["spec.scaleToZero.holdRequests"]);
    }

    #[test]
    fn headers_from_secrets_follow_the_header_rules() {
        use crate::types::{HeaderFromSecret, SecretKeyRef};
        let entry = |name: &str, secret: &str| HeaderFromSecret {
            name: name.to_owned(),
            secret_key_ref: SecretKeyRef {
                name: secret.to_owned(),
                key: "token".to_owned(),
            },
            value_prefix: None,
        };
        let mut spec = valid();
        spec.server_headers_from = Some(vec![entry("Authorization", "tok")]);
        // A prefix for a Secret holding the bare token (KEDA's bearerToken): visible ASCII only.
        let mut prefixed = entry("Authorization", "tok");
        prefixed.value_prefix = Some("Bearer ".to_owned());
        spec.server_headers_from = Some(vec![prefixed.clone()]);
        assert!(paths(&spec).is_empty(), "{:?}", paths(&spec));
        prefixed.value_prefix = Some("Bearer\r\n".to_owned());
        spec.server_headers_from = Some(vec![prefixed]);
        assert_eq!(paths(&spec), ["spec.serverHeadersFrom[0].valuePrefix"]);
        spec.server_headers_from = Some(vec![entry("Authorization", "tok")]);
        assert!(paths(&spec).is_empty(), "{:?}", paths(&spec));
        spec.server_headers = Some([("authorization".to_owned(), "x".to_owned())].into());
        spec.server_headers_from = Some(vec![
            entry("Authorization", "tok"),
            entry("X-Scope-OrgID", "org"),
            entry("X-Api-Key", ""),
        ]);
        assert_eq!(
            paths(&spec),
            vec![
                "spec.serverHeadersFrom[0].name",
                "spec.serverHeadersFrom[1].name",
                "spec.serverHeadersFrom[2].secretKeyRef.name",
            ]
        );
        let restricted = OperatorPolicy {
            restrict_secret_access: true,
            operator_namespace: Some("ops".to_owned()),
            ..OperatorPolicy::default()
        };
        assert_eq!(validate_namespace_rules(&spec, "ops", &restricted), vec![]);
        assert_eq!(
            validate_namespace_rules(&spec, "team-a", &restricted)[0].path,
            "spec.serverHeadersFrom"
        );
        assert_eq!(
            validate_namespace_rules(&spec, "team-a", &OperatorPolicy::default()),
            vec![]
        );
    }

    #[test]
    fn replica_cap_bounds_max_replicas() {
        let mut spec = valid();
        spec.max_replicas = 100;
        let capped = OperatorPolicy {
            max_replicas_cap: Some(64),
            ..OperatorPolicy::default()
        };
        let errors = validate_spec(&spec, &capped);
        assert_eq!(errors.len(), 1, "{errors:?}");
        assert_eq!(errors[0].path, "spec.maxReplicas");
        assert!(errors[0].message.contains("replica cap 64"), "{errors:?}");
        spec.max_replicas = 64;
        assert!(validate_spec(&spec, &capped).is_empty());
    }

    #[test]
    fn the_operator_minimum_sync_period_refuses_faster_periods_naming_the_field() {
        let mut spec = valid();
        spec.sync_period_seconds = Some(1);
        spec.retry_period_seconds = Some(4);
        let floor = OperatorPolicy {
            min_sync_period_seconds: crate::policy::DEFAULT_MIN_SYNC_PERIOD_SECONDS,
            ..OperatorPolicy::default()
        };
        let errors = validate_spec(&spec, &floor);
        let paths: Vec<&str> = errors.iter().map(|e| e.path.as_str()).collect();
        assert_eq!(
            paths,
            ["spec.syncPeriodSeconds", "spec.retryPeriodSeconds"],
            "{errors:?}"
        );
        assert!(
            errors[0].message.contains(
                "1 is below the operator's minimum of 5 seconds (--min-sync-period-seconds)"
            ),
            "{errors:?}"
        );
        // Unset periods take their defaults (15 s, 10 s), above the minimum.
        spec.sync_period_seconds = None;
        spec.retry_period_seconds = Some(5);
        assert!(validate_spec(&spec, &floor).is_empty());
        // Without the operator's minimum, 1 s stays valid (the schema's own bound).
        spec.sync_period_seconds = Some(1);
        assert!(validate_spec(&spec, &OperatorPolicy::default()).is_empty());
    }

    #[test]
    fn capacity_and_startup_refuse_bad_input_naming_the_field() {
        let mut spec = valid();
        spec.capacity = Some(crate::Capacity {
            arrival_rate_query: " ".into(),
            replica_requests_per_second: "0".into(),
            max_queue_wait_seconds: Some("-1".into()),
            backlog_query: Some(String::new()),
            backlog_seconds: Some(0),
        });
        spec.startup = Some(crate::Startup {
            initial_seconds: Some(-5),
            window_multiple: Some("25".into()),
            count_starting_replicas: None,
        });
        assert_eq!(
            paths(&spec),
            [
                "spec.capacity.arrivalRateQuery",
                "spec.capacity.backlogQuery",
                "spec.capacity.replicaRequestsPerSecond",
                "spec.capacity.maxQueueWaitSeconds",
                "spec.capacity.backlogSeconds",
                "spec.startup.initialSeconds",
                "spec.startup.windowMultiple",
            ]
        );
        spec.capacity = Some(crate::Capacity {
            arrival_rate_query: "sum(rate(x[1m]))".into(),
            replica_requests_per_second: "4.5".into(),
            max_queue_wait_seconds: Some("0.5".into()),
            backlog_query: Some("sum(w)".into()),
            backlog_seconds: Some(60),
        });
        spec.startup = Some(crate::Startup {
            initial_seconds: Some(90),
            window_multiple: Some("2".into()),
            count_starting_replicas: Some(true),
        });
        assert!(paths(&spec).is_empty(), "{:?}", paths(&spec));
        spec.metric_provider = Some(MetricProvider::Custom);
        assert!(paths(&spec).contains(&"spec.capacity".to_owned()));
        assert!(parse_window_multiple("abc").is_err());
        assert!(parse_positive("2%").is_err());
    }

    #[test]
    fn valid_spec_has_no_errors() {
        assert_eq!(validate_spec(&valid(), &OperatorPolicy::default()), vec![]);
    }

    fn schedule(start: &str, duration: Option<i32>, floor: Option<i32>) -> crate::ScheduleSpec {
        crate::ScheduleSpec {
            name: "warm".into(),
            start: start.into(),
            end: None,
            duration_seconds: duration,
            time_zone: Some("Europe/Berlin".into()),
            min_replicas: floor,
            max_replicas: None,
        }
    }

    #[test]
    fn schedules_and_scale_up_refuse_bad_input_naming_the_field() {
        let mut spec = valid();
        spec.max_replicas = 5;
        let mut bad_zone = schedule("0 8 * * Mon-Fri", Some(3600), Some(2));
        bad_zone.time_zone = Some("Europe/Nowhere".into());
        spec.schedules = Some(vec![
            schedule("0 8 * * Mon-Fri", Some(43_200), Some(4)), // valid
            schedule("0 25 * * *", Some(3600), Some(2)),        // hour 25
            bad_zone,
            schedule("0 8 * * *", Some(3600), Some(6)), // floor above maxReplicas
            schedule("0 8 * * *", None, Some(2)),       // no end, no duration
            schedule("0 8 * * *", Some(3600), None),    // neither floor nor ceiling
        ]);
        spec.scale_up = Some(crate::ScaleUp {
            policies: Some(vec![crate::ScaleUpPolicy {
                type_: crate::ScaleUpPolicyType::Pods,
                value: 4,
                period_seconds: 0,
            }]),
            select_policy: None,
            tolerance: Some("10%".into()),
        });
        let got = paths(&spec);
        let mut want = vec![
            "spec.schedules[1].name",
            "spec.schedules[1].start",
            "spec.schedules[2].name",
            "spec.schedules[2].timeZone",
            "spec.schedules[3].name",
            "spec.schedules[3].minReplicas",
            "spec.schedules[4].name",
            "spec.schedules[4].end",
            "spec.schedules[5].name",
            "spec.schedules[5]",
            "spec.scaleUp.policies[0].periodSeconds",
            "spec.scaleUp.tolerance",
        ];
        let mut got_sorted = got.clone();
        got_sorted.sort();
        want.sort_unstable();
        assert_eq!(
            got_sorted,
            want,
            "{:?}",
            validate_spec(&spec, &OperatorPolicy::default())
        );
        assert_eq!(parse_tolerance("0.1"), Ok(0.1));
        assert!(parse_tolerance("1").is_err());
        assert!(parse_tolerance("-0.1").is_err());
    }

    #[test]
    fn refused_targets_of_the_spec_table() {
        for raw in [
            "80%",
            "0",
            "-1",
            "NaN",
            "abc",
            "",
            "inf",
            "-Infinity",
            "0.0",
        ] {
            assert!(parse_target(raw).is_err(), "{raw:?} must be refused");
        }
        assert_eq!(parse_target("0.8"), Ok(0.8));
        assert_eq!(parse_target("80"), Ok(80.0));
        assert_eq!(parse_target("1e-3"), Ok(0.001));
    }

    #[test]
    fn percent_target_message_names_the_field_and_the_scale() {
        let mut spec = valid();
        spec.metrics = Some(vec![
            MetricSpec {
                name: Some("queue".into()),
                query: "avg(q)".into(),
                target: "2".into(),
                ..Default::default()
            },
            MetricSpec {
                name: Some("kv".into()),
                query: "avg(kv)".into(),
                target: "80%".into(),
                ..Default::default()
            },
        ]);
        let errors = validate_spec(&spec, &OperatorPolicy::default());
        assert_eq!(errors.len(), 1);
        let text = errors[0].to_string();
        assert!(
            text.starts_with(
                "spec.metrics[1].target: \"80%\" is not a number; targets are plain numbers on the query's own scale"
            ),
            "{text}"
        );
    }

    #[test]
    fn every_violation_is_listed() {
        let mut spec = valid();
        spec.target_ref.name = String::new();
        spec.target_ref.api_version = "apps/v1/extra".into();
        spec.server_address = "prometheus:9090".into();
        spec.min_replicas = 6;
        spec.sync_period_seconds = Some(0);
        spec.metrics = Some(vec![MetricSpec {
            name: None,
            query: " ".into(),
            target: "abc".into(),
            ..Default::default()
        }]);
        spec.scale_down = Some(ScaleDown {
            stabilization_window_seconds: Some(-1),
            max_step_replicas: Some(-2),
            behavior: None,
            deletion_cost_query: Some(String::new()),
            drain: None,
        });
        assert_eq!(
            paths(&spec),
            vec![
                "spec.targetRef.name",
                "spec.targetRef.apiVersion",
                "spec.serverAddress",
                "spec.minReplicas",
                "spec.syncPeriodSeconds",
                "spec.metrics[0].query",
                "spec.metrics[0].target",
                "spec.scaleDown.stabilizationWindowSeconds",
                "spec.scaleDown.maxStepReplicas",
                "spec.scaleDown.deletionCostQuery",
            ]
        );
    }

    #[test]
    fn drain_needs_a_deployment_cache_aware_and_bounded_seconds() {
        use crate::types::{Drain, ScaleDownBehavior};
        let mut spec = valid();
        spec.scale_down = Some(ScaleDown {
            drain: Some(Drain::default()),
            ..ScaleDown::default()
        });
        assert_eq!(paths(&spec), Vec::<String>::new());
        spec.target_ref.api_version = "leaderworkerset.x-k8s.io/v1".into();
        spec.target_ref.kind = "LeaderWorkerSet".into();
        let errors = validate_spec(&spec, &OperatorPolicy::default());
        assert_eq!(errors.len(), 1, "{errors:?}");
        assert_eq!(errors[0].path, "spec.scaleDown.drain");
        assert!(
            errors[0]
                .message
                .contains("apps/v1 Deployment, not leaderworkerset.x-k8s.io/v1 LeaderWorkerSet")
        );
        let mut spec = valid();
        spec.scale_down = Some(ScaleDown {
            behavior: Some(ScaleDownBehavior::None),
            drain: Some(Drain {
                drain_seconds: Some(0),
                in_flight_query: Some(" ".into()),
            }),
            ..ScaleDown::default()
        });
        assert_eq!(
            paths(&spec),
            vec![
                "spec.scaleDown.drain",
                "spec.scaleDown.drain.drainSeconds",
                "spec.scaleDown.drain.inFlightQuery",
            ]
        );
        if let Some(Some(drain)) = spec.scale_down.as_mut().map(|s| s.drain.as_mut()) {
            drain.drain_seconds = Some(3601);
        }
        assert!(paths(&spec).contains(&"spec.scaleDown.drain.drainSeconds".to_string()));
    }

    #[test]
    fn negative_bounds_are_refused() {
        let mut spec = valid();
        spec.min_replicas = -1;
        spec.max_replicas = -1;
        assert_eq!(paths(&spec), vec!["spec.minReplicas", "spec.maxReplicas"]);
    }

    #[test]
    fn zero_bounds_are_allowed() {
        let mut spec = valid();
        spec.min_replicas = 0;
        spec.max_replicas = 0;
        assert_eq!(paths(&spec), Vec::<String>::new());
    }

    #[test]
    fn prometheus_needs_metrics() {
        let mut spec = valid();
        spec.metrics = Some(vec![]);
        assert_eq!(paths(&spec), vec!["spec.metrics"]);
        spec.metrics = None;
        assert_eq!(paths(&spec), vec!["spec.metrics"]);
    }

    #[test]
    fn custom_needs_custom_provider_and_not_metrics() {
        let mut spec = valid();
        spec.metric_provider = Some(MetricProvider::Custom);
        spec.metrics = None;
        assert_eq!(paths(&spec), vec!["spec.customProvider"]);
        spec.custom_provider = Some(CustomProvider {
            service_id: String::new(),
            ..Default::default()
        });
        assert_eq!(paths(&spec), vec!["spec.customProvider.serviceId"]);
        spec.custom_provider = Some(CustomProvider {
            service_id: "llama".into(),
            ..Default::default()
        });
        assert_eq!(paths(&spec), Vec::<String>::new());
    }

    #[test]
    fn duplicate_metric_names_are_refused() {
        let mut spec = valid();
        let metric = MetricSpec {
            name: Some("queue".into()),
            query: "avg(q)".into(),
            target: "1".into(),
            ..Default::default()
        };
        spec.metrics = Some(vec![metric.clone(), metric]);
        assert_eq!(paths(&spec), vec!["spec.metrics[1].name"]);
    }

    #[test]
    fn api_versions() {
        for ok in [
            "v1",
            "apps/v1",
            "leaderworkerset.x-k8s.io/v1",
            "x.io/v2beta1",
        ] {
            assert!(is_api_version(ok), "{ok}");
        }
        for bad in [
            "apps",
            "apps/",
            "/v1",
            "apps/v1/x",
            "Apps/v1",
            "apps/1",
            "apps/v0",
            "v1gamma1",
        ] {
            assert!(!is_api_version(bad), "{bad}");
        }
    }

    #[test]
    fn header_rules_never_echo_the_value() {
        let mut spec = valid();
        spec.server_headers = Some(
            [
                ("Authorization".to_string(), "Bearer se\ncret".to_string()),
                ("bad name".to_string(), "x".to_string()),
            ]
            .into_iter()
            .collect(),
        );
        let errors = validate_spec(&spec, &OperatorPolicy::default());
        assert_eq!(errors.len(), 2);
        assert!(errors.iter().all(|e| !e.to_string().contains("cret")));
    }

    #[test]
    fn type_errors_carry_the_path() {
        let yaml = "apiVersion: autoscaling.modelsphere.dev/v1alpha1\nkind: LLMScaler\nmetadata: {name: x}\nspec:\n  targetRef: {apiVersion: apps/v1, kind: Deployment, name: d}\n  serverAddress: http://p:9090\n  minReplicas: 1\n  maxReplicas: 2\n  metricProvider: Datadog\n";
        let err = parse_llmscaler_yaml(yaml).expect_err("unknown provider");
        assert_eq!(err.0[0].path, "spec.metricProvider");
        assert!(err.0[0].message.contains("Datadog"), "{}", err.0[0].message);
    }

    fn metric(value: serde_json::Value) -> MetricSpec {
        serde_json::from_value(value).expect("metric")
    }

    fn errors_of(metrics: Vec<MetricSpec>) -> Vec<String> {
        let mut spec = valid();
        spec.metrics = Some(metrics);
        validate_spec(&spec, &OperatorPolicy::default())
            .into_iter()
            .map(|e| e.to_string())
            .collect()
    }

    #[test]
    fn runtime_signals_and_guardrails_are_checked_naming_the_field() {
        let queue =
            metric(serde_json::json!({"runtime": "vllm", "signal": "waiting", "target": "3"}));
        let ttft = metric(serde_json::json!({
            "name": "ttft", "runtime": "vllm", "signal": "ttftP90", "role": "Guardrail",
            "coverage": "0.75", "scrapeIntervalSeconds": 15, "target": "2"
        }));
        assert_eq!(
            errors_of(vec![queue.clone(), ttft.clone()]),
            Vec::<String>::new()
        );
        let per_pod = metric(serde_json::json!({
            "name": "kv", "query": "max by (pod) (kv)", "perPod": true, "coverage": "1", "target": "0.8"
        }));
        assert_eq!(errors_of(vec![per_pod]), Vec::<String>::new());

        let cases: Vec<(serde_json::Value, &str)> = vec![
            (
                serde_json::json!({"runtime": "tgi", "signal": "kvCacheUsage", "target": "1"}),
                "spec.metrics[0].signal: runtime tgi does not publish kvCacheUsage: TGI publishes no KV-cache gauge; use signal running (tgi_batch_current_size) with a target below the server's --max-batch-size",
            ),
            (
                serde_json::json!({"runtime": "vllm", "target": "1"}),
                "spec.metrics[0].signal: required with runtime: waiting, running, kvCacheUsage or ttftP90",
            ),
            (
                serde_json::json!({"signal": "waiting", "target": "1"}),
                "spec.metrics[0].runtime: required with signal: vllm, sglang, llamacpp or tgi",
            ),
            (
                serde_json::json!({"query": "avg(x)", "runtime": "vllm", "signal": "waiting", "target": "1"}),
                "spec.metrics[0].query: set either query, or runtime and signal, not both",
            ),
            (
                serde_json::json!({"query": "sum(x)", "perPod": true, "target": "1"}),
                "spec.metrics[0].query: perPod needs one series per pod, each with a `pod` label, but `sum(...)` without `by (pod)` drops the `pod` label; write `sum by (pod) (...)` (docs/signals.md#per-pod-queries)",
            ),
            (
                serde_json::json!({"runtime": "vllm", "signal": "waiting", "coverage": "0", "target": "1"}),
                "spec.metrics[0].coverage: \"0\" is not a share in (0, 1] of the Ready pods, e.g. \"0.5\" (no % suffix)",
            ),
            (
                serde_json::json!({"query": "avg(x)", "coverage": "0.5", "target": "1"}),
                "spec.metrics[0].coverage: applies to per-pod metrics only (runtime and signal, or perPod: true)",
            ),
            (
                serde_json::json!({"query": "avg(x)", "scrapeIntervalSeconds": 15, "target": "1"}),
                "spec.metrics[0].scrapeIntervalSeconds: applies to runtime signals only (a perPod query sets its own windows)",
            ),
        ];
        for (raw, want) in cases {
            let errors = errors_of(vec![metric(raw.clone())]);
            assert_eq!(errors, vec![want.to_owned()], "{raw}");
        }
        // A guardrail without a usable target, and a spec of guardrails only.
        let mut no_target = ttft.clone();
        no_target.target = String::new();
        let errors = errors_of(vec![queue, no_target]);
        assert_eq!(errors.len(), 1, "{errors:?}");
        assert!(
            errors[0].starts_with("spec.metrics[1].target: a guardrail needs a target"),
            "{errors:?}"
        );
        let errors = errors_of(vec![ttft.clone()]);
        assert_eq!(errors.len(), 1, "{errors:?}");
        assert!(
            errors[0].starts_with("spec.metrics: every metric is a Guardrail"),
            "{errors:?}"
        );
        // Guardrails only next to the capacity recommender: it sizes, they protect.
        let mut spec = valid();
        spec.metrics = Some(vec![ttft]);
        spec.capacity = Some(crate::Capacity {
            arrival_rate_query: "sum(rate(vllm:request_success_total[1m]))".into(),
            replica_requests_per_second: "4.5".into(),
            max_queue_wait_seconds: None,
            backlog_query: None,
            backlog_seconds: None,
        });
        let errors = validate_spec(&spec, &OperatorPolicy::default());
        assert!(errors.is_empty(), "{errors:?}");
        // Unknown runtime or signal: refused by deserialization with the path.
        let text = r#"{"apiVersion":"autoscaling.modelsphere.dev/v1alpha1","kind":"LLMScaler",
            "metadata":{"name":"x"},"spec":{"targetRef":{"apiVersion":"apps/v1","kind":"Deployment","name":"v"},
            "serverAddress":"http://p:9090","minReplicas":1,"maxReplicas":2,
            "metrics":[{"runtime":"triton","signal":"waiting","target":"1"}]}}"#;
        let err = parse_llmscaler_yaml(text).expect_err("unknown runtime");
        assert_eq!(err.0[0].path, "spec.metrics[0].runtime");
    }
}
