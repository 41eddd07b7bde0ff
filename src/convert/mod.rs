//! `llmscaler convert`: turns a KEDA `ScaledObject` ([`keda`]) or an `autoscaling/v2`
//! `HorizontalPodAutoscaler` ([`hpa`]) into an `LLMScaler`, defaulted and validated as an apply
//! would be. Every source field either maps to an equivalent, is recorded as a note (a mapping
//! with a caveat, printed on stderr), or is refused with the reason it has no equivalent
//! (`--lenient`: left out, with a warning). The field-by-field tables are in docs/migrate.md.

pub mod behavior;
pub mod hpa;
pub mod keda;

use std::collections::BTreeMap;
use std::fmt;
use std::path::PathBuf;
use std::process::ExitCode;

use crate::process::fail;

use llmscaler_api::{
    FieldError, LLMScaler, LLMScalerSpec, OperatorPolicy, apply_defaults, validate_spec,
};
use serde::Deserialize;
use serde_json::Value;

/// Exit status when the conversion was printed.
pub(crate) const EXIT_CONVERTED: u8 = 0;
/// Exit status for an unreadable file.
pub(crate) const EXIT_FAILURE: u8 = 1;
/// Exit status when a field has no equivalent (without `--lenient`), the input is not a
/// ScaledObject or HorizontalPodAutoscaler, or the result breaks an admission rule.
pub(crate) const EXIT_REFUSED: u8 = 2;

/// Command-line arguments of `llmscaler convert`.
#[derive(clap::Args, Debug, Clone)]
pub struct ConvertArgs {
    /// File holding one or more ScaledObject (keda.sh/v1alpha1) or HorizontalPodAutoscaler
    /// (autoscaling/v2) documents, YAML or JSON; `-` reads stdin. Other kinds are skipped.
    pub file: PathBuf,
    /// Leave out what has no equivalent (one warning per field on stderr) instead of refusing.
    #[arg(long)]
    pub lenient: bool,
    /// Prometheus base URL for `spec.serverAddress`: required for an HPA (it has none), and
    /// overrides the triggers' `serverAddress` of a ScaledObject.
    #[arg(long)]
    pub server_address: Option<String>,
    /// PromQL for an HPA metric name, `NAME=QUERY` (repeatable), instead of the query guessed
    /// from the Prometheus-adapter-style name.
    #[arg(long = "query", value_name = "NAME=QUERY")]
    pub queries: Vec<String>,
}

/// What the conversion may use besides the manifest.
#[derive(Clone, Debug, Default)]
pub struct Options {
    /// Leave out, with a warning, what has no equivalent.
    pub lenient: bool,
    /// `spec.serverAddress` to use (required for an HPA).
    pub server_address: Option<String>,
    /// PromQL per HPA metric name.
    pub queries: BTreeMap<String, String>,
}

/// One remark about one source field: `path: message`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Issue {
    /// Field path in the source manifest, e.g. `spec.triggers[1].type`.
    pub path: String,
    /// What has no equivalent and why, or how it was mapped.
    pub message: String,
}

impl fmt::Display for Issue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.path, self.message)
    }
}

/// Refusals and notes gathered while converting one document.
#[derive(Debug, Default)]
pub struct Findings {
    /// Fields with no equivalent.
    pub refused: Vec<Issue>,
    /// Fields mapped with a caveat, or dropped because they have no effect.
    pub notes: Vec<Issue>,
}

impl Findings {
    /// Records a field with no equivalent.
    pub fn refuse(&mut self, path: impl Into<String>, message: impl Into<String>) {
        self.refused.push(Issue {
            path: path.into(),
            message: message.into(),
        });
    }

    /// Records a caveat.
    pub fn note(&mut self, path: impl Into<String>, message: impl Into<String>) {
        self.notes.push(Issue {
            path: path.into(),
            message: message.into(),
        });
    }

    /// Refuses every key of `object` (at `path`) not in `known`.
    pub(crate) fn unknown_keys(&mut self, object: &Value, path: &str, known: &[&str]) {
        if let Some(map) = object.as_object() {
            for key in map.keys().filter(|k| !known.contains(&k.as_str())) {
                self.refuse(
                    format!("{path}.{key}"),
                    "unknown to convert, no equivalent known",
                );
            }
        }
    }
}

