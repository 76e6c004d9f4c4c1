//! Service configuration per destination kind, as written under `services:` in
//! `driftwatch.yaml`. Secret values are `$key` references, resolved only when a
//! delivery client is built (see [`crate::secret`]).

use std::collections::BTreeMap;

use serde::Deserialize;

use crate::model::DestinationKind;

/// Slack: a bot token for the Web API, or an incoming-webhook URL.
#[derive(Debug, Clone, Default, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct SlackService {
    /// Bot token (`$slack-token`).
    pub token: Option<String>,
    /// Incoming-webhook URL (`$slack-webhook`), instead of a token.
    pub webhook_url: Option<String>,
    /// Web API base URL; Slack's own when absent.
    pub api_url: Option<String>,
    pub username: Option<String>,
    pub icon: Option<String>,
}

/// How an SMTP connection is secured.
#[derive(Debug, Clone, Copy, Default, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum TlsMode {
    None,
    #[default]
    Starttls,
    Implicit,
}

/// E-mail over SMTP.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct EmailService {
    pub host: String,
    /// 587 for STARTTLS, 465 for implicit TLS, 25 otherwise, when absent.
    pub port: Option<u16>,
    pub from: String,
    pub username: Option<String>,
    /// `$smtp-password`.
    pub password: Option<String>,
    #[serde(default)]
    pub tls: TlsMode,
}

/// PagerDuty Events API v2.
#[derive(Debug, Clone, Default, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct PagerDutyService {
    /// Recipient name -> routing key (`$pd-routing-key`).
    #[serde(default)]
    pub routing_keys: BTreeMap<String, String>,
    /// Events API base URL; PagerDuty's own when absent.
    pub api_url: Option<String>,
}

#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct BasicAuth {
    pub username: String,
    /// `$webhook-password`.
    pub password: String,
}

/// A generic HTTP webhook; templates add method, path, headers and body.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct WebhookService {
    pub url: String,
    #[serde(default)]
    pub headers: BTreeMap<String, String>,
    pub basic_auth: Option<BasicAuth>,
    /// `$webhook-token`.
    pub bearer_token: Option<String>,
    /// TLS certificates are verified unless this is set.
    #[serde(default)]
    pub insecure_skip_verify: bool,
}

/// The configuration of one named service.
#[derive(Debug, Clone, PartialEq)]
pub enum ServiceConfig {
    Console,
    Slack(SlackService),
    Email(EmailService),
    Pagerduty(PagerDutyService),
    Webhook(WebhookService),
}

impl ServiceConfig {
    pub fn kind(&self) -> DestinationKind {
        match self {
            ServiceConfig::Console => DestinationKind::Console,
            ServiceConfig::Slack(_) => DestinationKind::Slack,
            ServiceConfig::Email(_) => DestinationKind::Email,
            ServiceConfig::Pagerduty(_) => DestinationKind::Pagerduty,
            ServiceConfig::Webhook(_) => DestinationKind::Webhook,
        }
    }

    /// Builds the typed configuration of `kind` from the YAML mapping (without `type`).
    pub fn from_value(kind: DestinationKind, v: serde_json::Value) -> Result<ServiceConfig, String> {
        let e = |e: serde_json::Error| e.to_string();
        Ok(match kind {
            DestinationKind::Console => {
                if v.as_object().is_some_and(|m| !m.is_empty()) {
                    return Err("a console service takes no settings".into());
                }
                ServiceConfig::Console
            }
            DestinationKind::Slack => ServiceConfig::Slack(serde_json::from_value(v).map_err(e)?),
            DestinationKind::Email => ServiceConfig::Email(serde_json::from_value(v).map_err(e)?),
            DestinationKind::Pagerduty => ServiceConfig::Pagerduty(serde_json::from_value(v).map_err(e)?),
            DestinationKind::Webhook => ServiceConfig::Webhook(serde_json::from_value(v).map_err(e)?),
        })
    }

    /// Every string setting, for finding `$secret` references.
    pub fn strings(&self) -> Vec<&str> {
        let mut out: Vec<&str> = Vec::new();
        match self {
            ServiceConfig::Console => {}
            ServiceConfig::Slack(s) => out.extend([&s.token, &s.webhook_url, &s.api_url].into_iter().flatten().map(String::as_str)),
            ServiceConfig::Email(s) => out.extend([&s.username, &s.password].into_iter().flatten().map(String::as_str)),
            ServiceConfig::Pagerduty(s) => out.extend(s.routing_keys.values().map(String::as_str)),
            ServiceConfig::Webhook(s) => {
                out.push(&s.url);
                out.extend(s.headers.values().map(String::as_str));
                out.extend(s.bearer_token.as_deref());
                if let Some(b) = &s.basic_auth {
                    out.push(&b.password);
                }
            }
        }
        out
    }
}
