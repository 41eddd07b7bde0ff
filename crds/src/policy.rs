//! The operator-wide policy a tenant's `LLMScaler` is held to (`docs/security.md`): where the
//! operator may send metric requests (egress allow-list), which `serverHeaders` are refused,
//! and an upper bound on `maxReplicas`. Pure: the webhook checks it at admission, the
//! controller again before every request and, for addresses, after DNS resolution.
//!
//! The policy is a value, built once from the `llmscaler run` / `llmscaler webhook` flags
//! (`--allowed-server-addresses`, `--allow-tenant-header`, `--max-replicas-cap`, the Helm values
//! `egress.allowedServerAddresses`, `egress.allowTenantHeader`, `maxReplicasCap`) and passed to
//! whoever checks against it: the webhook's and the controller's contexts, the metric client.
//! Commands without those flags (`probe`, `simulate`, `convert`) use
//! [`OperatorPolicy::default`].

use std::net::IpAddr;

use ipnet::IpNet;

/// Addresses refused whatever the allow-list says, unless a listed CIDR lies inside them:
/// cloud metadata services and link-local ranges (AWS, GCP, Azure, OpenStack use
/// `169.254.169.254`; Alibaba `100.100.100.200`; AWS' IPv6 metadata `fd00:ec2::254`), and the
/// "this host" network `0.0.0.0/8` / `::`.
pub(crate) const BLOCKED_NETWORKS: &[&str] = &[
    "169.254.0.0/16",
    "fe80::/10",
    "100.100.100.200/32",
    "fd00:ec2::254/128",
    "0.0.0.0/8",
    "::/128",
];

/// Host names refused whatever the allow-list says (metadata services reached by name).
pub(crate) const BLOCKED_HOSTS: &[&str] = &[
    "metadata.google.internal",
    "metadata.goog",
    "metadata",
    "instance-data",
    "instance-data.ec2.internal",
];

/// `serverHeaders` names refused always (lower case): hop-by-hop and framing headers that would
/// let a tenant reshape the request (`Range` pages through a body, `Host` reroutes a virtual
/// host), proxy routing headers, and the headers that unlock cloud metadata services.
pub(crate) const REFUSED_HEADERS: &[&str] = &[
    "host",
    "range",
    "if-range",
    "content-length",
    "transfer-encoding",
    "connection",
    "keep-alive",
    "proxy-connection",
    "proxy-authorization",
    "te",
    "trailer",
    "upgrade",
    "expect",
    "forwarded",
    "via",
    "x-real-ip",
    "x-http-method-override",
    "metadata",
    "metadata-flavor",
    "x-google-metadata-request",
    "x-aws-ec2-metadata-token",
    "x-aws-ec2-metadata-token-ttl-seconds",
];

/// `serverHeaders` name prefixes refused always (lower case).
pub(crate) const REFUSED_HEADER_PREFIXES: &[&str] = &["x-forwarded-", "x-original-", "x-envoy-"];

/// Tenancy headers of Mimir, Cortex, Loki and Thanos (lower case): refused unless the admin
/// allows them (`--allow-tenant-header`), since they choose whose data a shared server answers
/// with.
pub(crate) const TENANT_HEADERS: &[&str] = &["x-scope-orgid", "thanos-tenant"];

/// One allow-list entry.
#[derive(Clone, Debug, PartialEq, Eq)]
enum HostPattern {
    /// `*`: any host name.
    Any,
    /// `name`: exactly this host name (case-insensitive, without a trailing dot).
    Exact(String),
    /// `*.suffix`: any name ending in `.suffix` (not `suffix` itself).
    Suffix(String),
}

/// Where metric requests may go (`docs/security.md#egress`).
///
/// Entries are host patterns (`prometheus.monitoring.svc`, `*.monitoring.svc.cluster.local`,
/// `*`) or networks (`10.0.0.0/8`, `fd00::/8`, a single address). With host patterns listed, a
/// `serverAddress` whose host is a name must match one; with networks listed, every address
/// the operator connects to (an IP literal, or each address a name resolves to) must be inside
/// one. Kinds not listed do not restrict. [`BLOCKED_NETWORKS`] and [`BLOCKED_HOSTS`] are refused
/// in every case, unless a listed network lies inside a blocked one (an explicit opt-in).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct EgressPolicy {
    hosts: Vec<HostPattern>,
    networks: Vec<IpNet>,
}