/// Why nothing was printed.
#[derive(Debug, thiserror::Error)]
pub(crate) enum ConvertError {
    /// A document is not YAML/JSON.
    #[error("document {index}: {source}")]
    Parse {
        /// 0-based document index.
        index: usize,
        /// The parser's error.
        #[source]
        source: serde_yaml::Error,
    },
    /// No ScaledObject or HorizontalPodAutoscaler in the input.
    #[error("no ScaledObject (keda.sh/v1alpha1) or HorizontalPodAutoscaler (autoscaling/v2) found")]
    NothingToConvert,
    /// Fields with no equivalent (without `--lenient`), one line each.
    #[error("{}", lines(.0))]
    Refused(Vec<Issue>),
}

fn lines(issues: &[Issue]) -> String {
    issues
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join("\n")
}

/// The converted scalers and the remarks to print on stderr.
#[derive(Debug)]
pub(crate) struct Converted {
    /// One LLMScaler per source document, defaulted.
    pub scalers: Vec<LLMScaler>,
    /// Caveats, and (under `--lenient`) the fields left out.
    pub warnings: Vec<Issue>,
}

impl Converted {
    /// The scalers as YAML documents separated by `---`.
    ///
    /// # Errors
    /// Only if serde_yaml cannot serialize a scaler (not expected).
    pub(crate) fn to_yaml(&self) -> Result<String, serde_yaml::Error> {
        let docs = self
            .scalers
            .iter()
            .map(serde_yaml::to_string)
            .collect::<Result<Vec<_>, _>>()?;
        Ok(docs.join("---\n"))
    }
}

/// What one source document converted to, before the admission checks.
pub struct Draft {
    /// `metadata` of the LLMScaler (name, namespace, labels, annotations).
    pub metadata: Value,
    /// The spec, not yet defaulted.
    pub spec: LLMScalerSpec,
}

/// Converts every ScaledObject and HorizontalPodAutoscaler of `text` (one or more YAML or JSON
/// documents).
///
/// # Errors
/// [`ConvertError::Parse`] for a document that does not parse, [`ConvertError::NothingToConvert`],
/// or [`ConvertError::Refused`] listing every field with no equivalent (without `--lenient`) and
/// every admission rule the result breaks (`spec.*` paths of the LLMScaler, prefixed `result`).
pub(crate) fn convert_text(text: &str, options: &Options) -> Result<Converted, ConvertError> {
    let mut docs = Vec::new();
    for (index, doc) in serde_yaml::Deserializer::from_str(text).enumerate() {
        let value =
            Value::deserialize(doc).map_err(|source| ConvertError::Parse { index, source })?;
        if !value.is_null() {
            docs.push(value);
        }
    }
    let mut sources = Vec::new();
    let mut skipped = Vec::new();
    for doc in &docs {
        let api_version = doc["apiVersion"].as_str().unwrap_or_default();
        let kind = doc["kind"].as_str().unwrap_or_default();
        let name = doc["metadata"]["name"].as_str().unwrap_or_default();
        match (api_version, kind) {
            ("keda.sh/v1alpha1", "ScaledObject") => sources.push((kind, name, doc)),
            (v, "HorizontalPodAutoscaler") if v.starts_with("autoscaling/") => {
                sources.push((kind, name, doc))
            }
            _ => skipped.push(Issue {
                path: format!("{kind} {name}"),
                message: format!("skipped ({api_version} {kind} is not converted)"),
            }),
        }
    }
    if sources.is_empty() {
        return Err(ConvertError::NothingToConvert);
    }
    let several = sources.len() > 1;
    let mut refused = Vec::new();
    let mut warnings = skipped;
    let mut scalers = Vec::new();
    for (kind, name, doc) in sources {
        let mut findings = Findings::default();
        let draft = if kind == "ScaledObject" {
            keda::convert(doc, options, &mut findings)
        } else {
            hpa::convert(doc, options, &mut findings)
        };
        let prefix = |issue: Issue| {
            if several {
                Issue {
                    path: format!("{kind} {name}: {}", issue.path),
                    message: issue.message,
                }
            } else {
                issue
            }
        };
        warnings.extend(findings.notes.into_iter().map(prefix));
        if options.lenient {
            warnings.extend(findings.refused.into_iter().map(|i| {
                prefix(Issue {
                    path: i.path,
                    message: format!("left out: {}", i.message),
                })
            }));
        } else {
            refused.extend(findings.refused.into_iter().map(prefix));
        }
        let mut spec = draft.spec;
        apply_defaults(&mut spec);
        let errors: Vec<FieldError> = validate_spec(&spec, &OperatorPolicy::default());
        refused.extend(errors.into_iter().map(|e| {
            prefix(Issue {
                path: format!("result {}", e.path),
                message: e.message,
            })
        }));
        for warning in llmscaler_api::spec_warnings(&spec) {
            warnings.push(prefix(Issue {
                path: "result".to_owned(),
                message: format!("admission would warn: {warning}"),
            }));
        }
        let mut scaler = LLMScaler::new("", spec);
        match serde_json::from_value(draft.metadata) {
            Ok(metadata) => scaler.metadata = metadata,
            Err(err) => refused.push(prefix(Issue {
                path: "metadata".to_owned(),
                message: err.to_string(),
            })),
        }
        scalers.push(scaler);
    }
    if !refused.is_empty() {
        return Err(ConvertError::Refused(refused));
    }
    Ok(Converted { scalers, warnings })
}

