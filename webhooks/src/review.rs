//! One HTTP request to one HTTP response, with no I/O: the `AdmissionReview` envelope around
//! the pure handlers of [`crate::admission`].
//!
//! A well-formed `admission.k8s.io/v1` `AdmissionReview` with a `request` always gets `200` and
//! an `AdmissionReview` whose `response.uid` is the request's. Anything else gets a 4xx with a
//! Kubernetes `Status` object as JSON body (`{"apiVersion":"v1","kind":"Status",
//! "status":"Failure","message":..,"reason":..,"code":..}`): 415 for a content type other than
//! JSON, 413 for a body over [`MAX_BODY_BYTES`], 400 for anything that is not such a review.

use kube::core::DynamicObject;
use kube::core::admission::{AdmissionRequest, AdmissionResponse, AdmissionReview};
use llmscaler_api::OperatorPolicy;
use llmscaler_api::validation::parse_json_value;
use serde_json::{Value, json};

use crate::admission;

/// The only `AdmissionReview` API version accepted.
pub(crate) const ADMISSION_API_VERSION: &str = "admission.k8s.io/v1";
/// `kind` of the request envelope.
pub(crate) const ADMISSION_KIND: &str = "AdmissionReview";
/// Largest request body accepted, in bytes (1 MiB; the API server sends far less for one
/// `LLMScaler`). Larger bodies get 413.
pub const MAX_BODY_BYTES: usize = 1024 * 1024;
/// The media type of requests and responses.
pub const JSON: &str = "application/json";

/// Which handler a request is for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Endpoint {
    /// `POST /validate`: [`admission::validate`].
    Validate,
    /// `POST /mutate`: [`admission::mutate`].
    Mutate,
}

impl Endpoint {
    fn handle(
        self,
        request: &AdmissionRequest<DynamicObject>,
        policy: &OperatorPolicy,
    ) -> AdmissionResponse {
        match self {
            Endpoint::Validate => admission::validate(request, policy),
            Endpoint::Mutate => admission::mutate(request),
        }
    }
}

/// An HTTP answer: status code and JSON body (`Content-Type: application/json` always).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Reply {
    /// HTTP status code: 200, 400, 413, 415 or 500.
    pub status: u16,
    /// The JSON body: an `AdmissionReview` for 200, a `Status` otherwise.
    pub body: Vec<u8>,
}

/// Whether a `Content-Type` header value is JSON (`application/json`, any parameters, any
/// case).
pub(crate) fn is_json_content_type(value: &str) -> bool {
    value
        .split(';')
        .next()
        .is_some_and(|media| media.trim().eq_ignore_ascii_case(JSON))
}

/// Answers one request body under the operator `policy`. `content_type` is the raw header
/// value (`None` when absent). Never panics; see the module docs for the status codes.
pub fn handle(
    endpoint: Endpoint,
    policy: &OperatorPolicy,
    content_type: Option<&str>,
    body: &[u8],
) -> Reply {
    if !content_type.is_some_and(is_json_content_type) {
        return error_reply(
            415,
            "UnsupportedMediaType",
            &format!(
                "Content-Type must be {JSON}, got {:?}",
                content_type.unwrap_or("")
            ),
        );
    }
    if body.len() > MAX_BODY_BYTES {
        return too_large();
    }
    match read_request(body) {
        Ok(request) => review_reply(endpoint.handle(&request, policy)),
        Err(message) => error_reply(400, "BadRequest", &message),
    }
}

/// The 413 reply for a body over [`MAX_BODY_BYTES`].
pub(crate) fn too_large() -> Reply {
    error_reply(
        413,
        "RequestEntityTooLarge",
        &format!("request body is larger than {MAX_BODY_BYTES} bytes"),
    )
}

fn read_request(body: &[u8]) -> Result<AdmissionRequest<DynamicObject>, String> {
    // Fast path for what the API server sends; anything it does not take goes through the
    // slow path below, which gives the same result with a precise message.
    if let Ok(review) = serde_json::from_slice::<AdmissionReview<DynamicObject>>(body)
        && review.types.api_version == ADMISSION_API_VERSION
        && review.types.kind == ADMISSION_KIND
        && let Ok(request) = review.try_into()
    {
        return Ok(request);
    }
    explain_bad_request(body)
}

/// The slow path of [`read_request`]: step by step, so the error says what is wrong (and with
/// the field path for a malformed review).
fn explain_bad_request(body: &[u8]) -> Result<AdmissionRequest<DynamicObject>, String> {
    if body.is_empty() {
        return Err(format!(
            "empty body; expected an {ADMISSION_API_VERSION} {ADMISSION_KIND}"
        ));
    }
    let value: Value =
        serde_json::from_slice(body).map_err(|err| format!("body is not JSON: {err}"))?;
    let Some(envelope) = value.as_object() else {
        return Err(format!(
            "body is not a JSON object; expected an {ADMISSION_API_VERSION} {ADMISSION_KIND}"
        ));
    };
    let api_version = envelope.get("apiVersion").and_then(Value::as_str);
    let kind = envelope.get("kind").and_then(Value::as_str);
    if api_version != Some(ADMISSION_API_VERSION) || kind != Some(ADMISSION_KIND) {
        return Err(format!(
            "only {ADMISSION_KIND} {ADMISSION_API_VERSION} is accepted, got kind {:?} apiVersion {:?}; set admissionReviewVersions: [v1]",
            kind.unwrap_or(""),
            api_version.unwrap_or("")
        ));
    }
    let review: AdmissionReview<DynamicObject> = parse_json_value(&value)
        .map_err(|errors| format!("malformed {ADMISSION_KIND}: {errors}"))?;
    review
        .try_into()
        .map_err(|_| format!("{ADMISSION_KIND} has no request"))
}

fn review_reply(response: AdmissionResponse) -> Reply {
    match serde_json::to_vec(&response.into_review()) {
        Ok(body) => Reply { status: 200, body },
        Err(err) => error_reply(
            500,
            "InternalError",
            &format!("cannot serialize the AdmissionReview: {err}"),
        ),
    }
}

/// A 4xx/5xx reply whose body is a Kubernetes `Status` object.
pub(crate) fn error_reply(status: u16, reason: &str, message: &str) -> Reply {
    let body = json!({
        "apiVersion": "v1",
        "kind": "Status",
        "status": "Failure",
        "message": message,
        "reason": reason,
        "code": status,
    });
    Reply {
        status,
        // Serializing a `Value` of strings and numbers cannot fail; fall back to an empty
        // object rather than panic.
        body: serde_json::to_vec(&body).unwrap_or_else(|_| b"{}".to_vec()),
    }
}
