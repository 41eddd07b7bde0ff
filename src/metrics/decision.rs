//! Decision-server client: the Custom metric provider
//! (docs/providers.md#custom-provider-decision-server).

use serde::Deserialize;
use serde::de::{DeserializeSeed, IgnoredAny, MapAccess, SeqAccess, Visitor};

use super::{Endpoint, MetricError, MetricsClient, Reply, Subject, json_position};

/// The only `apiVersion` a decision-server reply may carry
/// (docs/providers.md#custom-provider-decision-server).
pub const DECISION_API_VERSION: &str = "llmscaling.inference.x-k8s.io/v1alpha1";

/// Default `customProvider.path` (docs/resource.md).
pub const DEFAULT_DECISION_PATH: &str = "/decisions";

/// Reads the replica count an external decision server wants for one serviceId
/// (docs/providers.md#custom-provider-decision-server).
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
    /// as an absolute replica count (not yet clamped;
    /// docs/providers.md#custom-provider-decision-server).
    ///
    /// # Errors
    /// - [`MetricError::Timeout`] after the endpoint's timeout (seconds),
    ///   [`MetricError::Transport`] when the server cannot be reached;
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

/// Decodes the body of a 200 decision-server reply for `service_id` (and `namespace`): the
/// function the fuzz target and the memory test call. Streams over the `decisions` list keeping
/// only the first match, whatever the list's length (`docs/security.md#memory`).
///
/// # Errors
/// As [`DecisionSource::decide`] for a 200 reply.
pub fn decode_decision_body(
    service_id: &str,
    namespace: Option<&str>,
    body: &[u8],
) -> Result<i32, MetricError> {
    let subject = Subject::Service {
        service_id: service_id.to_owned(),
        namespace: namespace.map(str::to_owned),
    };
    let reply = Reply {
        server: String::new(),
        status: 200,
        content_type: "application/json".to_owned(),
        body: body.to_vec(),
    };
    decode_decision(&subject, &reply)
}

/// A JSON value as far as the decoder cares: a string (kept), a number (kept), or the kind of
/// anything else (consumed without being kept).
#[derive(Debug)]
enum Scalar {
    Str(String),
    Int(i128),
    Float(f64),
    Other(&'static str),
}

impl<'de> Deserialize<'de> for Scalar {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Scalar;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("any JSON value")
            }
            fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<Scalar, E> {
                Ok(Scalar::Str(v.to_owned()))
            }
            fn visit_i64<E: serde::de::Error>(self, v: i64) -> Result<Scalar, E> {
                Ok(Scalar::Int(i128::from(v)))
            }
            fn visit_u64<E: serde::de::Error>(self, v: u64) -> Result<Scalar, E> {
                Ok(Scalar::Int(i128::from(v)))
            }
            fn visit_f64<E: serde::de::Error>(self, v: f64) -> Result<Scalar, E> {
                Ok(Scalar::Float(v))
            }
            fn visit_bool<E: serde::de::Error>(self, _: bool) -> Result<Scalar, E> {
                Ok(Scalar::Other("a boolean"))
            }
            fn visit_unit<E: serde::de::Error>(self) -> Result<Scalar, E> {
                Ok(Scalar::Other("null"))
            }
            fn visit_none<E: serde::de::Error>(self) -> Result<Scalar, E> {
                Ok(Scalar::Other("null"))
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Scalar, A::Error> {
                while seq.next_element::<IgnoredAny>()?.is_some() {}
                Ok(Scalar::Other("a list"))
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Scalar, A::Error> {
                while map.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {}
                Ok(Scalar::Other("an object"))
            }
        }
        deserializer.deserialize_any(V)
    }
}

impl Scalar {
    fn kind(&self) -> &'static str {
        match self {
            Scalar::Str(_) => "a string",
            Scalar::Int(_) | Scalar::Float(_) => "a number",
            Scalar::Other(kind) => kind,
        }
    }

    fn as_str(&self) -> Option<&str> {
        match self {
            Scalar::Str(s) => Some(s),
            _ => None,
        }
    }
}

