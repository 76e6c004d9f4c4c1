//! Service configuration as written under `services:` in `driftwatch.yaml`, and the
//! step that turns a validated configuration into running delivery clients. Secret
//! values are `$key` references, resolved only here.

use std::collections::BTreeMap;
use std::sync::Arc;

use serde::Deserialize;
use serde_json::Value;

use super::alertmanager::AlertmanagerConfig;
use super::ecs::Origin;
use super::email::EmailConfig;
use super::github::GitHubConfig;
use super::googlechat::GoogleChatConfig;
use super::grafana::GrafanaConfig;
use super::mattermost::MattermostConfig;
use super::newrelic::NewRelicConfig;
use super::opsgenie::OpsgenieConfig;
use super::outcome::{ConfigDuration, DeliverySettings, RateSettings, RetrySettings};
use super::pagerduty::PagerDutyConfig;
use super::pushover::PushoverConfig;
use super::rocketchat::RocketChatConfig;
use super::signed_webhook::SignedWebhookConfig;
use super::slack::SlackConfig;
use super::splunk::SplunkConfig;
use super::syslog::SyslogConfig;
use super::teams::TeamsConfig;
use super::teams_workflows::TeamsWorkflowsConfig;
use super::telegram::TelegramConfig;
use super::webex::WebexConfig;
use super::webhook::WebhookConfig;
use super::worker::{Deliverer, ServiceRuntime};
use crate::model::DestinationKind;
use crate::secret::{Secret, Secrets};
use crate::state::StateStore;

/// The kind-specific configuration of one named service.
#[derive(Debug, Clone, PartialEq)]
pub enum ServiceConfig {
    Console,
    Slack(SlackConfig),
    Email(EmailConfig),
    Pagerduty(PagerDutyConfig),
    Webhook(WebhookConfig),
    Splunk(SplunkConfig),
    SignedWebhook(SignedWebhookConfig),
    Syslog(SyslogConfig),
    Teams(TeamsConfig),
    Opsgenie(OpsgenieConfig),
    Alertmanager(AlertmanagerConfig),
    Googlechat(GoogleChatConfig),
    Github(GitHubConfig),
    Telegram(TelegramConfig),
    Mattermost(MattermostConfig),
    Grafana(GrafanaConfig),
    Webex(WebexConfig),
    TeamsWorkflows(TeamsWorkflowsConfig),
    Pushover(PushoverConfig),
    Newrelic(NewRelicConfig),
    Rocketchat(RocketChatConfig),
}

/// Settings every service may override (`timeout`, `retry`, `rateLimit`).
#[derive(Debug, Clone, Default, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct CommonDef {
    /// One attempt's time limit; 10s.
    pub timeout: Option<ConfigDuration>,
    pub retry: Option<RetrySettings>,
    pub rate_limit: Option<RateSettings>,
    /// Deliveries in flight at once (1 to 64); a default per kind.
    pub concurrency: Option<usize>,
}

/// A service's configuration: its kind's settings and the common ones.
#[derive(Debug, Clone, PartialEq)]
pub struct ServiceSpec {
    pub config: ServiceConfig,
    pub settings: DeliverySettings,
}

const COMMON_KEYS: [&str; 4] = ["timeout", "retry", "rateLimit", "concurrency"];

