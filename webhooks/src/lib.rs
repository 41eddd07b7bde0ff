//! Admission webhook for LLMScaler (issue 5): placeholder until the handlers land.