impl EgressPolicy {
    /// Parses allow-list entries (empty entries are ignored).
    ///
    /// # Errors
    /// A message naming the first entry that is neither a host pattern nor a network.
    pub fn parse<S: AsRef<str>>(entries: &[S]) -> Result<Self, String> {
        let mut policy = Self::default();
        for raw in entries {
            let entry = raw
                .as_ref()
                .trim()
                .trim_end_matches('.')
                .to_ascii_lowercase();
            if entry.is_empty() {
                continue;
            }
            if let Ok(net) = entry.parse::<IpNet>() {
                policy.networks.push(net.trunc());
            } else if let Ok(ip) = entry.parse::<IpAddr>() {
                policy.networks.push(IpNet::from(ip));
            } else if entry == "*" {
                policy.hosts.push(HostPattern::Any);
            } else if let Some(suffix) = entry.strip_prefix("*.") {
                if !is_host_name(suffix) {
                    return Err(format!(
                        "allow-list entry {raw:?} is not `*.` and a host name",
                        raw = raw.as_ref()
                    ));
                }
                policy.hosts.push(HostPattern::Suffix(suffix.to_owned()));
            } else if is_host_name(&entry) {
                policy.hosts.push(HostPattern::Exact(entry));
            } else {
                return Err(format!(
                    "allow-list entry {:?} is not a host name, `*.domain`, `*`, an IP address or a CIDR",
                    raw.as_ref()
                ));
            }
        }
        Ok(policy)
    }

    /// Checks a URL host as written in `serverAddress` (a name, an IPv4 address, or an IPv6
    /// address with or without brackets). Names are checked against the host patterns and
    /// [`BLOCKED_HOSTS`]; addresses with [`EgressPolicy::check_ip`].
    ///
    /// # Errors
    /// Why the host is refused.
    pub fn check_host(&self, host: &str) -> Result<(), String> {
        let bare = host.trim_start_matches('[').trim_end_matches(']');
        if let Ok(ip) = bare.parse::<IpAddr>() {
            return self.check_ip(ip);
        }
        let name = bare.trim_end_matches('.').to_ascii_lowercase();
        if BLOCKED_HOSTS.contains(&name.as_str()) {
            return Err(format!(
                "host `{name}` is a cloud metadata service, always refused"
            ));
        }
        if self.hosts.is_empty() {
            return Ok(());
        }
        let matched = self.hosts.iter().any(|p| match p {
            HostPattern::Any => true,
            HostPattern::Exact(exact) => *exact == name,
            HostPattern::Suffix(suffix) => name
                .strip_suffix(suffix.as_str())
                .is_some_and(|head| head.ends_with('.') && head.len() > 1),
        });
        if matched {
            Ok(())
        } else {
            Err(format!(
                "host `{name}` is not in the operator's allow-list of server addresses"
            ))
        }
    }

    /// Checks one address the operator would connect to (an IP literal, or one a name resolved
    /// to). IPv4-mapped IPv6 addresses are checked as IPv4.
    ///
    /// # Errors
    /// Why the address is refused.
    pub fn check_ip(&self, ip: IpAddr) -> Result<(), String> {
        let ip = ip.to_canonical();
        let opted_in = |blocked: &IpNet| {
            self.networks
                .iter()
                .any(|net| net.contains(&ip) && blocked.contains(net))
        };
        for blocked in blocked_networks() {
            if blocked.contains(&ip) && !opted_in(&blocked) {
                return Err(format!(
                    "address {ip} is in {blocked} (cloud metadata, link-local or unspecified), always refused"
                ));
            }
        }
        if self.networks.is_empty() || self.networks.iter().any(|net| net.contains(&ip)) {
            Ok(())
        } else {
            Err(format!(
                "address {ip} is not in the operator's allow-list of server networks"
            ))
        }
    }
}

fn blocked_networks() -> impl Iterator<Item = IpNet> {
    BLOCKED_NETWORKS.iter().filter_map(|n| n.parse().ok())
}

/// RFC 1123 host name: dot-separated labels of letters, digits and `-`, each 1-63 long.
fn is_host_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 253
        && name.split('.').all(|label| {
            !label.is_empty()
                && label.len() <= 63
                && label
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
        })
}

/// The operator's default `--min-sync-period-seconds`, seconds: a scaler's queries run at most
/// once per 5 s (docs/security.md#shared-cluster-defaults).
pub const DEFAULT_MIN_SYNC_PERIOD_SECONDS: i32 = 5;

/// The operator's default `--max-replicas-cap`, replicas: the `maxReplicas` of the recommended
/// examples (`docs/examples/`), docs/security.md#shared-cluster-defaults.
pub const DEFAULT_MAX_REPLICAS_CAP: i32 = 128;

