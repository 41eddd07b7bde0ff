//! Publishing Events on an LLMScaler, each asking the leadership handle right before it
//! (best effort: a failure is logged, never returned). Used by [`super::act`] for the plan's
//! Events and by [`super::report`] for the Events of condition flips.

use kube::Resource;
use kube::runtime::events::{Event, EventType};
use llmscaler_api::LLMScaler;

use super::Context;
use crate::engine::conditions::{self, EventSpec};

/// Publishes `events` on the scaler (a failure is logged, not returned: Events are best effort).
pub(crate) async fn publish(ctx: &Context, scaler: &LLMScaler, events: &[EventSpec]) {
    let reference = scaler.object_ref(&());
    for spec in events {
        if ctx.leadership.check().is_err() {
            return;
        }
        let event = Event {
            type_: if spec.warning {
                EventType::Warning
            } else {
                EventType::Normal
            },
            reason: spec.reason.as_str().to_owned(),
            note: Some(conditions::clean_message(
                &spec.note,
                conditions::EVENT_NOTE_MAX_BYTES,
            )),
            action: spec.action.to_owned(),
            secondary: None,
        };
        if let Err(err) = ctx.recorder.publish(&event, &reference).await {
            tracing::warn!(error = %err, reason = %spec.reason, "cannot publish Event");
        }
    }
}