impl ServiceSpec {
    /// Builds the typed configuration of `kind` from the YAML mapping (without `type`).
    pub fn from_value(kind: DestinationKind, v: Value) -> Result<ServiceSpec, String> {
        let mut map = match v {
            Value::Object(m) => m,
            Value::Null => serde_json::Map::new(),
            _ => return Err("a service must be a mapping".into()),
        };
        let mut common = serde_json::Map::new();
        for k in COMMON_KEYS {
            if let Some(v) = map.remove(k) {
                common.insert(k.into(), v);
            }
        }
        let common: CommonDef = serde_json::from_value(Value::Object(common)).map_err(|e| e.to_string())?;
        let mut settings = DeliverySettings::for_kind(kind);
        if let Some(t) = common.timeout {
            settings.timeout = t.0;
        }
        if let Some(r) = common.retry {
            settings.retry = r;
        }
        if let Some(r) = common.rate_limit {
            if !(r.per_second > 0.0 && r.per_second.is_finite()) {
                return Err("rateLimit.perSecond must be a positive number".into());
            }
            settings.rate = r;
        }
        if let Some(c) = common.concurrency {
            if !(1..=64).contains(&c) {
                return Err(format!("concurrency must be from 1 to 64, not {c}"));
            }
            settings.concurrency = c;
        }
        let v = Value::Object(map);
        let e = |e: serde_json::Error| e.to_string();
        let config = match kind {
            DestinationKind::Console => {
                if v.as_object().is_some_and(|m| !m.is_empty()) {
                    return Err("a console service takes no settings but timeout, retry and rateLimit".into());
                }
                ServiceConfig::Console
            }
            DestinationKind::Slack => ServiceConfig::Slack(serde_json::from_value(v).map_err(e)?),
            DestinationKind::Email => ServiceConfig::Email(serde_json::from_value(v).map_err(e)?),
            DestinationKind::Pagerduty => ServiceConfig::Pagerduty(serde_json::from_value(v).map_err(e)?),
            DestinationKind::Webhook => ServiceConfig::Webhook(serde_json::from_value(v).map_err(e)?),
            DestinationKind::Splunk => ServiceConfig::Splunk(serde_json::from_value(v).map_err(e)?),
            DestinationKind::SignedWebhook => ServiceConfig::SignedWebhook(serde_json::from_value(v).map_err(e)?),
            DestinationKind::Syslog => ServiceConfig::Syslog(serde_json::from_value(v).map_err(e)?),
            DestinationKind::Teams => ServiceConfig::Teams(serde_json::from_value(v).map_err(e)?),
            DestinationKind::Opsgenie => ServiceConfig::Opsgenie(serde_json::from_value(v).map_err(e)?),
            DestinationKind::Alertmanager => ServiceConfig::Alertmanager(serde_json::from_value(v).map_err(e)?),
            DestinationKind::Googlechat => ServiceConfig::Googlechat(serde_json::from_value(v).map_err(e)?),
            DestinationKind::Github => ServiceConfig::Github(serde_json::from_value(v).map_err(e)?),
            DestinationKind::Telegram => ServiceConfig::Telegram(serde_json::from_value(v).map_err(e)?),
            DestinationKind::Mattermost => ServiceConfig::Mattermost(serde_json::from_value(v).map_err(e)?),
            DestinationKind::Grafana => ServiceConfig::Grafana(serde_json::from_value(v).map_err(e)?),
            DestinationKind::Webex => ServiceConfig::Webex(serde_json::from_value(v).map_err(e)?),
            DestinationKind::TeamsWorkflows => ServiceConfig::TeamsWorkflows(serde_json::from_value(v).map_err(e)?),
            DestinationKind::Pushover => ServiceConfig::Pushover(serde_json::from_value(v).map_err(e)?),
            DestinationKind::Newrelic => ServiceConfig::Newrelic(serde_json::from_value(v).map_err(e)?),
            DestinationKind::Rocketchat => ServiceConfig::Rocketchat(serde_json::from_value(v).map_err(e)?),
        };
        if let ServiceConfig::Rocketchat(r) = &config {
            let login = r.email.is_some() && r.password.is_some() && r.user_id.is_none() && r.token.is_none();
            let token = r.user_id.is_some() && r.token.is_some() && r.email.is_none() && r.password.is_none();
            if !login && !token {
                return Err("a rocketchat service needs email and password, or userId and token".into());
            }
        }
        if let ServiceConfig::Github(g) = &config {
            let app = [&g.app_id, &g.installation_id, &g.private_key].iter().all(|x| x.is_some());
            let none = [&g.app_id, &g.installation_id, &g.private_key].iter().all(|x| x.is_none());
            if !((g.token.is_some() && none) || (g.token.is_none() && app)) {
                return Err("a github service needs either token, or appID, installationID and privateKey".into());
            }
        }
        if let ServiceConfig::Alertmanager(a) = &config
            && a.targets.is_empty()
        {
            return Err("an alertmanager service needs at least one of targets".into());
        }
        if let ServiceConfig::Slack(s) = &config
            && s.token.is_none() == s.webhook_url.is_none()
        {
            return Err("a slack service needs exactly one of token and webhookUrl".into());
        }
        Ok(ServiceSpec { config, settings })
    }
}