/// Everything an `LLMScaler` is held to beyond its own schema (`docs/security.md`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct OperatorPolicy {
    /// Where metric requests may go.
    pub egress: EgressPolicy,
    /// Whether [`TENANT_HEADERS`] may be set in `serverHeaders`.
    pub allow_tenant_header: bool,
    /// Upper bound on `spec.maxReplicas`, replicas; `None` = no bound beyond int32.
    pub max_replicas_cap: Option<i32>,
    /// Lower bound on `spec.syncPeriodSeconds` and `spec.retryPeriodSeconds`, seconds
    /// (`--min-sync-period-seconds`, default [`DEFAULT_MIN_SYNC_PERIOD_SECONDS`] in the
    /// operator; 0 or 1 = only the schema's minimum of 1 s): a scaler's queries run once per
    /// period against a Prometheus other tenants share (docs/security.md#shared-cluster-defaults).
    pub min_sync_period_seconds: i32,
    /// `--restrict-secret-access` (KEDA's flag of the same name): `serverHeadersFrom` is
    /// accepted only for scalers in the operator's own namespace ([`Self::operator_namespace`]).
    pub restrict_secret_access: bool,
    /// The operator's namespace, for [`Self::restrict_secret_access`].
    pub operator_namespace: Option<String>,
}

impl OperatorPolicy {
    /// Why a `serverHeaders` name is refused, if it is (case-insensitive).
    pub fn header_refusal(&self, name: &str) -> Option<&'static str> {
        let lower = name.to_ascii_lowercase();
        if REFUSED_HEADERS.contains(&lower.as_str())
            || REFUSED_HEADER_PREFIXES.iter().any(|p| lower.starts_with(p))
        {
            Some("is a hop-by-hop, routing or metadata header, which a scaler may not set")
        } else if !self.allow_tenant_header && TENANT_HEADERS.contains(&lower.as_str()) {
            Some(
                "is a tenancy header, which chooses whose data a shared server answers with; \
                 the operator's admin has not allowed it (--allow-tenant-header)",
            )
        } else {
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_refuses_metadata_and_link_local_only() {
        let p = EgressPolicy::default();
        for ok in ["prometheus.monitoring", "127.0.0.1", "10.1.2.3", "[::1]"] {
            assert_eq!(p.check_host(ok), Ok(()), "{ok}");
        }
        for bad in [
            "169.254.169.254",
            "[fe80::1]",
            "100.100.100.200",
            "[fd00:ec2::254]",
            "metadata.google.internal",
            "METADATA.google.internal.",
            "0.0.0.0",
            "[::ffff:169.254.169.254]",
        ] {
            assert!(p.check_host(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn host_patterns_and_networks() {
        let p = EgressPolicy::parse(&["*.monitoring.svc", "prom.example.com", "10.0.0.0/8"])
            .expect("parse");
        assert!(p.check_host("prometheus.monitoring.svc").is_ok());
        assert!(p.check_host("monitoring.svc").is_err());
        assert!(p.check_host("prom.example.com").is_ok());
        assert!(p.check_host("evil.example.com").is_err());
        assert!(p.check_ip("10.9.9.9".parse().expect("ip")).is_ok());
        assert!(p.check_ip("192.168.0.1".parse().expect("ip")).is_err());
        assert!(p.check_host("192.168.0.1").is_err());
        assert!(EgressPolicy::parse(&["not a host"]).is_err());
    }

    #[test]
    fn explicit_metadata_opt_in_only_by_a_network_inside_the_blocked_range() {
        let wide = EgressPolicy::parse(&["0.0.0.0/0"]).expect("parse");
        assert!(
            wide.check_ip("169.254.169.254".parse().expect("ip"))
                .is_err()
        );
        let narrow = EgressPolicy::parse(&["169.254.10.0/24"]).expect("parse");
        assert!(narrow.check_ip("169.254.10.5".parse().expect("ip")).is_ok());
        assert!(
            narrow
                .check_ip("169.254.169.254".parse().expect("ip"))
                .is_err()
        );
    }

    #[test]
    fn headers() {
        let p = OperatorPolicy::default();
        for bad in [
            "Host",
            "range",
            "X-Forwarded-For",
            "Metadata-Flavor",
            "Connection",
            "X-Scope-OrgID",
        ] {
            assert!(p.header_refusal(bad).is_some(), "{bad}");
        }
        assert!(p.header_refusal("Authorization").is_none());
        let allowing = OperatorPolicy {
            allow_tenant_header: true,
            ..OperatorPolicy::default()
        };
        assert!(allowing.header_refusal("X-Scope-OrgID").is_none());
        assert!(allowing.header_refusal("Host").is_some());
    }
}
