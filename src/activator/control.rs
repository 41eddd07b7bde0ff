//! The activator's control API, spoken by the operator (docs/scaling.md#holding-requests-while-waking-from-zero):
//! - `PUT /v1/services/{namespace}/{service}` with a [`HoldConfig`]: hold that Service's
//!   requests; answers the [`Registered`] port the operator's EndpointSlice points at (the same
//!   port for the same Service while the activator runs);
//! - `DELETE /v1/services/{namespace}/{service}`: stop holding it;
//! - `GET /v1/held?since=SEQ`: a long poll that answers at once when the [`HeldReport`]'s
//!   sequence differs from `SEQ` (a request was held or released since, or the activator
//!   restarted), else after
//!   [`LONG_POLL`]: the operator learns of the first held request without a Prometheus scrape.

use std::time::Duration;

use serde::{Deserialize, Serialize};

/// How long `GET /v1/held` waits for a change before it answers with the current report.
pub const LONG_POLL: Duration = Duration::from_secs(25);

/// What the operator asks the activator to hold for one Service (from `spec.scaleToZero`).
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct HoldConfig {
    /// The Service port's name (`""`: the unnamed port).
    pub port: String,
    /// Requests held at once at most (1 or more).
    pub max_held_requests: u32,
    /// Seconds a request is held at most (1 or more).
    pub hold_timeout_seconds: u32,
}

/// The activator's answer to a registration.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct Registered {
    /// The port the activator listens on for this Service (the operator's EndpointSlice port).
    pub listen_port: u16,
}

/// One held Service in a [`HeldReport`].
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct HeldService {
    /// The Service's namespace.
    pub namespace: String,
    /// The Service's name.
    pub service: String,
    /// The activator's port for it.
    pub listen_port: u16,
    /// Requests held now.
    pub held: u64,
    /// Requests held since the activator started.
    pub held_total: u64,
    /// Requests refused (queue full) since the activator started.
    pub refused_total: u64,
}

/// The answer of `GET /v1/held`.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct HeldReport {
    /// Grows at every hold, release, time-out or registration; pass it back as `since`.
    pub seq: u64,
    /// Every registered Service.
    pub services: Vec<HeldService>,
}

/// The query of `GET /v1/held`.
#[derive(Deserialize, Debug, Default)]
pub(crate) struct Since {
    /// The last sequence the caller saw (absent: answer at once).
    pub since: Option<u64>,
}

/// Why a registration is refused: the path's namespace or Service is not a DNS label, or the
/// config is out of range.
pub(crate) fn check_registration(
    namespace: &str,
    service: &str,
    config: &HoldConfig,
) -> Result<(), String> {
    let label = |s: &str| {
        !s.is_empty()
            && s.len() <= 63
            && s.bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
    };
    if !label(namespace) {
        return Err(format!("namespace {namespace:?} is not a DNS label"));
    }
    if !label(service) {
        return Err(format!("service {service:?} is not a DNS label"));
    }
    if config.max_held_requests == 0 || config.max_held_requests > 10_000 {
        return Err(format!(
            "maxHeldRequests {} must be 1 to 10000",
            config.max_held_requests
        ));
    }
    if config.hold_timeout_seconds == 0 || config.hold_timeout_seconds > 600 {
        return Err(format!(
            "holdTimeoutSeconds {} must be 1 to 600",
            config.hold_timeout_seconds
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn registrations_are_checked_before_anything_listens() {
        let config = HoldConfig {
            port: String::new(),
            max_held_requests: 10,
            hold_timeout_seconds: 60,
        };
        assert!(check_registration("team-a", "vllm", &config).is_ok());
        assert!(check_registration("../kube-system", "vllm", &config).is_err());
        assert!(check_registration("team-a", "", &config).is_err());
        let zero = HoldConfig {
            max_held_requests: 0,
            ..config.clone()
        };
        assert!(check_registration("team-a", "vllm", &zero).is_err());
        let long = HoldConfig {
            hold_timeout_seconds: 601,
            ..config
        };
        assert!(check_registration("team-a", "vllm", &long).is_err());
    }
}