impl ServiceConfig {
    pub fn kind(&self) -> DestinationKind {
        match self {
            ServiceConfig::Console => DestinationKind::Console,
            ServiceConfig::Slack(_) => DestinationKind::Slack,
            ServiceConfig::Email(_) => DestinationKind::Email,
            ServiceConfig::Pagerduty(_) => DestinationKind::Pagerduty,
            ServiceConfig::Webhook(_) => DestinationKind::Webhook,
            ServiceConfig::Splunk(_) => DestinationKind::Splunk,
            ServiceConfig::SignedWebhook(_) => DestinationKind::SignedWebhook,
            ServiceConfig::Syslog(_) => DestinationKind::Syslog,
            ServiceConfig::Teams(_) => DestinationKind::Teams,
            ServiceConfig::Opsgenie(_) => DestinationKind::Opsgenie,
            ServiceConfig::Alertmanager(_) => DestinationKind::Alertmanager,
            ServiceConfig::Googlechat(_) => DestinationKind::Googlechat,
            ServiceConfig::Github(_) => DestinationKind::Github,
            ServiceConfig::Telegram(_) => DestinationKind::Telegram,
            ServiceConfig::Mattermost(_) => DestinationKind::Mattermost,
            ServiceConfig::Grafana(_) => DestinationKind::Grafana,
            ServiceConfig::Webex(_) => DestinationKind::Webex,
            ServiceConfig::TeamsWorkflows(_) => DestinationKind::TeamsWorkflows,
            ServiceConfig::Pushover(_) => DestinationKind::Pushover,
            ServiceConfig::Newrelic(_) => DestinationKind::Newrelic,
            ServiceConfig::Rocketchat(_) => DestinationKind::Rocketchat,
        }
    }

    /// Every string setting that may reference a `$secret`.
    pub fn strings(&self) -> Vec<&str> {
        let mut out: Vec<&str> = Vec::new();
        match self {
            ServiceConfig::Console | ServiceConfig::Syslog(_) => {}
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
            ServiceConfig::Splunk(s) => out.extend([s.url.as_str(), s.token.as_str()]),
            ServiceConfig::SignedWebhook(s) => {
                out.extend([s.url.as_str(), s.secret.as_str()]);
                out.extend(s.headers.values().map(String::as_str));
            }
            ServiceConfig::Teams(s) => out.extend(s.recipient_urls.values().map(String::as_str)),
            ServiceConfig::Googlechat(s) => out.extend(s.webhooks.values().map(String::as_str)),
            ServiceConfig::Opsgenie(s) => out.extend(s.api_keys.values().map(String::as_str)),
            ServiceConfig::Github(s) => out.extend([&s.token, &s.private_key].into_iter().flatten().map(String::as_str)),
            ServiceConfig::Telegram(s) => out.push(&s.token),
            ServiceConfig::Mattermost(s) => out.push(&s.token),
            ServiceConfig::Grafana(s) => out.push(&s.api_key),
            ServiceConfig::Webex(s) => out.push(&s.token),
            ServiceConfig::TeamsWorkflows(s) => out.extend(s.recipient_urls.values().map(String::as_str)),
            ServiceConfig::Pushover(s) => out.push(&s.token),
            ServiceConfig::Newrelic(s) => out.push(&s.api_key),
            ServiceConfig::Rocketchat(s) => {
                out.extend([&s.email, &s.password, &s.user_id, &s.token].into_iter().flatten().map(String::as_str))
            }
            ServiceConfig::Alertmanager(s) => {
                out.extend(s.bearer_token.as_deref());
                if let Some(b) = &s.basic_auth {
                    out.push(&b.password);
                }
            }
        }
        out
    }
}

