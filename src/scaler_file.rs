//! Reading an LLMScaler manifest from a file the way an apply would treat it: parsed with
//! field paths on type errors, defaulted (docs/resource.md) and validated (docs/admission.md). Used
//! by `simulate`
//! and `probe`.

use std::path::Path;

use llmscaler_api::{FieldError, LLMScaler, ValidationErrors, apply_defaults, check_spec};

/// Why a manifest file was not accepted.
#[derive(Debug, thiserror::Error)]
pub enum ScalerFileError {
    /// The file could not be read.
    #[error("cannot read {path}: {source}")]
    Read {
        /// The path given.
        path: String,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
    /// The manifest is not an LLMScaler or breaks the admission rules; one line per field.
    #[error("{path} is not a valid LLMScaler:\n{errors}")]
    Invalid {
        /// The path given.
        path: String,
        /// Every violation with its field path.
        errors: ValidationErrors,
    },
}

/// Reads, parses, defaults and validates the LLMScaler in `path` (YAML or JSON).
///
/// # Errors
/// [`ScalerFileError::Read`] when the file cannot be read, [`ScalerFileError::Invalid`] with
/// every field-path violation (including a wrong `kind`/`apiVersion`) otherwise.
pub fn load_scaler(path: &Path) -> Result<LLMScaler, ScalerFileError> {
    let display = path.display().to_string();
    let text = std::fs::read_to_string(path).map_err(|source| ScalerFileError::Read {
        path: display.clone(),
        source,
    })?;
    let invalid = |errors| ScalerFileError::Invalid {
        path: display.clone(),
        errors,
    };
    check_kind(&text).map_err(invalid)?;
    let mut scaler = llmscaler_api::validation::parse_llmscaler_yaml(&text).map_err(invalid)?;
    apply_defaults(&mut scaler.spec);
    check_spec(&scaler.spec, &llmscaler_api::OperatorPolicy::default()).map_err(invalid)?;
    Ok(scaler)
}

fn check_kind(text: &str) -> Result<(), ValidationErrors> {
    #[derive(serde::Deserialize)]
    #[serde(rename_all = "camelCase")]
    struct TypeMeta {
        api_version: Option<String>,
        kind: Option<String>,
    }
    let meta: TypeMeta = serde_yaml::from_str(text).map_err(|err| {
        ValidationErrors(vec![FieldError::new(
            "(root)",
            format!("not a YAML or JSON object: {err}"),
        )])
    })?;
    let mut errors = Vec::new();
    let expected_api = llmscaler_api::names::api_version();
    let expected_kind = llmscaler_api::names::kind();
    if meta.api_version.as_deref() != Some(expected_api.as_ref()) {
        errors.push(FieldError::new(
            "apiVersion",
            format!(
                "{:?} must be {expected_api:?}",
                meta.api_version.unwrap_or_default()
            ),
        ));
    }
    if meta.kind.as_deref() != Some(expected_kind.as_ref()) {
        errors.push(FieldError::new(
            "kind",
            format!(
                "{:?} must be {expected_kind:?}",
                meta.kind.unwrap_or_default()
            ),
        ));
    }
    if errors.is_empty() {
        Ok(())
    } else {
        Err(ValidationErrors(errors))
    }
}
