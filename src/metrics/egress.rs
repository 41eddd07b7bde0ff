//! Connect-time egress check (`docs/security.md#egress`): the metric client resolves names
//! through [`PolicyResolver`], which drops every address the operator's egress policy refuses,
//! so a name that passed admission cannot be re-pointed (DNS rebinding) at a metadata service
//! or outside the allowed networks. IP literals never reach a resolver; the client checks them
//! before sending ([`super::Endpoint`]).

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;

use llmscaler_api::policy::EgressPolicy;
use reqwest::dns::{Addrs, Name, Resolve, Resolving};

/// Every address of a name was refused by the egress policy.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub(crate) struct Refused(pub String);

/// A `reqwest` resolver that resolves with the system resolver (`getaddrinfo`, through tokio)
/// and keeps only the addresses its egress policy allows.
#[derive(Clone, Debug, Default)]
pub(crate) struct PolicyResolver {
    egress: Arc<EgressPolicy>,
}

impl PolicyResolver {
    /// A resolver that keeps the addresses `egress` allows.
    pub(crate) fn new(egress: EgressPolicy) -> Self {
        Self {
            egress: Arc::new(egress),
        }
    }
}

impl Resolve for PolicyResolver {
    fn resolve(&self, name: Name) -> Resolving {
        let egress = self.egress.clone();
        Box::pin(async move {
            let host = name.as_str().to_owned();
            let resolved = tokio::net::lookup_host((host.as_str(), 0)).await?;
            let (allowed, refused) = filter(&egress, &host, resolved.map(|a| a.ip()));
            if allowed.is_empty() {
                let why = refused.unwrap_or_else(|| format!("`{host}` resolved to no address"));
                return Err(Box::new(Refused(format!("egress policy: {why}")))
                    as Box<dyn std::error::Error + Send + Sync>);
            }
            let addrs: Addrs = Box::new(allowed.into_iter().map(|ip| SocketAddr::new(ip, 0)));
            Ok(addrs)
        })
    }
}

/// Splits the addresses `host` resolved to into those `policy` allows and the reason the first
/// refused one was refused.
pub fn filter(
    policy: &EgressPolicy,
    host: &str,
    ips: impl Iterator<Item = IpAddr>,
) -> (Vec<IpAddr>, Option<String>) {
    let mut allowed = Vec::new();
    let mut refused = None;
    for ip in ips {
        match policy.check_ip(ip) {
            Ok(()) => allowed.push(ip),
            Err(why) => {
                tracing::debug!(host, %ip, why, "resolved address refused by the egress policy");
                refused.get_or_insert(format!("`{host}` resolved to a refused address: {why}"));
            }
        }
    }
    (allowed, refused)
}
