//! Offline PromQL: the subset of `docs/promql.md` evaluated over sampled series, as Prometheus
//! would answer an instant query (used by `llmscaler simulate --requests`).
//!
//! Parsing is the `promql-parser` crate's; this module evaluates the tree. Supported: vector
//! selectors with `=`, `!=`, `=~`, `!~` matchers and `offset`; `sum`, `avg`, `min`, `max`, `count` with `by` /
//! `without`; `avg_over_time`, `min_over_time`, `max_over_time`, `sum_over_time`,
//! `count_over_time`, `last_over_time`; `rate`, `increase`; `histogram_quantile`; `vector`; `scalar`;
//! arithmetic (`+ - * / % ^`) and comparisons (with or without `bool`) between scalars and
//! vectors (one-to-one matching, `on` / `ignoring`); `and`, `or`, `unless`; parentheses and unary
//! minus. Anything else is [`PromqlError::Unsupported`] naming the construct.

pub mod eval;
mod functions;
pub mod selectors;
mod store;

pub use eval::{Value, evaluate, evaluate_single};
pub use store::{DEFAULT_LOOKBACK_MS, Labels, Point, Series, Store};

/// Why a query could not be evaluated.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum PromqlError {
    /// The query does not parse (the parser's message).
    #[error("query {query:?} does not parse: {message}")]
    Parse {
        /// The query.
        query: String,
        /// The parser's message.
        message: String,
    },
    /// A construct outside the supported subset (`docs/promql.md`).
    #[error("unsupported PromQL construct {construct}")]
    Unsupported {
        /// What was met, e.g. `function "quantile_over_time"` or `@ modifier`.
        construct: String,
    },
    /// An evaluation error Prometheus would also return (e.g. duplicate series in a match).
    #[error("evaluation failed: {0}")]
    Eval(String),
    /// The result is not one value (docs/providers.md#prometheus-provider): empty vector, several
    /// series or a matrix.
    #[error("{0}")]
    NotSingle(String),
}

/// Parses a query, returning the tree or [`PromqlError::Parse`].
///
/// # Errors
/// [`PromqlError::Parse`] with the parser's message.
pub fn parse(query: &str) -> Result<promql_parser::parser::Expr, PromqlError> {
    promql_parser::parser::parse(query).map_err(|message| PromqlError::Parse {
        query: query.to_string(),
        message,
    })
}

#[cfg(test)]
mod tests;
