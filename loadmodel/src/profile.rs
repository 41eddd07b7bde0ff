//! A model profile: the per-replica parameters of the load model read from a file, so `simulate`,
//! `backtest` and the benchmarks can replay another model, GPU or runtime than the defaults of
//! docs/load-model.md (an 8B model on one H100-class GPU).
//!
//! The file is YAML or JSON (JSON is YAML), with camelCase keys; a key left out keeps the
//! default, an unknown key is refused (a typo must not silently keep a default):
//!
//! ```yaml
//! maxNumSeqs: 32                 # sequences in the running batch at most
//! kvCapacityTokens: 125000       # KV-cache size, tokens
//! prefillTokensPerSecond: 3000   # prompt processing rate while prefilling
//! prefillChunkTokens: 2048       # prompt tokens per step at most
//! stepBaseSeconds: 0.02          # fixed part of a step
//! stepPerSeqSeconds: 0.0007      # step time added per running sequence
//! stepPerNewSeqSeconds: 0         # step time added per sequence starting its prefill
//! ```
//!
//! The TTFT objective and the termination grace are not part of a profile: they belong to the
//! run (`simulate --slo-ttft-seconds`, `--termination-grace-seconds`), not to the model.

use serde::{Deserialize, Serialize};

use crate::replica::Params;

/// The model part of [`Params`], as written in a profile file. Units as in [`Params`].
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields, default)]
pub struct Profile {
    /// Most sequences running at once (≥ 1).
    pub max_num_seqs: usize,
    /// KV-cache size, tokens (≥ 1).
    pub kv_capacity_tokens: u64,
    /// Prompt processing rate while prefilling, tokens per second (> 0).
    pub prefill_tokens_per_second: f64,
    /// Prompt tokens processed per step at most (≥ 1).
    pub prefill_chunk_tokens: u32,
    /// Fixed part of a step, seconds (≥ 0).
    pub step_base_seconds: f64,
    /// Step time added per running sequence, seconds (≥ 0).
    pub step_per_seq_seconds: f64,
    /// Step time added per sequence that starts its prefill in the step, seconds (≥ 0).
    pub step_per_new_seq_seconds: f64,
}

impl Default for Profile {
    fn default() -> Self {
        Self::of(&Params::default())
    }
}

/// Why a profile cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum ProfileError {
    /// The file could not be read.
    #[error("cannot read the model profile {path}: {source}")]
    Read {
        /// The file.
        path: String,
        /// The I/O error.
        source: std::io::Error,
    },
    /// The text is not a profile (syntax, an unknown key, a wrong type).
    #[error("the model profile {path} is not valid: {reason}")]
    Parse {
        /// The file (or `<text>`).
        path: String,
        /// The parser's message (names the key and line).
        reason: String,
    },
    /// A value is out of its range.
    #[error("the model profile {path}: {field} must be {rule}, got {value}")]
    Range {
        /// The file (or `<text>`).
        path: String,
        /// The camelCase key.
        field: &'static str,
        /// What it must be.
        rule: &'static str,
        /// What it was.
        value: String,
    },
}

impl Profile {
    /// The profile part of `params`.
    pub fn of(params: &Params) -> Self {
        Self {
            max_num_seqs: params.max_num_seqs,
            kv_capacity_tokens: params.kv_capacity_tokens,
            prefill_tokens_per_second: params.prefill_tokens_per_s,
            prefill_chunk_tokens: params.prefill_chunk_tokens,
            step_base_seconds: params.step_base_s,
            step_per_seq_seconds: params.step_per_seq_s,
            step_per_new_seq_seconds: params.step_per_new_seq_s,
        }
    }

    /// `base` with this profile's model parameters (the run's `drain_s` and `slo_ttft_s` kept).
    pub fn apply(&self, base: Params) -> Params {
        Params {
            max_num_seqs: self.max_num_seqs,
            kv_capacity_tokens: self.kv_capacity_tokens,
            prefill_tokens_per_s: self.prefill_tokens_per_second,
            prefill_chunk_tokens: self.prefill_chunk_tokens,
            step_base_s: self.step_base_seconds,
            step_per_seq_s: self.step_per_seq_seconds,
            step_per_new_seq_s: self.step_per_new_seq_seconds,
            ..base
        }
    }