/// `replicas` of one decision: only `active` is kept; anything but an object reads as empty.
#[derive(Debug, Default)]
struct Replicas {
    active: Option<Scalar>,
}

impl<'de> Deserialize<'de> for Replicas {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Replicas;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("an object")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Replicas, A::Error> {
                let mut active = None;
                while let Some(key) = map.next_key::<Scalar>()? {
                    if key.as_str() == Some("active") {
                        active = Some(map.next_value::<Scalar>()?);
                    } else {
                        map.next_value::<IgnoredAny>()?;
                    }
                }
                Ok(Replicas { active })
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Replicas, A::Error> {
                while seq.next_element::<IgnoredAny>()?.is_some() {}
                Ok(Replicas::default())
            }
            fn visit_str<E: serde::de::Error>(self, _: &str) -> Result<Replicas, E> {
                Ok(Replicas::default())
            }
            fn visit_i64<E: serde::de::Error>(self, _: i64) -> Result<Replicas, E> {
                Ok(Replicas::default())
            }
            fn visit_u64<E: serde::de::Error>(self, _: u64) -> Result<Replicas, E> {
                Ok(Replicas::default())
            }
            fn visit_f64<E: serde::de::Error>(self, _: f64) -> Result<Replicas, E> {
                Ok(Replicas::default())
            }
            fn visit_bool<E: serde::de::Error>(self, _: bool) -> Result<Replicas, E> {
                Ok(Replicas::default())
            }
            fn visit_unit<E: serde::de::Error>(self) -> Result<Replicas, E> {
                Ok(Replicas::default())
            }
        }
        deserializer.deserialize_any(V)
    }
}

/// One element of `decisions`. Fields of the wrong type read as absent.
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
struct Entry {
    #[serde(default)]
    service_id: Option<Scalar>,
    #[serde(default)]
    namespace: Option<Scalar>,
    #[serde(default)]
    replicas: Option<Replicas>,
}

/// What the streamed `decisions` list keeps: the count, the matches counted, the first match.
struct Matches<'s> {
    service_id: &'s str,
    namespace: Option<&'s str>,
    total: usize,
    matched: usize,
    first: Option<Replicas>,
}

impl<'de> DeserializeSeed<'de> for &mut Matches<'_> {
    type Value = ();
    fn deserialize<D: serde::Deserializer<'de>>(self, deserializer: D) -> Result<(), D::Error> {
        deserializer.deserialize_seq(self)
    }
}

impl<'de> Visitor<'de> for &mut Matches<'_> {
    type Value = ();
    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("a list of decisions")
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        while let Some(entry) = seq.next_element::<Entry>()? {
            self.total += 1;
            let id_ok = entry.service_id.as_ref().and_then(Scalar::as_str) == Some(self.service_id);
            let ns_ok = match self.namespace {
                Some(ns) => entry.namespace.as_ref().and_then(Scalar::as_str) == Some(ns),
                None => true,
            };
            if id_ok && ns_ok {
                self.matched += 1;
                if self.first.is_none() {
                    self.first = Some(entry.replicas.unwrap_or_default());
                }
            }
        }
        Ok(())
    }
}

/// The reply's top level: `apiVersion` and the streamed `decisions`; other members skipped.
struct Top<'m, 's> {
    matches: &'m mut Matches<'s>,
    api_version: Option<Scalar>,
    decisions: Option<Result<(), &'static str>>,
}

impl<'de> Visitor<'de> for &mut Top<'_, '_> {
    type Value = ();
    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("a JSON object")
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        while let Some(key) = map.next_key::<Scalar>()? {
            match key.as_str() {
                Some("apiVersion") => self.api_version = Some(map.next_value::<Scalar>()?),
                Some("decisions") => {
                    // A list is streamed; anything else is consumed and reported by kind.
                    let kind = map.next_value_seed(Probe(&mut *self.matches))?;
                    self.decisions = Some(kind.map_or(Ok(()), Err));
                }
                _ => {
                    map.next_value::<IgnoredAny>()?;
                }
            }
        }
        Ok(())
    }
}