/// Runs `llmscaler convert`: the LLMScaler YAML on stdout, notes and warnings on stderr; exit
/// 0, 2 (a field with no equivalent, one line each, or nothing to convert) or 1 (I/O).
pub fn run(args: &ConvertArgs) -> ExitCode {
    let text = if args.file.as_os_str() == "-" {
        std::io::read_to_string(std::io::stdin())
    } else {
        std::fs::read_to_string(&args.file)
    };
    let text = match text {
        Ok(text) => text,
        Err(err) => {
            return fail(
                EXIT_FAILURE,
                &format!("cannot read {}: {err}", args.file.display()),
            );
        }
    };
    let mut queries = BTreeMap::new();
    for raw in &args.queries {
        match raw.split_once('=') {
            Some((name, query)) if !name.trim().is_empty() && !query.trim().is_empty() => {
                queries.insert(name.trim().to_owned(), query.trim().to_owned());
            }
            _ => {
                return fail(
                    EXIT_REFUSED,
                    &format!("--query {raw:?}: expected NAME=QUERY"),
                );
            }
        }
    }
    let options = Options {
        lenient: args.lenient,
        server_address: args.server_address.clone(),
        queries,
    };
    let converted = match convert_text(&text, &options) {
        Ok(converted) => converted,
        Err(ConvertError::Refused(issues)) => {
            for issue in issues {
                eprintln!("{issue}");
            }
            eprintln!(
                "error: not converted: the fields above have no equivalent (--lenient leaves them out)"
            );
            return ExitCode::from(EXIT_REFUSED);
        }
        Err(err) => return fail(EXIT_REFUSED, &err.to_string()),
    };
    for warning in &converted.warnings {
        eprintln!("warning: {warning}");
    }
    match converted.to_yaml() {
        Ok(yaml) => {
            print!("{yaml}");
            ExitCode::from(EXIT_CONVERTED)
        }
        Err(err) => fail(EXIT_FAILURE, &format!("cannot render YAML: {err}")),
    }
}

/// A scalar of a manifest as a string (`"5"`, `5` and `5.0` are all accepted by KEDA and the
/// HPA), for numbers given either way.
pub(crate) fn scalar_string(value: &Value) -> Option<String> {
    match value {
        Value::String(s) => Some(s.trim().to_owned()),
        Value::Number(n) => Some(n.to_string()),
        Value::Bool(b) => Some(b.to_string()),
        _ => None,
    }
}

/// An integer field given as a number or a numeric string, `None` when absent.
///
/// # Errors
/// A message when present but not an int32.
pub(crate) fn int_field(value: &Value) -> Result<Option<i32>, String> {
    if value.is_null() {
        return Ok(None);
    }
    scalar_string(value)
        .and_then(|s| s.parse::<i32>().ok())
        .map(Some)
        .ok_or_else(|| format!("{value} is not a whole number"))
}

