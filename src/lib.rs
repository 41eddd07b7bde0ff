//! llmscaler

pub mod metrics;
