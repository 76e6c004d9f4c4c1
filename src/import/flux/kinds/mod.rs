//! Each Flux provider type driftwatch has a kind for, and how its Provider's fields
//! become that kind's settings (`src/deliver/kinds/<kind>/config.rs`); the types it
//! has none for, with why.

mod chat;
mod ops;

use serde_json::{Map, Value};

use super::provider::{Ctx, Val};
use crate::model::DestinationKind;

/// What a Provider's type mapping gives: the kind of its service, and the recipient
/// its Alerts' subscriptions name (`service` or `service:recipient`), `None` when the
/// Provider names none driftwatch can send to (marked).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(in super::super) struct Mapped {
    pub(in super::super) kind: DestinationKind,
    pub(in super::super) recipient: Option<String>,
}

pub(in super::super) type Mapper = fn(&mut Ctx<'_>) -> Mapped;

/// Every provider type notification-controller has (v1beta3's enum).
pub(in super::super) const FLUX_TYPES: &[&str] = &[
    "slack",
    "discord",
    "msteams",
    "rocket",
    "generic",
    "generic-hmac",
    "github",
    "gitlab",
    "gitea",
    "giteapullrequestcomment",
    "bitbucketserver",
    "bitbucket",
    "azuredevops",
    "googlechat",
    "googlepubsub",
    "webex",
    "sentry",
    "azureeventhub",
    "telegram",
    "lark",
    "matrix",
    "opsgenie",
    "alertmanager",
    "grafana",
    "githubdispatch",
    "githubpullrequestcomment",
    "gitlabmergerequestcomment",
    "pagerduty",
    "datadog",
    "nats",
    "zulip",
    "otel",
    "zoom",
    "incident.io",
];

/// The mapping of each type converted, and the Secret keys Flux's docs give that type
/// (assumed when the Secret is not in the input).
const TABLE: &[(&str, Mapper, &[&str])] = &[
    ("slack", chat::slack, &["token"]),
    ("discord", chat::discord, &["address"]),
    ("rocket", chat::rocket, &["address"]),
    ("msteams", chat::msteams, &["address"]),
    ("googlechat", chat::googlechat, &["address"]),
    ("webex", chat::webex, &["token"]),
    ("telegram", chat::telegram, &["token"]),
    ("opsgenie", ops::opsgenie, &["token"]),
    ("pagerduty", ops::pagerduty, &[]),
    ("alertmanager", ops::alertmanager, &["token"]),
    ("grafana", ops::grafana, &["token"]),
    ("github", ops::github, &["token"]),
    ("githubpullrequestcomment", ops::github, &["token"]),
    ("generic", ops::generic, &["address"]),
    ("generic-hmac", ops::generic_hmac, &["token"]),
];

/// The mapping of `ty`, and the keys its Secret usually has (a Slack Provider whose
/// address is not the Web API's keeps its webhook URL in the Secret's `address`).
pub(in super::super) fn mapper(ty: &str, spec: &Map<String, Value>) -> Option<(Mapper, &'static [&'static str])> {
    let (_, m, keys) = TABLE.iter().find(|(t, ..)| *t == ty)?;
    let address = spec.get("address").and_then(Value::as_str).unwrap_or("");
    let keys: &'static [&'static str] = match ty {
        "slack" if address.contains("/api/") => &["token"],
        "slack" if address.is_empty() => &["address"],
        "slack" => &[],
        // The address is in the Secret unless the spec has it.
        "discord" | "rocket" | "msteams" | "googlechat" | "generic" if !address.is_empty() => &[],
        "generic-hmac" if address.is_empty() => &["address", "token"],
        _ => keys,
    };
    Some((*m, keys))
}

/// Why a type is not converted.
pub(in super::super) fn unmapped_reason(ty: &str) -> String {
    let why = match ty {
        "" => return "the Provider has no spec.type".to_string(),
        "matrix" => "; docs/destinations.md shows a Matrix room message sent through a `webhook` service",
        "otel" => "; its `otlp` service sends logs, not the traces Flux's otel provider sends",
        "gitlab" | "gitea" | "bitbucket" | "bitbucketserver" | "azuredevops" => {
            "; it sets commit statuses on GitHub only (a `github` service)"
        }
        "gitlabmergerequestcomment" | "giteapullrequestcomment" => "; it comments on GitHub pull requests only (a `github` service)",
        t if FLUX_TYPES.contains(&t) => "",
        t => return format!("unknown provider type `{t}`"),
    };
    format!("driftwatch has no destination for the provider type `{ty}`{why}; the Alerts that use it are kept commented out")
}

/// Whether a kind's settings have `caFile`.
pub(in super::super) fn has_ca_file(kind: DestinationKind) -> bool {
    matches!(
        kind,
        DestinationKind::Webhook
            | DestinationKind::SignedWebhook
            | DestinationKind::Alertmanager
            | DestinationKind::Grafana
            | DestinationKind::Mattermost
    )
}

/// `service:recipient`.
fn named(c: &Ctx<'_>, recipient: &str) -> Option<String> {
    Some(format!("{}:{recipient}", c.service))
}

/// The service alone (a kind whose recipient is not used).
fn whole(c: &Ctx<'_>) -> Option<String> {
    Some(c.service.to_string())
}

/// `url` without `suffix` (and a trailing `/`), when it ends so.
fn base_of(url: &str, suffix: &str) -> Option<String> {
    url.trim_end_matches('/').strip_suffix(suffix).map(|b| b.trim_end_matches('/').to_string())
}

/// The address as a base URL for a setting whose default is `default`: `path` cut off
/// the end; nothing when it is the default; a mark when it is a Secret's (the value is
/// not read) or does not end in `path`.
fn api_base(c: &mut Ctx<'_>, setting: &str, path: &str, default: &str) {
    match c.address() {
        Some(Val::Plain(a)) => match base_of(&a, path) {
            Some(b) if b == default => {}
            Some(b) => c.set(setting, Value::String(b)),
            None => {
                c.todo("address", format!("{a:?} does not end in {path}: set `{setting}` to the API's base URL ({default} when absent)"))
            }
        },
        Some(Val::Ref(_)) => address_not_read(c, setting, default),
        None => {}
    }
}

/// The mark for an address that is the Secret's (its value is not read), where the
/// setting `setting` has the default `default`.
fn address_not_read(c: &mut Ctx<'_>, setting: &str, default: &str) {
    let secret = c.secret_name();
    c.todo(
        "secretRef",
        format!("the Secret {secret}'s `address` overrides the address and is not read: set `{setting}` if it is not {default}"),
    );
}

/// The mark for a required address that is the Secret's or absent (`given`: whether
/// there is one), with a placeholder `setting` written in its place.
fn address_unknown(c: &mut Ctx<'_>, given: bool, what: &str, setting: &str) {
    let why = if given { format!("is the Secret {}'s `address` (not read)", c.secret_name()) } else { "is not set".to_string() };
    c.todo("address", format!("the {what} URL {why}: replace the `{setting}` written in its place"));
}

/// The Secret's token; when it has none, a mark that the type needs one and a
/// reference to fill in (`$<service>-token`, in the secrets skeleton).
fn token(c: &mut Ctx<'_>, what: &str) -> String {
    if let Some(t) = c.key("token") {
        return t;
    }
    let secret = c.secret_name();
    c.todo(
        "secretRef",
        format!("{what} needs a token, and the Secret ({secret}) has no `token` key: fill in the reference written in its place"),
    );
    c.placeholder("token")
}

#[cfg(test)]
mod tests;
