//! Chat provider types: Slack, and the Slack-compatible webhooks of Discord and
//! Rocket.Chat; Microsoft Teams; Google Chat; Webex; Telegram.

use serde_json::json;

use super::{Mapped, address_not_read, api_base, named, token, whole};
use crate::import::flux::provider::{Ctx, Val};
use crate::model::DestinationKind;

/// Slack's Web API endpoint as Flux's docs write it, and driftwatch's `apiUrl` default.
const SLACK_POST: &str = "/chat.postMessage";
const SLACK_API: &str = "https://slack.com/api";

/// `username` from the spec; a mark when the Secret overrides it (driftwatch's
/// `username` is not a secret reference).
fn username(c: &mut Ctx<'_>) {
    if let Some(u) = c.spec_str("username") {
        c.set("username", json!(u));
    }
    if c.consume("username") {
        let secret = c.secret_name();
        c.todo(
            "secretRef",
            format!("the Secret {secret}'s `username` key sets the name posted as; driftwatch's `username` is not a secret: write it in"),
        );
    }
}

/// `slack`: a bot token for the Web API (the address Slack's chat.postMessage, the
/// channel the recipient), or an incoming webhook (the address, in the Secret).
pub(super) fn slack(c: &mut Ctx<'_>) -> Mapped {
    username(c);
    let address = c.address();
    let channel = c.spec_str("channel");
    let kind = DestinationKind::Slack;
    let Some(token) = c.key("token") else {
        let Some(url) = address else {
            let secret = c.secret_name();
            c.todo(
                "",
                format!("neither a token nor an address (spec.address, or the Secret {secret}'s `address`): set `token` or `webhookUrl`"),
            );
            return Mapped { kind, recipient: None };
        };
        if let Val::Plain(u) = &url
            && u.contains(SLACK_POST)
        {
            c.todo("address", "Slack's Web API needs a token, and the Secret has no `token` key: set `token`");
        }
        c.set("webhookUrl", json!(url.text()));
        if channel.is_some() {
            c.note("channel", "an incoming webhook posts to the channel it was made for; left out");
        }
        return Mapped { kind, recipient: whole(c) };
    };
    c.set("token", json!(token));
    match address {
        Some(Val::Plain(a)) => match a.strip_suffix(SLACK_POST) {
            Some(base) if base == SLACK_API => {}
            Some(base) => c.set("apiUrl", json!(base)),
            None => c.todo(
                "address",
                format!("{a:?} is not a chat.postMessage URL; with a token driftwatch posts to `apiUrl`/chat.postMessage: set `apiUrl`"),
            ),
        },
        Some(Val::Ref(_)) => address_not_read(c, "apiUrl", SLACK_API),
        None => {}
    }
    let Some(channel) = channel else {
        c.todo("", "a token posts to a channel, and the Provider names none: the Alerts that use it are kept commented out until a channel is chosen");
        return Mapped { kind, recipient: None };
    };
    Mapped { kind, recipient: named(c, &channel) }
}

/// The address, or a mark that the type needs one.
fn webhook_address(c: &mut Ctx<'_>, what: &str) -> Option<Val> {
    let a = c.address();
    if a.is_none() {
        let secret = c.secret_name();
        c.todo("", format!("{what} needs a webhook URL: neither spec.address nor the Secret {secret}'s `address` gives one"));
    }
    a
}

/// `discord`: Slack's format to the webhook's `/slack` endpoint, as Flux sends it.
pub(super) fn discord(c: &mut Ctx<'_>) -> Mapped {
    username(c);
    let kind = DestinationKind::Slack;
    let Some(url) = webhook_address(c, "a Discord provider") else { return Mapped { kind, recipient: None } };
    let slack = match &url {
        Val::Plain(u) if u.trim_end_matches('/').ends_with("/slack") => u.clone(),
        other => format!("{}/slack", other.text().trim_end_matches('/')),
    };
    if let Val::Ref(_) = url {
        c.note("secretRef", "posted to the webhook's Slack-compatible endpoint, the Secret's address with `/slack` added (Flux adds it unless the address ends in /slack: if it does, remove the one added)");
    }
    c.set("webhookUrl", json!(slack));
    if c.spec_str("channel").is_some() {
        c.note("channel", "a Discord webhook posts to the channel it was made for; left out");
    }
    Mapped { kind, recipient: whole(c) }
}

