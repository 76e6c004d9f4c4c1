//! Operations provider types: Opsgenie, PagerDuty, Alertmanager, Grafana, GitHub
//! commit statuses, and the generic webhooks (plain and HMAC-signed).

use serde_json::json;

use super::{Mapped, address_not_read, address_unknown, api_base, named, token, whole};
use crate::import::flux::provider::{Ctx, Val};
use crate::model::DestinationKind;

/// `opsgenie`: the API key from the Secret's token, the recipient named after the
/// service; the address (`https://api.opsgenie.com/v2/alerts`) gives `apiUrl`.
pub(super) fn opsgenie(c: &mut Ctx<'_>) -> Mapped {
    let key = token(c, "an Opsgenie provider");
    let service = c.service.to_string();
    api_base(c, "apiUrl", "/v2/alerts", "https://api.opsgenie.com");
    c.set("apiKeys", json!({ service.clone(): key }));
    Mapped { kind: DestinationKind::Opsgenie, recipient: named(c, &service) }
}

/// PagerDuty's Events API, driftwatch's `apiUrl` default.
const PAGERDUTY: &str = "https://events.pagerduty.com";

/// `pagerduty`: the channel is the integration's routing key (in the spec, as Flux
/// has it); Flux posts to the address's scheme and host.
pub(super) fn pagerduty(c: &mut Ctx<'_>) -> Mapped {
    let kind = DestinationKind::Pagerduty;
    let service = c.service.to_string();
    match c.address() {
        Some(Val::Plain(a)) => match a.parse::<reqwest::Url>() {
            Ok(u) if u.origin().ascii_serialization() == PAGERDUTY => {}
            Ok(u) => c.set("apiUrl", json!(u.origin().ascii_serialization())),
            Err(e) => c.todo("address", format!("{a:?} is not a URL ({e}): set `apiUrl`")),
        },
        Some(Val::Ref(_)) => address_not_read(c, "apiUrl", PAGERDUTY),
        None => {}
    }
    let Some(key) = c.spec_str("channel") else {
        c.todo("", "a PagerDuty provider's channel is its routing key, and it names none: fill in the reference written in its place");
        let key = c.placeholder("routing-key");
        c.set("routingKeys", json!({ service.clone(): key }));
        return Mapped { kind, recipient: named(c, &service) };
    };
    c.note("channel", "the routing key is written as it stands in the Provider; it can move into secrets.yaml as a `$key` reference");
    c.set("routingKeys", json!({ service.clone(): key }));
    Mapped { kind, recipient: named(c, &service) }
}

/// Basic authentication (`username` in the spec or the Secret, `password` in the
/// Secret), or a bearer token.
fn auth(c: &mut Ctx<'_>, basic_key: &str, bearer_key: &str) {
    let user = c.spec_str("username");
    if let Some(t) = c.key("token") {
        c.set(bearer_key, json!(t));
    } else if let Some(password) = c.key("password") {
        let username = if c.consume("username") {
            let secret = c.secret_name();
            c.todo("secretRef", format!("the Secret {secret}'s `username` is not read, and `{basic_key}.username` is not a secret reference: write the user name in"));
            format!("from-{secret}-username")
        } else {
            user.unwrap_or_default()
        };
        c.set(basic_key, json!({"username": username, "password": password}));
    }
}

/// `alertmanager`: the address (`https://host:port/api/v2/alerts/`) as a target and
/// `apiPath`; the Secret's token as `bearerToken`, or `basicAuth`.
pub(super) fn alertmanager(c: &mut Ctx<'_>) -> Mapped {
    let kind = DestinationKind::Alertmanager;
    match c.address() {
        Some(Val::Plain(a)) => match a.parse::<reqwest::Url>() {
            Ok(u) => {
                c.set("targets", json!([u.origin().ascii_serialization()]));
                if u.path().trim_end_matches('/') != "/api/v2/alerts" {
                    c.set("apiPath", json!(u.path()));
                }
            }
            Err(e) => {
                c.todo("address", format!("{a:?} is not a URL ({e}): set `targets`"));
                c.set("targets", json!([a]));
            }
        },
        other => {
            address_unknown(c, other.is_some(), "Alertmanager", "targets");
            c.set("targets", json!(["https://alertmanager.invalid:9093"]));
        }
    }
    auth(c, "basicAuth", "bearerToken");
    Mapped { kind, recipient: whole(c) }
}

/// `grafana`: the address (`https://grafana/api/annotations`) gives `apiUrl`, the
/// Secret's token `apiKey`; the tag `flux` (which Flux's annotations carry) is the
/// recipient.
pub(super) fn grafana(c: &mut Ctx<'_>) -> Mapped {
    let kind = DestinationKind::Grafana;
    match c.address() {
        Some(Val::Plain(a)) => match super::base_of(&a, "/annotations") {
            Some(b) => c.set("apiUrl", json!(b)),
            None => {
                c.todo(
                    "address",
                    format!("{a:?} does not end in /annotations: check `apiUrl`, Grafana's API base (https://grafana.example.com/api)"),
                );
                c.set("apiUrl", json!(a));
            }
        },
        other => {
            address_unknown(c, other.is_some(), "Grafana", "apiUrl");
            c.set("apiUrl", json!("https://grafana.invalid/api"));
        }
    }
    if c.key("token").is_none() && c.has_key("password") {
        c.consume("password");
        c.consume("username");
        let secret = c.secret_name();
        c.todo("secretRef", format!("the Secret {secret} holds basic authentication; driftwatch's grafana service takes an API key: fill in the reference written in `apiKey`"));
        let key = c.placeholder("token");
        c.set("apiKey", json!(key));
    } else {
        let t = c.key("token").unwrap_or_else(|| token(c, "a Grafana provider"));
        c.set("apiKey", json!(t));
    }
    Mapped { kind, recipient: named(c, "flux") }
}