/// The visits of a JSON scalar where a list or an object was expected: the value is the kind
/// found (`a string`, `a number`, `a boolean`, `null`), for the error message.
macro_rules! scalar_kinds {
    () => {
        fn visit_str<E: serde::de::Error>(self, _: &str) -> Result<Self::Value, E> {
            Ok(Some("a string"))
        }
        fn visit_i64<E: serde::de::Error>(self, _: i64) -> Result<Self::Value, E> {
            Ok(Some("a number"))
        }
        fn visit_u64<E: serde::de::Error>(self, _: u64) -> Result<Self::Value, E> {
            Ok(Some("a number"))
        }
        fn visit_f64<E: serde::de::Error>(self, _: f64) -> Result<Self::Value, E> {
            Ok(Some("a number"))
        }
        fn visit_bool<E: serde::de::Error>(self, _: bool) -> Result<Self::Value, E> {
            Ok(Some("a boolean"))
        }
        fn visit_unit<E: serde::de::Error>(self) -> Result<Self::Value, E> {
            Ok(Some("null"))
        }
    };
}

/// Streams `decisions` when it is a list, else consumes it and returns its kind.
struct Probe<'m, 's>(&'m mut Matches<'s>);

impl<'de> DeserializeSeed<'de> for Probe<'_, '_> {
    type Value = Option<&'static str>;
    fn deserialize<D: serde::Deserializer<'de>>(
        self,
        deserializer: D,
    ) -> Result<Self::Value, D::Error> {
        deserializer.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Probe<'_, '_> {
    type Value = Option<&'static str>;
    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("a list of decisions")
    }
    fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<Self::Value, A::Error> {
        self.0.visit_seq(seq).map(|()| None)
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        while map.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {}
        Ok(Some("an object"))
    }
    scalar_kinds!();
}

/// The top level when it is not an object: its kind.
struct TopKind<'t, 'm, 's>(&'t mut Top<'m, 's>);

impl<'de> Visitor<'de> for TopKind<'_, '_, '_> {
    type Value = Option<&'static str>;
    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("a JSON object")
    }
    fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<Self::Value, A::Error> {
        self.0.visit_map(map).map(|()| None)
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
        while seq.next_element::<IgnoredAny>()?.is_some() {}
        Ok(Some("a list"))
    }
    scalar_kinds!();
}

