//! Decision-server client: the Custom metric provider (spec §4).

use serde_json::Value;

use super::{Endpoint, MetricError, MetricsClient, Reply, Subject};

/// The only `apiVersion` a decision-server reply may carry (spec §4).
pub const DECISION_API_VERSION: &str = "llmscaling.inference.x-k8s.io/v1alpha1";

/// Default `customProvider.path` (spec §1).
pub const DEFAULT_DECISION_PATH: &str = "/decisions";

/// Excerpt length, in characters, of a non-JSON body quoted in an error message.
const BODY_EXCERPT_CHARS: usize = 200;

/// Reads the replica count an external decision server wants for one serviceId (spec §4).
///
/// Cheap to clone; clones share the [`MetricsClient`] connection pool. Each request is bounded
/// by the endpoint's timeout (default 5 seconds).
#[derive(Clone, Debug)]
pub struct DecisionSource {
    client: MetricsClient,
    endpoint: Endpoint,
    path: String,
    subject: Subject,
}

impl DecisionSource {
    /// A source asking `endpoint` (`serverAddress`, `serverHeaders`, timeout) for `service_id`
    /// (`customProvider.serviceId`), matching `namespace` (`customProvider.namespace`) when
    /// given, at `path` (`customProvider.path`; `None` or empty means `/decisions`; a missing
    /// leading slash or doubled slashes are normalised).
    pub fn new(
        client: MetricsClient,
        endpoint: Endpoint,
        service_id: impl Into<String>,
        namespace: Option<String>,
        path: Option<&str>,
    ) -> Self {
        let path = match path.map(str::trim) {
            Some(p) if !p.trim_matches('/').is_empty() => p.to_owned(),
            _ => DEFAULT_DECISION_PATH.to_owned(),
        };
        Self {
            client,
            endpoint,
            path,
            subject: Subject::Service {
                service_id: service_id.into(),
                namespace: namespace.filter(|ns| !ns.is_empty()),
            },
        }
    }

    /// The endpoint this source asks.
    pub fn endpoint(&self) -> &Endpoint {
        &self.endpoint
    }

    /// The full request URL: `{serverAddress}{path}?serviceId=<serviceId>`.
    ///
    /// # Errors
    /// [`MetricError::InvalidAddress`] if the joined URL does not parse.
    pub fn url(&self) -> Result<reqwest::Url, MetricError> {
        let Subject::Service { service_id, .. } = &self.subject else {
            return Err(MetricError::InvalidAddress {
                address: self.endpoint.base().to_owned(),
                reason: "decision source without a serviceId".to_owned(),
            });
        };
        self.endpoint
            .url(&self.path, &[("serviceId", service_id.as_str())])
    }

    /// Asks the decision server and returns `replicas.active` of the single matching decision,
    /// as an absolute replica count (not yet clamped; spec §4).
    ///
    /// # Errors
    /// - [`MetricError::Timeout`] after the endpoint's timeout (seconds), [`MetricError::Transport`]
    ///   when the server cannot be reached;
    /// - [`MetricError::HttpStatus`] for a non-200 reply; [`MetricError::Decode`] for a body that
    ///   is not JSON (e.g. an HTML error page);
    /// - [`MetricError::BadReply`] for a missing or other `apiVersion` or a missing `decisions`
    ///   list; [`MetricError::NoDecision`] when no decision matches the serviceId (and
    ///   namespace); [`MetricError::AmbiguousDecision`] when several do;
    ///   [`MetricError::BadReplicas`] when `replicas.active` is missing, not a whole number,
    ///   negative, or over `i32::MAX`.
    pub async fn decide(&self) -> Result<i32, MetricError> {
        let url = self.url()?;
        tracing::debug!(server = %self.endpoint.shown_base(), subject = %self.subject, "decision request");
        let reply = self.endpoint.get(&self.client, url, &self.subject).await?;
        decode_decision(&self.subject, &reply)
    }
}