/// What building delivery clients needs besides each service's configuration.
pub struct Env {
    /// The one shared HTTP client.
    pub http: reqwest::Client,
    pub state: Arc<StateStore>,
    pub secrets: Secrets,
    /// The config's `context:` (`argocdUrl`, `clusterName`).
    pub context: BTreeMap<String, String>,
}

impl Env {
    /// A `$key` reference (or a literal value) as a secret; the error names the key,
    /// never a value.
    pub fn secret(&self, reference: &str) -> Result<Secret, String> {
        self.secrets.resolve(reference).map_err(|e| e.to_string())
    }

    pub fn origin(&self) -> Origin {
        Origin {
            cluster: self.context.get("clusterName").cloned().unwrap_or_default(),
            argocd_url: self.context.get("argocdUrl").cloned().unwrap_or_default(),
        }
    }
}

/// Builds the client of one service; errors name what is missing (an unset secret, an
/// unreadable CA file), never a secret value.
pub fn build(name: &str, spec: &ServiceSpec, env: &Env) -> Result<ServiceRuntime, String> {
    let deliverer: Arc<dyn Deliverer> = match &spec.config {
        ServiceConfig::Console => Arc::new(super::ConsoleDeliverer),
        ServiceConfig::Slack(c) => Arc::new(super::slack::SlackClient::new(name, c, env)?),
        ServiceConfig::Email(c) => Arc::new(super::email::EmailClient::new(c, &env.secrets)?),
        ServiceConfig::Pagerduty(c) => Arc::new(super::pagerduty::PagerDutyClient::new(c, env)?),
        ServiceConfig::Webhook(c) => Arc::new(super::webhook::WebhookClient::new(c, &env.secrets, &env.http)?),
        ServiceConfig::Splunk(c) => Arc::new(super::splunk::SplunkClient::new(c, env)?),
        ServiceConfig::SignedWebhook(c) => Arc::new(super::signed_webhook::SignedWebhookClient::new(c, env)?),
        ServiceConfig::Syslog(c) => Arc::new(super::syslog::SyslogClient::new(c, env)?),
        ServiceConfig::Teams(c) => Arc::new(super::teams::TeamsClient::new(c, env)?),
        ServiceConfig::Opsgenie(c) => Arc::new(super::opsgenie::OpsgenieClient::new(c, env)?),
        ServiceConfig::Alertmanager(c) => Arc::new(super::alertmanager::AlertmanagerClient::new(c, env)?),
        ServiceConfig::Googlechat(c) => Arc::new(super::googlechat::GoogleChatClient::new(c, env)?),
        ServiceConfig::Github(c) => Arc::new(super::github::GitHubClient::new(c, env)?),
        ServiceConfig::Telegram(c) => Arc::new(super::telegram::TelegramClient::new(name, c, env)?),
        ServiceConfig::Mattermost(c) => Arc::new(super::mattermost::MattermostClient::new(name, c, env)?),
        ServiceConfig::Grafana(c) => Arc::new(super::grafana::GrafanaClient::new(c, env)?),
        ServiceConfig::Webex(c) => Arc::new(super::webex::WebexClient::new(name, c, env)?),
        ServiceConfig::TeamsWorkflows(c) => Arc::new(super::teams_workflows::TeamsWorkflowsClient::new(c, env)?),
        ServiceConfig::Pushover(c) => Arc::new(super::pushover::PushoverClient::new(c, env)?),
        ServiceConfig::Newrelic(c) => Arc::new(super::newrelic::NewRelicClient::new(c, env)?),
        ServiceConfig::Rocketchat(c) => Arc::new(super::rocketchat::RocketChatClient::new(name, c, env)?),
    };
    let mut referenced = Vec::new();
    for s in spec.config.strings() {
        for key in Secrets::references(s) {
            if let Ok(v) = env.secrets.get(&key) {
                referenced.push(v);
            }
        }
    }
    Ok(ServiceRuntime {
        name: name.to_string(),
        kind: spec.config.kind(),
        deliverer,
        settings: spec.settings,
        redactor: env.secrets.redactor(referenced),
    })
}
