//! Which encoder shapes the payload of each destination kind: every kind's own
//! `encode` lives in its folder (`deliver/<kind>/payload.rs`), built on the helpers
//! of `template::Fields` (the message alone, trimmed, or with the kind's section).

use crate::model::DestinationKind;
use crate::template::{Encoder, Fields, Payload, Target};

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
fn message(f: &Fields<'_>, _: &Target<'_>, _: &crate::model::App) -> Payload {
    f.message_only()
}

#[cfg(test)]
mod tests;