/// Decodes a decision-server reply for `subject`
/// (docs/providers.md#custom-provider-decision-server). Nothing of the body is quoted back:
/// kinds, counts and fixed texts only (`docs/security.md#messages`).
fn decode_decision(subject: &Subject, reply: &Reply) -> Result<i32, MetricError> {
    if reply.status != 200 {
        return Err(reply.status_error(subject));
    }
    let Subject::Service {
        service_id,
        namespace,
    } = subject
    else {
        return Err(bad(subject, "internal: not a decision subject".to_owned()));
    };
    let mut matches = Matches {
        service_id,
        namespace: namespace.as_deref(),
        total: 0,
        matched: 0,
        first: None,
    };
    let mut top = Top {
        matches: &mut matches,
        api_version: None,
        decisions: None,
    };
    let mut deserializer = serde_json::Deserializer::from_slice(&reply.body);
    let kind = serde::Deserializer::deserialize_any(&mut deserializer, TopKind(&mut top))
        .and_then(|kind| deserializer.end().map(|()| kind))
        .map_err(|e| reply.decode_error(subject, json_position(&e)))?;
    if let Some(kind) = kind {
        return Err(bad(subject, format!("expected a JSON object, got {kind}")));
    }
    let (api_version, decisions) = (top.api_version, top.decisions);
    match &api_version {
        Some(Scalar::Str(v)) if v == DECISION_API_VERSION => {}
        Some(Scalar::Str(_)) => {
            return Err(bad(
                subject,
                format!("apiVersion is not supported, expected `{DECISION_API_VERSION}`"),
            ));
        }
        Some(other) => {
            return Err(bad(
                subject,
                format!(
                    "apiVersion is {}, expected the string `{DECISION_API_VERSION}`",
                    other.kind()
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
    match decisions {
        None => return Err(bad(subject, "`decisions` is missing".to_owned())),
        Some(Err(kind)) => {
            return Err(bad(
                subject,
                format!("`decisions` is {kind}, expected a list"),
            ));
        }
        Some(Ok(())) => {}
    }
    let replicas = match (matches.matched, matches.first) {
        (1, Some(replicas)) => replicas,
        (0, _) | (_, None) => {
            return Err(MetricError::NoDecision {
                subject: subject.clone(),
                others: matches.total,
            });
        }
        (count, Some(_)) => {
            return Err(MetricError::AmbiguousDecision {
                subject: subject.clone(),
                count,
                namespaced: namespace.is_some(),
            });
        }
    };
    let bad_replicas = |reason: &'static str| MetricError::BadReplicas {
        subject: subject.clone(),
        reason,
    };
    let whole: i128 = match replicas.active {
        None => return Err(bad_replicas("replicas.active is missing")),
        Some(Scalar::Int(i)) => i,
        // A whole float such as 3.0 is accepted; its range is checked below.
        Some(Scalar::Float(f)) if f.is_finite() && f.fract() == 0.0 && f.abs() < 1e30 => f as i128,
        Some(Scalar::Float(_)) => return Err(bad_replicas("it is not a whole number")),
        Some(Scalar::Str(_)) => return Err(bad_replicas("it is a string, not a number")),
        Some(Scalar::Other(_)) => return Err(bad_replicas("it is not a number")),
    };
    if whole < 0 {
        return Err(bad_replicas("it is negative"));
    }
    i32::try_from(whole).map_err(|_| bad_replicas("it is over the int32 maximum 2147483647"))
}

fn bad(subject: &Subject, reason: String) -> MetricError {
    MetricError::BadReply {
        subject: subject.clone(),
        reason,
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
            "decision server returned 2 decisions for serviceId `llama`, expected exactly one; \
             set customProvider.namespace to pick one; the fleet is held"
        );
        let err = decode(Some("c"), 200, &body).expect_err("none in c");
        assert_eq!(err.kind(), "no_decision");
        assert_eq!(
            err.to_string(),
            "decision server returned no decision for serviceId `llama` in namespace `c` (2 \
             other decision(s) in the reply); the fleet is held"
        );
    }

    #[test]
    fn other_service_only_is_no_decision() {
        let body = reply(r#"[{"serviceId":"mistral","replicas":{"active":4}}]"#);
        let err = decode(None, 200, &body).expect_err("other");
        assert_eq!(
            err.to_string(),
            "decision server returned no decision for serviceId `llama` (1 other decision(s) \
             in the reply); the fleet is held"
        );
        let err = decode(None, 200, &reply("[]")).expect_err("empty");
        assert!(
            err.to_string()
                .contains("(0 other decision(s) in the reply)"),
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
            "decision server reply for serviceId `llama` is unusable: apiVersion is not \
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
            (r#"{"active":null}"#, "it is not a number"),
            (r#"{"active":"3"}"#, "it is a string, not a number"),
            (r#"{"active":-1}"#, "it is negative"),
            (r#"{"active":2.5}"#, "it is not a whole number"),
            (
                r#"{"active":2147483648}"#,
                "it is over the int32 maximum 2147483647",
            ),
            (
                r#"{"active":18446744073709551615}"#,
                "it is over the int32 maximum 2147483647",
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
            "decision server at http://h:1/decisions answered HTTP 503 for serviceId `llama` \
             (content-type `application/json`, 13 bytes; body not shown)"
        );
        let err = decode(None, 200, "<html>hi</html>").expect_err("html");
        assert_eq!(err.kind(), "decode");
        assert_eq!(
            err.to_string(),
            "decision server reply for serviceId `llama` cannot be decoded (HTTP 200, \
             content-type `application/json`, 15 bytes; body not shown): not JSON at line 1 \
             column 1"
        );
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
            let ep = Endpoint::new(base, &BTreeMap::new(), client.policy()).expect("endpoint");
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