/// `rocket`: a Rocket.Chat incoming webhook, sent Slack's format as Flux does.
pub(super) fn rocket(c: &mut Ctx<'_>) -> Mapped {
    username(c);
    let kind = DestinationKind::Slack;
    let Some(url) = webhook_address(c, "a Rocket.Chat provider") else { return Mapped { kind, recipient: None } };
    c.set("webhookUrl", json!(url.text()));
    c.note(
        "type",
        "a Rocket.Chat incoming webhook takes Slack's format, which Flux sends it: written as a `slack` service in webhook mode",
    );
    if c.spec_str("channel").is_some() {
        c.todo(
            "channel",
            "Flux names the channel in each message; driftwatch's Slack webhook mode does not, so messages go to the webhook's own channel",
        );
    }
    Mapped { kind, recipient: whole(c) }
}

/// `msteams`: a Teams workflow (Adaptive Cards), or an Office 365 connector
/// (`*.webhook.office.com`, MessageCard) told apart by the address's host, as Flux does.
pub(super) fn msteams(c: &mut Ctx<'_>) -> Mapped {
    let Some(url) = webhook_address(c, "a Microsoft Teams provider") else {
        return Mapped { kind: DestinationKind::TeamsWorkflows, recipient: None };
    };
    let connector = match &url {
        Val::Plain(u) => {
            u.parse::<reqwest::Url>().ok().and_then(|u| u.host_str().map(|h| h.ends_with(".webhook.office.com"))).unwrap_or(false)
        }
        Val::Ref(_) => {
            c.note(
                "secretRef",
                "the webhook URL is in the Secret (not read): taken as a Teams workflow URL (`teams-workflows`); \
                 for an Office 365 connector URL (*.webhook.office.com) change the type to `teams`",
            );
            false
        }
    };
    let kind = if connector { DestinationKind::Teams } else { DestinationKind::TeamsWorkflows };
    let service = c.service.to_string();
    c.set("recipientUrls", json!({ service.clone(): url.text() }));
    Mapped { kind, recipient: named(c, &service) }
}

/// `googlechat`: the space's webhook, as the recipient named after the service.
pub(super) fn googlechat(c: &mut Ctx<'_>) -> Mapped {
    let kind = DestinationKind::Googlechat;
    let Some(url) = webhook_address(c, "a Google Chat provider") else { return Mapped { kind, recipient: None } };
    let service = c.service.to_string();
    c.set("webhooks", json!({ service.clone(): url.text() }));
    Mapped { kind, recipient: named(c, &service) }
}

/// `webex`: the bot's token; the channel (a room id) is the recipient.
pub(super) fn webex(c: &mut Ctx<'_>) -> Mapped {
    let kind = DestinationKind::Webex;
    let t = token(c, "a Webex provider");
    c.set("token", json!(t));
    api_base(c, "apiUrl", "/v1/messages", "https://webexapis.com");
    let Some(room) = c.spec_str("channel") else {
        c.todo(
            "",
            "a Webex provider posts to the room its channel names, and it names none: the Alerts that use it are kept commented out",
        );
        return Mapped { kind, recipient: None };
    };
    Mapped { kind, recipient: named(c, &room) }
}

/// `telegram`: the bot's token; the channel (a chat id or `@name`) is the recipient.
/// Flux ignores the address.
pub(super) fn telegram(c: &mut Ctx<'_>) -> Mapped {
    let kind = DestinationKind::Telegram;
    let t = token(c, "a Telegram provider");
    c.set("token", json!(t));
    if c.spec_str("address").is_some() {
        c.note("address", "Flux's Telegram provider ignores the address (it always uses Telegram's Bot API); left out");
    }
    let Some(chat) = c.spec_str("channel") else {
        c.todo(
            "",
            "a Telegram provider posts to the chat its channel names, and it names none: the Alerts that use it are kept commented out",
        );
        return Mapped { kind, recipient: None };
    };
    if let Some((id, _)) = chat.split_once(':').filter(|(id, _)| id.trim_start_matches('-').chars().all(|d| d.is_ascii_digit())) {
        c.todo("channel", format!("{chat:?} names a forum topic; driftwatch's telegram service posts to the chat {id}, not to a topic"));
        return Mapped { kind, recipient: named(c, id) };
    }
    Mapped { kind, recipient: named(c, &chat) }
}