    /// Parses and checks a profile from YAML or JSON text; `path` names it in errors.
    ///
    /// # Errors
    /// [`ProfileError::Parse`] on syntax, unknown keys or wrong types; [`ProfileError::Range`]
    /// when a value is out of its range (zero sequences, a non-positive prefill rate, a negative
    /// or non-finite step time).
    pub fn parse(text: &str, path: &str) -> Result<Self, ProfileError> {
        let profile: Self = serde_yaml::from_str(text).map_err(|e| ProfileError::Parse {
            path: path.to_string(),
            reason: e.to_string(),
        })?;
        profile.check(path)?;
        Ok(profile)
    }

    /// Reads [`Profile::parse`] from a file.
    ///
    /// # Errors
    /// [`ProfileError::Read`] when the file cannot be read, else as [`Profile::parse`].
    pub fn from_file(path: &std::path::Path) -> Result<Self, ProfileError> {
        let shown = path.display().to_string();
        let text = std::fs::read_to_string(path).map_err(|source| ProfileError::Read {
            path: shown.clone(),
            source,
        })?;
        Self::parse(&text, &shown)
    }

    fn check(&self, path: &str) -> Result<(), ProfileError> {
        let range = |field, rule, value: String| ProfileError::Range {
            path: path.to_string(),
            field,
            rule,
            value,
        };
        if self.max_num_seqs == 0 {
            return Err(range("maxNumSeqs", "at least 1", "0".into()));
        }
        if self.kv_capacity_tokens == 0 {
            return Err(range("kvCapacityTokens", "at least 1", "0".into()));
        }
        if self.prefill_chunk_tokens == 0 {
            return Err(range("prefillChunkTokens", "at least 1", "0".into()));
        }
        let rate = self.prefill_tokens_per_second;
        if !(rate.is_finite() && rate > 0.0) {
            return Err(range(
                "prefillTokensPerSecond",
                "a finite number above 0",
                rate.to_string(),
            ));
        }
        for (field, value) in [
            ("stepBaseSeconds", self.step_base_seconds),
            ("stepPerSeqSeconds", self.step_per_seq_seconds),
            ("stepPerNewSeqSeconds", self.step_per_new_seq_seconds),
        ] {
            if !(value.is_finite() && value >= 0.0) {
                return Err(range(field, "a finite number ≥ 0", value.to_string()));
            }
        }
        if self.step_base_seconds + self.step_per_seq_seconds <= 0.0 {
            return Err(range(
                "stepBaseSeconds",
                "above 0 together with stepPerSeqSeconds (a step takes time)",
                "0".into(),
            ));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_partial_profile_keeps_the_other_defaults() {
        let p = Profile::parse("prefillTokensPerSecond: 3000\nmaxNumSeqs: 32\n", "<text>").unwrap();
        let params = p.apply(Params::default());
        assert_eq!(params.prefill_tokens_per_s, 3000.0);
        assert_eq!(params.max_num_seqs, 32);
        assert_eq!(
            params.kv_capacity_tokens,
            Params::default().kv_capacity_tokens
        );
        assert_eq!(params.slo_ttft_s, Params::default().slo_ttft_s);
    }

    #[test]
    fn json_is_accepted_and_round_trips() {
        let p = Profile::of(&Params::default());
        let text = serde_json::to_string(&p).unwrap();
        assert_eq!(Profile::parse(&text, "<text>").unwrap(), p);
    }

    #[test]
    fn an_unknown_key_is_refused_with_its_name() {
        let e = Profile::parse("prefilTokensPerSecond: 3000\n", "m.yaml").unwrap_err();
        let text = e.to_string();
        assert!(
            text.contains("m.yaml") && text.contains("prefilTokensPerSecond"),
            "{text}"
        );
    }

    #[test]
    fn out_of_range_values_name_the_field() {
        for (text, field) in [
            ("maxNumSeqs: 0", "maxNumSeqs"),
            ("prefillTokensPerSecond: -1", "prefillTokensPerSecond"),
            ("stepBaseSeconds: .nan", "stepBaseSeconds"),
            (
                "stepBaseSeconds: 0\nstepPerSeqSeconds: 0",
                "stepBaseSeconds",
            ),
        ] {
            let e = Profile::parse(text, "<text>").unwrap_err().to_string();
            assert!(e.contains(field), "{text}: {e}");
        }
    }
}