/// The reason of the mark every GitHub service gets: Flux sets a status of its own on
/// each event; driftwatch writes what a template's `github` section says.
const GITHUB_SECTION: &str = "driftwatch's github service writes what a template's `github` section says (`status`, \
     `pullRequestComment`), for the repository and revision the unit gives (`repoURLPath`, `revisionPath`); \
     the triggers' templates have none: add one to the templates of the triggers subscribed, or nothing is sent";

/// `github` (commit statuses) and `githubpullrequestcomment`: the repository of the
/// address as the only one written to; a token, or the GitHub App's keys.
pub(super) fn github(c: &mut Ctx<'_>) -> Mapped {
    let kind = DestinationKind::Github;
    match c.address() {
        Some(Val::Plain(a)) => repository(c, &a),
        _ => c.todo("address", "the repository's address is not known (not set, or in the Secret): set `repositories` to it (owner/name)"),
    }
    if let Some(t) = c.key("token") {
        c.set("token", json!(t));
    } else if c.has_key("githubAppPrivateKey") {
        app(c);
    } else {
        let t = token(c, "a GitHub provider");
        c.set("token", json!(t));
    }
    c.todo("type", GITHUB_SECTION);
    if c.ty == "githubpullrequestcomment" {
        c.note("type", "Flux comments on the pull request an object's `event.toolkit.fluxcd.io/change_request` annotation names; driftwatch's `pullRequestComment` comments on every pull request of the revision");
    }
    Mapped { kind, recipient: whole(c) }
}

/// `repositories` (and `enterpriseBaseURL` off github.com) from the repository URL.
fn repository(c: &mut Ctx<'_>, address: &str) {
    let Ok(u) = address.parse::<reqwest::Url>() else {
        c.todo("address", format!("{address:?} is not a URL: set `repositories` (owner/name)"));
        return;
    };
    let parts: Vec<&str> = u.path().trim_matches('/').trim_end_matches(".git").split('/').collect();
    match (parts.as_slice(), u.host_str()) {
        ([owner, name], Some(host)) if !owner.is_empty() && !name.is_empty() => {
            if host != "github.com" {
                c.set("enterpriseBaseURL", json!(format!("{}/api/v3", u.origin().ascii_serialization())));
            }
            c.set("repositories", json!([format!("{owner}/{name}")]));
        }
        _ => c.todo("address", format!("{address:?} is not a repository URL (https://github.com/owner/name): set `repositories`")),
    }
}

/// A GitHub App's keys: the private key a reference; the ids, which driftwatch does not
/// take as references, marked to be written in.
fn app(c: &mut Ctx<'_>) {
    let key = c.key("githubAppPrivateKey").unwrap_or_default();
    let secret = c.secret_name();
    for (k, to) in [("githubAppID", "appID"), ("githubAppInstallationID", "installationID")] {
        c.consume(k);
        c.set(to, json!(format!("from-{secret}-{k}")));
    }
    c.todo("secretRef", format!("`appID` and `installationID` are not secret references: write in the values of the Secret {secret}'s githubAppID and githubAppInstallationID"));
    if c.consume("githubAppBaseURL") {
        c.todo("secretRef", format!("the Secret {secret}'s githubAppBaseURL is not read: set `enterpriseBaseURL` to it"));
    }
    c.set("privateKey", json!(key));
}

/// The reason of the mark every webhook service gets.
const WEBHOOK_SECTION: &str = "driftwatch's webhook service sends what a template's `webhook.<service>` section says \
     (method, path, headers, body), not Flux's event JSON; the triggers' templates have none for this service: add \
     one to the templates of the triggers subscribed, or nothing is sent";

/// `headers` in the Secret: a YAML map of headers in one value, which is not read.
fn secret_headers(c: &mut Ctx<'_>) {
    if c.consume("headers") {
        let secret = c.secret_name();
        c.todo("secretRef", format!("the Secret {secret}'s `headers` (a map of HTTP headers in one value) is not read: add `headers: {{Name: $key}}` with a secret key for each"));
    }
}

/// `generic`: a `webhook` service to the address.
pub(super) fn generic(c: &mut Ctx<'_>) -> Mapped {
    let kind = DestinationKind::Webhook;
    let url = url_or_placeholder(c);
    c.set("url", json!(url));
    secret_headers(c);
    c.todo("type", WEBHOOK_SECTION);
    Mapped { kind, recipient: whole(c) }
}

/// `generic-hmac`: a `signed-webhook` service: the Secret's token is the HMAC key, and
/// the signature is Flux's header (`X-Signature: sha256=<hex>` over the body).
pub(super) fn generic_hmac(c: &mut Ctx<'_>) -> Mapped {
    let kind = DestinationKind::SignedWebhook;
    let url = url_or_placeholder(c);
    c.set("url", json!(url));
    let key = token(c, "a generic-hmac provider");
    c.set("secret", json!(key));
    secret_headers(c);
    c.note(
        "type",
        "the request is signed as Flux signs it (X-Signature: sha256=<hex> of the body), with X-Signature-Timestamp too; \
         its body is driftwatch's record of the notification (ECS), not Flux's event JSON: the receiver must read it",
    );
    Mapped { kind, recipient: whole(c) }
}

/// The webhook's URL, or a mark and a placeholder.
fn url_or_placeholder(c: &mut Ctx<'_>) -> String {
    match c.address() {
        Some(a) => a.text().to_string(),
        None => {
            let secret = c.secret_name();
            c.todo(
                "",
                format!("no address (neither spec.address nor the Secret {secret}'s `address`): fill in the reference written in `url`"),
            );
            c.placeholder("address")
        }
    }
}