/// A Kubernetes quantity (`"4"`, `4`, `"500m"`, `"1.5k"`) as a plain decimal string for
/// `spec.metrics[].target`.
///
/// # Errors
/// A message for a quantity this does not understand.
pub(crate) fn quantity(value: &Value) -> Result<String, String> {
    let raw = scalar_string(value).ok_or_else(|| format!("{value} is not a quantity"))?;
    let (number, factor) = match raw.char_indices().find(|(_, c)| c.is_ascii_alphabetic()) {
        None => (raw.as_str(), 1.0),
        Some((i, _)) => {
            let factor = match &raw[i..] {
                "m" => 1e-3,
                "k" => 1e3,
                "M" => 1e6,
                "G" => 1e9,
                "Ki" => 1024.0,
                "Mi" => 1024.0 * 1024.0,
                "Gi" => 1024.0 * 1024.0 * 1024.0,
                suffix => {
                    return Err(format!(
                        "quantity {raw:?}: suffix {suffix:?} is not supported"
                    ));
                }
            };
            (&raw[..i], factor)
        }
    };
    let parsed: f64 = number
        .parse()
        .map_err(|_| format!("quantity {raw:?} is not a number"))?;
    let value = parsed * factor;
    if !value.is_finite() {
        return Err(format!("quantity {raw:?} is not finite"));
    }
    Ok(format_number(value))
}

/// A number without a trailing `.0` (`4`, `0.5`).
pub(crate) fn format_number(value: f64) -> String {
    let text = format!("{value}");
    text.strip_suffix(".0").map(str::to_owned).unwrap_or(text)
}

/// A metric name usable in `spec.metrics[].name` and `simulate` columns: `:` and other
/// characters outside `[A-Za-z0-9_-]` become `_`.
pub(crate) fn metric_name(raw: &str) -> String {
    raw.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '_' || c == '-' {
                c
            } else {
                '_'
            }
        })
        .collect()
}

/// `metadata` for the LLMScaler from the source's: name, namespace and labels kept; the
/// annotations in `annotations` given as `(source key, target key)` mapped; other annotations
/// noted as dropped.
pub fn metadata(source: &Value, mapped: &[(&str, &str)], findings: &mut Findings) -> Value {
    let mut out = serde_json::Map::new();
    for key in ["name", "namespace", "labels"] {
        if let Some(v) = source.get(key).filter(|v| !v.is_null()) {
            out.insert(key.to_owned(), v.clone());
        }
    }
    let mut annotations = serde_json::Map::new();
    for (key, value) in source
        .get("annotations")
        .and_then(Value::as_object)
        .into_iter()
        .flatten()
    {
        match mapped.iter().find(|(from, _)| from == key) {
            Some((_, to)) if !to.is_empty() => {
                annotations.insert((*to).to_owned(), value.clone());
            }
            Some(_) => findings.refuse(
                format!("metadata.annotations.{key}"),
                "has no equivalent (the LLMScaler pause holds the current replicas)",
            ),
            None => findings.note(format!("metadata.annotations.{key}"), "dropped"),
        }
    }
    if !annotations.is_empty() {
        out.insert("annotations".to_owned(), Value::Object(annotations));
    }
    Value::Object(out)
}

/// The target of a `scaleTargetRef` (`apiVersion` default `apps/v1`, `kind` default
/// `Deployment`, as KEDA defaults them).
pub fn target_ref(value: &Value, path: &str, findings: &mut Findings) -> llmscaler_api::TargetRef {
    findings.unknown_keys(
        value,
        path,
        &["apiVersion", "kind", "name", "envSourceContainerName"],
    );
    if value.get("envSourceContainerName").is_some() {
        findings.note(
            format!("{path}.envSourceContainerName"),
            "dropped (llmscaler reads no container environment)",
        );
    }
    let name = value["name"].as_str().unwrap_or_default().to_owned();
    if name.is_empty() {
        findings.refuse(format!("{path}.name"), "is required");
    }
    llmscaler_api::TargetRef {
        api_version: value["apiVersion"].as_str().unwrap_or("apps/v1").to_owned(),
        kind: value["kind"].as_str().unwrap_or("Deployment").to_owned(),
        name,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantities() {
        assert_eq!(quantity(&Value::from(4)).as_deref(), Ok("4"));
        assert_eq!(quantity(&Value::from("500m")).as_deref(), Ok("0.5"));
        assert_eq!(quantity(&Value::from("1.5k")).as_deref(), Ok("1500"));
        assert_eq!(quantity(&Value::from("100.50")).as_deref(), Ok("100.5"));
        assert!(quantity(&Value::from("5x")).is_err());
    }

    #[test]
    fn metric_names() {
        assert_eq!(
            metric_name("vllm:num_requests_waiting"),
            "vllm_num_requests_waiting"
        );
    }
}