/// Decodes a decision-server reply for `subject` (spec §4).
fn decode_decision(subject: &Subject, reply: &Reply) -> Result<i32, MetricError> {
    if reply.status != 200 {
        return Err(MetricError::HttpStatus {
            subject: subject.clone(),
            server: reply.server.clone(),
            status: reply.status,
            detail: reply.snippet(BODY_EXCERPT_CHARS),
        });
    }
    let body: Value = serde_json::from_slice(&reply.body).map_err(|e| MetricError::Decode {
        subject: subject.clone(),
        status: reply.status,
        reason: format!(
            "not JSON ({}; content-type `{}`; body starts `{}`)",
            e,
            reply.content_type,
            reply.snippet(80)
        ),
    })?;
    let Subject::Service {
        service_id,
        namespace,
    } = subject
    else {
        return Err(bad(subject, "internal: not a decision subject".to_owned()));
    };
    let Some(object) = body.as_object() else {
        return Err(bad(
            subject,
            format!("expected a JSON object, got {}", json_kind(&body)),
        ));
    };
    match object.get("apiVersion") {
        Some(Value::String(v)) if v == DECISION_API_VERSION => {}
        Some(Value::String(v)) => {
            return Err(bad(
                subject,
                format!("apiVersion `{v}` is not supported, expected `{DECISION_API_VERSION}`"),
            ));
        }
        Some(other) => {
            return Err(bad(
                subject,
                format!(
                    "apiVersion is {}, expected the string `{DECISION_API_VERSION}`",
                    json_kind(other)
                ),
            ));
        }
        None => {
            return Err(bad(
                subject,
                format!("apiVersion is missing, expected `{DECISION_API_VERSION}`"),
            ));
        }
    }
    let decisions = match object.get("decisions") {
        Some(Value::Array(list)) => list,
        Some(other) => {
            return Err(bad(
                subject,
                format!("`decisions` is {}, expected a list", json_kind(other)),
            ));
        }
        None => return Err(bad(subject, "`decisions` is missing".to_owned())),
    };

    let str_field = |d: &Value, key: &str| d.get(key).and_then(Value::as_str).map(str::to_owned);
    let matches: Vec<&Value> = decisions
        .iter()
        .filter(|d| str_field(d, "serviceId").as_deref() == Some(service_id.as_str()))
        .filter(|d| match namespace {
            Some(ns) => str_field(d, "namespace").as_deref() == Some(ns.as_str()),
            None => true,
        })
        .collect();

    let decision = match matches.as_slice() {
        [one] => *one,
        [] => {
            let others: Vec<String> = decisions
                .iter()
                .take(3)
                .map(|d| {
                    let id = str_field(d, "serviceId").unwrap_or_else(|| "?".to_owned());
                    match str_field(d, "namespace") {
                        Some(ns) if !ns.is_empty() => format!("`{ns}/{id}`"),
                        _ => format!("`{id}`"),
                    }
                })
                .collect();
            let mut others = if others.is_empty() {
                "nothing".to_owned()
            } else {
                others.join(", ")
            };
            if decisions.len() > 3 {
                others.push_str(&format!(" and {} more", decisions.len() - 3));
            }
            return Err(MetricError::NoDecision {
                subject: subject.clone(),
                others,
            });
        }
        several => {
            let hint = if namespace.is_none() {
                let namespaces: Vec<String> = several
                    .iter()
                    .take(3)
                    .map(|d| {
                        str_field(d, "namespace")
                            .map(|ns| format!("`{ns}`"))
                            .unwrap_or_else(|| "none".to_owned())
                    })
                    .collect();
                format!(
                    " (namespaces {}); set customProvider.namespace to pick one",
                    namespaces.join(", ")
                )
            } else {
                String::new()
            };
            return Err(MetricError::AmbiguousDecision {
                subject: subject.clone(),
                count: several.len(),
                hint,
            });
        }
    };

    let bad_replicas = |reason: String| MetricError::BadReplicas {
        subject: subject.clone(),
        reason,
    };
    let active = decision
        .get("replicas")
        .and_then(|r| r.get("active"))
        .ok_or_else(|| bad_replicas("replicas.active is missing".to_owned()))?;
    let Value::Number(number) = active else {
        return Err(bad_replicas(format!("{active} is not a number")));
    };
    let whole: i128 = if let Some(i) = number.as_i64() {
        i128::from(i)
    } else if let Some(u) = number.as_u64() {
        i128::from(u)
    } else {
        match number.as_f64() {
            // A whole float such as 3.0 is accepted; its range is checked below.
            Some(f) if f.is_finite() && f.fract() == 0.0 && f.abs() < 1e30 => f as i128,
            _ => {
                return Err(bad_replicas(format!("{number} is not a whole number")));
            }
        }
    };
    if whole < 0 {
        return Err(bad_replicas(format!("{number} is negative")));
    }
    i32::try_from(whole)
        .map_err(|_| bad_replicas(format!("{number} is over the int32 maximum {}", i32::MAX)))
}

