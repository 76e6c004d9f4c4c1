//! Which encoder shapes the payload of each destination kind: every kind's own
//! `encode` lives in its folder (`deliver/<kind>/payload.rs`); the message-only kinds
//! and the message-plus-section kinds share the helpers here.

use serde_json::{Map, Value};

use crate::model::DestinationKind;
use crate::template::{Encoder, Fields, RenderError, Target};

/// What an encoder returns: the payload's fields.
pub type Payload = Result<Map<String, Value>, RenderError>;

/// The encoder of `kind`.
pub fn encoder(kind: DestinationKind) -> Encoder {
    use DestinationKind as K;
    match kind {
        K::Console => message,
        K::Splunk => super::splunk::payload::encode,
        K::SignedWebhook => super::signed_webhook::payload::encode,
        K::Syslog => super::syslog::payload::encode,
        K::Slack => super::slack::payload::encode,
        K::Email => super::email::payload::encode,
        K::Pagerduty => super::pagerduty::payload::encode,
        K::Pushover => super::pushover::payload::encode,
        K::Newrelic => super::newrelic::payload::encode,
        K::Teams => super::teams::payload::encode,
        K::TeamsWorkflows => super::teams_workflows::payload::encode,
        K::Opsgenie => super::opsgenie::payload::encode,
        K::Googlechat => super::googlechat::payload::encode,
        K::Telegram => super::telegram::payload::encode,
        K::Rocketchat => super::rocketchat::payload::encode,
        K::Mattermost => super::mattermost::payload::encode,
        K::Grafana => super::grafana::payload::encode,
        K::Webex => super::webex::payload::encode,
        K::Alertmanager => super::alertmanager::payload::encode,
        K::Github => super::github::payload::encode,
        K::Webhook => super::webhook::payload::encode,
    }
}

/// The console's payload: the message as rendered.
pub fn message(f: &Fields<'_>, _: &Target<'_>, _: &crate::model::App) -> Payload {
    Ok(Map::from_iter([("message".to_string(), Value::from(f.message.clone()))]))
}

/// The SIEM kinds' payload: the message without trailing blank space (the record
/// around it is built at delivery).
pub fn trimmed_message(f: &Fields<'_>) -> Payload {
    Ok(Map::from_iter([("message".to_string(), Value::from(f.message.trim_end()))]))
}

/// The message and the kind's section's fields under their own names (text trimmed,
/// JSON parsed).
pub fn message_and_section(f: &Fields<'_>, section: &str) -> Payload {
    let mut out = Map::from_iter([("message".to_string(), Value::from(f.message.clone()))]);
    f.copy_section(section, &mut out)?;
    Ok(out)
}

#[cfg(test)]
mod tests;