fn bad(subject: &Subject, reason: String) -> MetricError {
    MetricError::BadReply {
        subject: subject.clone(),
        reason,
    }
}

fn json_kind(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "a list",
        Value::Object(_) => "an object",
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;

    fn subject(ns: Option<&str>) -> Subject {
        Subject::Service {
            service_id: "llama".to_owned(),
            namespace: ns.map(str::to_owned),
        }
    }

    fn decode(ns: Option<&str>, status: u16, body: &str) -> Result<i32, MetricError> {
        decode_decision(
            &subject(ns),
            &Reply {
                server: "http://h:1/decisions".to_owned(),
                status,
                content_type: "application/json".to_owned(),
                body: body.as_bytes().to_vec(),
            },
        )
    }

    fn reply(decisions: &str) -> String {
        format!(r#"{{"apiVersion":"{DECISION_API_VERSION}","decisions":{decisions}}}"#)
    }

    #[test]
    fn single_match_gives_active() {
        let body = reply(
            r#"[{"namespace":"a","serviceId":"other","replicas":{"active":9}},
                {"namespace":"a","serviceId":"llama","replicas":{"active":15}}]"#,
        );
        assert_eq!(decode(None, 200, &body).expect("15"), 15);
        assert_eq!(decode(Some("a"), 200, &body).expect("15"), 15);
        let zero = reply(r#"[{"serviceId":"llama","replicas":{"active":0}}]"#);
        assert_eq!(decode(None, 200, &zero).expect("0"), 0);
        let whole_float = reply(r#"[{"serviceId":"llama","replicas":{"active":3.0}}]"#);
        assert_eq!(decode(None, 200, &whole_float).expect("3"), 3);
        let max = reply(r#"[{"serviceId":"llama","replicas":{"active":2147483647}}]"#);
        assert_eq!(decode(None, 200, &max).expect("max"), i32::MAX);
    }

    #[test]
    fn namespace_picks_among_several() {
        let body = reply(
            r#"[{"namespace":"a","serviceId":"llama","replicas":{"active":1}},
                {"namespace":"b","serviceId":"llama","replicas":{"active":2}}]"#,
        );
        assert_eq!(decode(Some("b"), 200, &body).expect("b"), 2);
        let err = decode(None, 200, &body).expect_err("ambiguous");
        assert_eq!(err.kind(), "ambiguous_decision");
        assert_eq!(
            err.to_string(),
            "decision server returned 2 decisions for serviceId `llama`, expected exactly one \
             (namespaces `a`, `b`); set customProvider.namespace to pick one; the fleet is held"
        );
        let err = decode(Some("c"), 200, &body).expect_err("none in c");
        assert_eq!(err.kind(), "no_decision");
        assert_eq!(
            err.to_string(),
            "decision server returned no decision for serviceId `llama` in namespace `c` (it \
             answered for `a/llama`, `b/llama`); the fleet is held"
        );
    }

    #[test]
    fn other_service_only_is_no_decision() {
        let body = reply(r#"[{"serviceId":"mistral","replicas":{"active":4}}]"#);
        let err = decode(None, 200, &body).expect_err("other");
        assert_eq!(
            err.to_string(),
            "decision server returned no decision for serviceId `llama` (it answered for \
             `mistral`); the fleet is held"
        );
        let err = decode(None, 200, &reply("[]")).expect_err("empty");
        assert!(
            err.to_string().contains("(it answered for nothing)"),
            "{err}"
        );
    }

    #[test]
    fn api_version_is_checked() {
        let body =
            r#"{"apiVersion":"v2","decisions":[{"serviceId":"llama","replicas":{"active":1}}]}"#;
        let err = decode(None, 200, body).expect_err("v2");
        assert_eq!(err.kind(), "bad_reply");
        assert_eq!(
            err.to_string(),
            "decision server reply for serviceId `llama` is unusable: apiVersion `v2` is not \
             supported, expected `llmscaling.inference.x-k8s.io/v1alpha1`"
        );
        let body = r#"{"decisions":[{"serviceId":"llama","replicas":{"active":1}}]}"#;
        assert!(
            decode(None, 200, body)
                .expect_err("missing")
                .to_string()
                .contains("apiVersion is missing")
        );
    }

    #[test]
    fn replicas_active_range() {
        let cases: BTreeMap<&str, &str> = BTreeMap::from([
            (r#"{}"#, "replicas.active is missing"),
            (r#"{"active":null}"#, "null is not a number"),
            (r#"{"active":"3"}"#, "\"3\" is not a number"),
            (r#"{"active":-1}"#, "-1 is negative"),
            (r#"{"active":2.5}"#, "2.5 is not a whole number"),
            (
                r#"{"active":2147483648}"#,
                "2147483648 is over the int32 maximum 2147483647",
            ),
            (
                r#"{"active":18446744073709551615}"#,
                "18446744073709551615 is over the int32 maximum 2147483647",
            ),
        ]);
        for (replicas, reason) in cases {
            let body = reply(&format!(
                r#"[{{"serviceId":"llama","replicas":{replicas}}}]"#
            ));
            let err = decode(None, 200, &body).expect_err(replicas);
            assert_eq!(err.kind(), "bad_replicas", "{replicas}");
            assert_eq!(
                err.to_string(),
                format!(
                    "decision server reply for serviceId `llama` has an unusable \
                     replicas.active: {reason}"
                )
            );
        }
        let no_replicas = reply(r#"[{"serviceId":"llama"}]"#);
        assert_eq!(
            decode(None, 200, &no_replicas).expect_err("none").kind(),
            "bad_replicas"
        );
    }

    #[test]
    fn non_200_and_non_json() {
        let err = decode(None, 503, "upstream down").expect_err("503");
        assert_eq!(err.kind(), "http_status");
        assert_eq!(
            err.to_string(),
            "decision server at http://h:1/decisions answered HTTP 503 for serviceId `llama`: \
             upstream down"
        );
        let err = decode(None, 200, "<html>hi</html>").expect_err("html");
        assert_eq!(err.kind(), "decode");
        assert!(err.to_string().starts_with(
            "decision server reply for serviceId `llama` cannot be decoded (HTTP 200): not JSON"
        ));
        for (body, what) in [
            ("[]", "expected a JSON object, got a list"),
            (
                &reply(r#"{"x":1}"#) as &str,
                "`decisions` is an object, expected a list",
            ),
        ] {
            let err = decode(None, 200, body).expect_err(body);
            assert!(err.to_string().ends_with(what), "{err}");
        }
    }

    #[test]
    fn path_defaults_and_normalises() {
        let client = MetricsClient::new().expect("client");
        let url = |base: &str, path: Option<&str>| {
            let ep = Endpoint::new(base, &BTreeMap::new()).expect("endpoint");
            DecisionSource::new(client.clone(), ep, "llama 3/8b", None, path)
                .url()
                .expect("url")
                .to_string()
        };
        let want = "http://h:1/decisions?serviceId=llama+3%2F8b";
        assert_eq!(url("http://h:1", None), want);
        assert_eq!(url("http://h:1/", None), want);
        assert_eq!(url("http://h:1/", Some("")), want);
        assert_eq!(url("http://h:1/", Some("/decisions")), want);
        assert_eq!(url("http://h:1", Some("decisions")), want);
        assert_eq!(url("http://h:1//", Some("//decisions/")), want);
        assert_eq!(
            url("http://h:1/base", Some("/v1/decide")),
            "http://h:1/base/v1/decide?serviceId=llama+3%2F8b"
        );
    }
}
