//! Turns a firing into the payload for a destination kind by rendering handlebars
//! templates (the only module that knows handlebars).
//!
//! A template has a `message` and optional fields per destination kind. Every field is
//! compiled at load time. Output is not HTML-escaped (Slack's `<url|text>` must survive);
//! a reference to a missing variable renders empty, as in Argo CD.

pub mod helpers;
pub mod partials;
pub mod schema;
pub mod sprig;

use std::collections::BTreeMap;

use handlebars::{Context, Handlebars};
use serde::Deserialize;
use serde_json::{Map, Value, json};

use chrono::{DateTime, Utc};

use crate::drift::Drift;
use crate::drift::episode::Episode;
use crate::model::{App, DestinationKind, Severity};
use crate::source::{At, ConfigError, SourceFile};

/// Most bytes one rendered field may have; longer text is cut (JSON fields fail).
pub const MAX_FIELD_BYTES: usize = 64 * 1024;

/// Slack fields of a template.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SlackDef {
    /// Message text; the template's `message` when absent.
    pub text: Option<At<String>>,
    /// Legacy attachments, a JSON array.
    pub attachments: Option<At<String>>,
    /// Block Kit blocks, a JSON array.
    pub blocks: Option<At<String>>,
    /// Messages with the same rendered key go to one thread.
    #[serde(rename = "groupingKey")]
    pub grouping_key: Option<At<String>>,
}

/// E-mail fields of a template.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EmailDef {
    pub subject: Option<At<String>>,
    /// Plain-text body; the template's `message` when absent.
    pub body: Option<At<String>>,
    /// Optional HTML part.
    pub html: Option<At<String>>,
}

/// PagerDuty Events API v2 fields of a template.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PagerDutyDef {
    /// At most 1,024 characters after rendering (longer is cut); `message` when absent.
    pub summary: Option<At<String>>,
    /// `critical`, `error`, `warning` or `info`; `error` when absent.
    pub severity: Option<At<String>>,
    /// The affected system; the Application's `namespace/name` when absent.
    pub source: Option<At<String>>,
    pub component: Option<At<String>>,
    pub group: Option<At<String>>,
    pub class: Option<At<String>>,
    /// A JSON object.
    #[serde(rename = "customDetails")]
    pub custom_details: Option<At<String>>,
}

/// Fields for one webhook service (`webhook.<service name>` in the template).
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WebhookDef {
    /// HTTP method; `POST` when absent.
    pub method: Option<At<String>>,
    /// Appended to the service URL.
    pub path: Option<At<String>>,
    #[serde(default)]
    pub headers: BTreeMap<String, At<String>>,
    pub body: Option<At<String>>,
}

/// A template file.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TemplateDef {
    /// The text every destination falls back to.
    pub message: Option<At<String>>,
    /// `critical`, `error`, `warning` or `info` (default `info`): the SIEM record's
    /// severity and PagerDuty's when `pagerduty.severity` is absent.
    pub severity: Option<At<String>>,
    pub slack: Option<SlackDef>,
    pub email: Option<EmailDef>,
    /// Also read under Argo CD's name, `pagerdutyv2`.
    #[serde(alias = "pagerdutyv2")]
    pub pagerduty: Option<PagerDutyDef>,
    /// Keyed by webhook service name.
    #[serde(default)]
    pub webhook: BTreeMap<String, WebhookDef>,
    pub teams: Option<TeamsDef>,
    pub opsgenie: Option<OpsgenieDef>,
    pub alertmanager: Option<AlertmanagerDef>,
    pub googlechat: Option<GoogleChatDef>,
    pub github: Option<GitHubDef>,
    pub mattermost: Option<MattermostDef>,
    pub telegram: Option<TelegramDef>,
    pub pushover: Option<PushoverDef>,
    pub newrelic: Option<NewRelicDef>,
    pub rocketchat: Option<RocketChatDef>,
}

/// Rocket.Chat fields (Argo CD's names).
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RocketChatDef {
    /// A JSON array of attachments.
    pub attachments: Option<At<String>>,
    pub alias: Option<At<String>>,
    pub emoji: Option<At<String>>,
    pub avatar: Option<At<String>>,
}

/// Pushover fields.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct PushoverDef {
    pub title: Option<At<String>>,
    /// -2 to 1.
    pub priority: Option<At<String>>,
    pub url: Option<At<String>>,
    pub url_title: Option<At<String>>,
    pub sound: Option<At<String>>,
    pub device: Option<At<String>>,
}

/// New Relic deployment-marker fields (Argo CD's names).
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NewRelicDef {
    pub revision: Option<At<String>>,
    pub changelog: Option<At<String>>,
    pub description: Option<At<String>>,
    pub user: Option<At<String>>,
}

/// Mattermost fields (Argo CD's names).
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MattermostDef {
    /// A JSON array of Slack-style attachments.
    pub attachments: Option<At<String>>,
}

/// Telegram fields.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TelegramDef {
    /// `Markdown`, `MarkdownV2` or `HTML`.
    #[serde(rename = "parseMode")]
    pub parse_mode: Option<At<String>>,
}

/// GitHub fields (Argo CD's names). Without `status`, `deployment` or
/// `pullRequestComment` a template is not sent to a github service.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct GitHubDef {
    /// The repository; `app.spec.source.repoURL` (or the first source's) when absent.
    #[serde(rename = "repoURLPath")]
    pub repo_url_path: Option<At<String>>,
    /// The commit; `app.status.operationState.syncResult.revision` (else
    /// `app.status.sync.revision`) when absent.
    pub revision_path: Option<At<String>>,
    pub status: Option<GitHubStatusDef>,
    pub deployment: Option<GitHubDeploymentDef>,
    pub pull_request_comment: Option<GitHubCommentDef>,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GitHubStatusDef {
    /// `error`, `failure`, `pending` or `success` (default).
    pub state: Option<At<String>>,
    /// The status context; `continuous-delivery/<app>` when absent.
    pub label: Option<At<String>>,
    #[serde(rename = "targetURL")]
    pub target_url: Option<At<String>>,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct GitHubDeploymentDef {
    pub state: Option<At<String>>,
    pub environment: Option<At<String>>,
    #[serde(rename = "environmentURL")]
    pub environment_url: Option<At<String>>,
    #[serde(rename = "logURL")]
    pub log_url: Option<At<String>>,
    /// The ref deployed; the revision when absent.
    pub reference: Option<At<String>>,
    #[serde(default)]
    pub required_contexts: Vec<String>,
    pub auto_merge: Option<bool>,
    pub transient_environment: Option<bool>,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct GitHubCommentDef {
    pub content: Option<At<String>>,
    /// A comment carrying the tag is updated instead of adding another.
    pub comment_tag: Option<At<String>>,
}

/// Microsoft Teams MessageCard fields (Argo CD's names).
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct TeamsDef {
    pub title: Option<At<String>>,
    pub summary: Option<At<String>>,
    pub text: Option<At<String>>,
    pub theme_color: Option<At<String>>,
    /// JSON arrays.
    pub facts: Option<At<String>>,
    pub sections: Option<At<String>>,
    pub potential_action: Option<At<String>>,
    /// A whole card (JSON object), sent as it is.
    pub template: Option<At<String>>,
}

/// Opsgenie alert fields (Argo CD's names).
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct OpsgenieDef {
    pub description: Option<At<String>>,
    /// `P1` to `P5`; from the severity when absent.
    pub priority: Option<At<String>>,
    /// Stable per Application, trigger and condition when absent.
    pub alias: Option<At<String>>,
    pub note: Option<At<String>>,
    pub entity: Option<At<String>>,
    pub user: Option<At<String>>,
    /// JSON arrays.
    pub tags: Option<At<String>>,
    pub actions: Option<At<String>>,
    pub responders: Option<At<String>>,
    pub visible_to: Option<At<String>>,
    /// A JSON object.
    pub details: Option<At<String>>,
}

/// Alertmanager alert fields (Argo CD's names).
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AlertmanagerDef {
    #[serde(default)]
    pub labels: BTreeMap<String, At<String>>,
    #[serde(default)]
    pub annotations: BTreeMap<String, At<String>>,
    #[serde(rename = "generatorURL")]
    pub generator_url: Option<At<String>>,
}

/// Google Chat fields (Argo CD's names).
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GoogleChatDef {
    /// JSON arrays: legacy cards and cards v2.
    pub cards: Option<At<String>>,
    #[serde(rename = "cardsV2")]
    pub cards_v2: Option<At<String>>,
    #[serde(rename = "threadKey")]
    pub thread_key: Option<At<String>>,
}

/// Why a notification could not be rendered.
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum RenderError {
    #[error("template {0} does not exist")]
    UnknownTemplate(String),
    #[error("template {template} field {field}: {message}")]
    Field { template: String, field: String, message: String },
    #[error("template {template} field {field} did not render to valid JSON: {error}")]
    InvalidJson { template: String, field: String, error: String },
    #[error("template {template} field {field} is too long ({bytes} bytes rendered)")]
    TooLong { template: String, field: String, bytes: usize },
    #[error("template {template} has no webhook.{service} field")]
    NoWebhookField { template: String, service: String },
    #[error("template {template} has no {kind} fields")]
    NoKindFields { template: String, kind: &'static str },
}

/// Whether a field must render to JSON.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum FieldKind {
    Text,
    Json,
}

/// All compiled templates of one configuration.
pub struct TemplateSet {
    hb: Handlebars<'static>,
    /// Template name -> field path -> registered handlebars name.
    fields: BTreeMap<String, BTreeMap<String, (String, FieldKind)>>,
    /// The `github` sections (which parts a template has, and its settings that are
    /// not templates: booleans, required contexts).
    github: BTreeMap<String, GitHubDef>,
}

impl std::fmt::Debug for TemplateSet {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TemplateSet").field("templates", &self.fields.keys().collect::<Vec<_>>()).finish()
    }
}

/// A compile-time warning (for `check`): a path the Application schema does not have.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Warning {
    pub pos: Option<crate::source::Pos>,
    pub message: String,
}

/// What a rendering is for: the trigger that fired and the destination.
#[derive(Debug, Clone, Copy)]
pub struct Target<'a> {
    pub trigger: &'a str,
    pub kind: DestinationKind,
    /// The service name (selects `webhook.<service>` fields).
    pub service: &'a str,
    pub recipient: &'a str,
    /// Rendering the notice that the condition cleared (`{{#if resolved}}`).
    pub resolved: bool,
}

/// A rendered notification: the payload for its kind and its severity.
#[derive(Debug, Clone, PartialEq)]
pub struct Rendered {
    pub payload: Value,
    pub severity: Severity,
}

/// The data a template sees for one Application, built once per Application and
/// adjusted per destination (`serviceType`, `recipient`).
pub struct RenderContext {
    ctx: Context,
}

impl RenderContext {
    pub fn new(app: &App, context: &BTreeMap<String, String>) -> RenderContext {
        let data = json!({
            "app": app.object,
            "context": context,
            "trigger": "",
            "serviceType": "",
            "recipient": "",
            "resolved": false,
        });
        RenderContext { ctx: Context::from(data) }
    }

    /// Adds what the pass found: `drift` and `episode` (the open or last resolved one,
    /// seen at `now`; null when there is none).
    pub fn with_pass(mut self, drift: &Drift, episode: Option<&Episode>, now: DateTime<Utc>) -> RenderContext {
        if let Some(map) = self.ctx.data_mut().as_object_mut() {
            map.insert("drift".into(), drift.view());
            map.insert("episode".into(), episode.map_or(Value::Null, |e| e.view(now)));
        }
        self
    }

    fn for_target(&mut self, t: &Target<'_>) -> &Context {
        if let Some(map) = self.ctx.data_mut().as_object_mut() {
            map.insert("trigger".into(), Value::String(t.trigger.into()));
            map.insert("serviceType".into(), Value::String(t.kind.as_str().into()));
            map.insert("recipient".into(), Value::String(t.recipient.into()));
            map.insert("resolved".into(), Value::Bool(t.resolved));
        }
        &self.ctx
    }
}

/// driftwatch's helpers, then the Sprig ones (which may replace a name with Sprig's
/// meaning); registered here so that neither set depends on the other.
fn register_helpers(hb: &mut Handlebars<'static>) {
    helpers::register(hb);
    sprig::register(hb);
}

/// Renders one handlebars text with driftwatch's helpers and no HTML escaping, as every
/// template field is rendered: for the importer's tests, which compare translations
/// with Go's output.
#[cfg(test)]
pub(crate) fn render_text(src: &str, data: &serde_json::Value) -> Result<String, String> {
    let mut hb = Handlebars::new();
    hb.register_escape_fn(handlebars::no_escape);
    register_helpers(&mut hb);
    hb.render_template(src, data).map_err(|e| e.to_string())
}

/// A writer that takes one byte more than [`MAX_FIELD_BYTES`], then refuses (which
/// stops the render): what passes the bound is cut or refused by the caller anyway.
struct Bounded {
    buf: Vec<u8>,
    over: bool,
}

impl std::io::Write for Bounded {
    fn write(&mut self, data: &[u8]) -> std::io::Result<usize> {
        let room = (MAX_FIELD_BYTES + 1).saturating_sub(self.buf.len());
        if data.len() > room {
            self.buf.extend_from_slice(&data[..room]);
            self.over = true;
            return Err(std::io::Error::other("the field passes its bound"));
        }
        self.buf.extend_from_slice(data);
        Ok(data.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// Whether a handlebars text compiles.
pub fn compiles(src: &str) -> Result<(), CompileError> {
    handlebars::Template::compile(src).map(|_| ()).map_err(|e| CompileError(e.to_string()))
}

/// A template text that does not compile: handlebars' message (no handlebars type
/// leaves this module).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct CompileError(pub String);

impl TemplateSet {
    /// Compiles templates; every error names file, line and column. `defs` are
    /// `(name, definition, file)`.
    pub fn compile(defs: &[(String, TemplateDef, SourceFile)]) -> Result<(TemplateSet, Vec<Warning>), Vec<ConfigError>> {
        let mut hb = Handlebars::new();
        hb.register_escape_fn(handlebars::no_escape);
        hb.set_strict_mode(false);
        register_helpers(&mut hb);
        let mut errors = Vec::new();
        let mut warnings = Vec::new();
        let mut fields = BTreeMap::new();
        let mut github = BTreeMap::new();
        // Where each registered field was written, for the partials' errors.
        let mut written: BTreeMap<String, (Option<crate::source::Pos>, String)> = BTreeMap::new();
        for (name, def, file) in defs {
            let mut mine = BTreeMap::new();
            for (field, kind, src) in def_fields(def) {
                let reg = format!("{name}/{field}");
                if let Err(e) = hb.register_template_string(&reg, &src.value) {
                    let (line, col) = e.pos().unwrap_or((1, 1));
                    errors.push(ConfigError::new(
                        file.pos_in_scalar(&src.referenced, &src.value, line, col).or_else(|| file.pos(&src.referenced)),
                        format!("template {name}.{field}"),
                        format!("invalid handlebars: {}", e.reason()),
                    ));
                    continue;
                }
                for unknown in schema::unknown_paths(&src.value) {
                    warnings.push(Warning {
                        pos: file.pos_in_scalar(&src.referenced, &src.value, unknown.line, unknown.col),
                        message: format!(
                            "template {name}.{field}: {} does not exist in the Application schema (renders empty)",
                            unknown.path
                        ),
                    });
                }
                written.insert(reg.clone(), (file.pos(&src.referenced), format!("template {name}.{field}")));
                mine.insert(field, (reg, kind));
            }
            if def_fields(def).is_empty() {
                errors.push(ConfigError::new(
                    file.pos_at_start(),
                    format!("template {name}"),
                    "a template needs a message or a destination field",
                ));
            }
            fields.insert(name.clone(), mine);
            if let Some(g) = &def.github {
                github.insert(name.clone(), g.clone());
            }
        }
        for e in partials::check(hb.get_templates()) {
            let (pos, key) = written.get(&e.template).cloned().unwrap_or((None, format!("template {}", e.template)));
            errors.push(ConfigError::new(pos, key, e.message));
        }
        if errors.is_empty() { Ok((TemplateSet { hb, fields, github }, warnings)) } else { Err(errors) }
    }

    pub fn contains(&self, name: &str) -> bool {
        self.fields.contains_key(name)
    }

    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.fields.keys().map(String::as_str)
    }

    /// Renders template `name` for the destination of `target`: the message, the
    /// severity, and the payload `encode` (the destination kind's encoder, in its own
    /// folder under `deliver/`) shapes from the template's fields. The payload's shape
    /// per kind is documented in `docs/templates.md`.
    pub fn render(
        &self,
        name: &str,
        ctx: &mut RenderContext,
        target: &Target<'_>,
        app: &App,
        encode: Encoder,
    ) -> Result<Rendered, RenderError> {
        let fields = self.fields.get(name).ok_or_else(|| RenderError::UnknownTemplate(name.to_string()))?;
        let ctx = ctx.for_target(target);
        let mut f =
            Fields { hb: &self.hb, template: name, fields, ctx, github: self.github.get(name), message: String::new(), severity: None };
        f.message = f.text("message")?.unwrap_or_default();
        f.severity = f.severity_of("severity")?;
        let payload = encode(&f, target, app)?;
        Ok(Rendered { payload: Value::Object(payload), severity: f.severity.unwrap_or_default() })
    }
}

/// Shapes a destination kind's payload from a template's fields (`deliver::encode`
/// picks one per kind).
pub type Encoder = fn(&Fields<'_>, &Target<'_>, &App) -> Payload;

/// What an [`Encoder`] returns: the payload's fields.
pub type Payload = Result<Map<String, Value>, RenderError>;

/// The fields of one template, rendered on demand for one destination: what an
/// [`Encoder`] reads.
pub struct Fields<'a> {
    hb: &'a Handlebars<'static>,
    template: &'a str,
    fields: &'a BTreeMap<String, (String, FieldKind)>,
    ctx: &'a Context,
    github: Option<&'a GitHubDef>,
    /// The rendered `message` (empty when the template has none).
    pub message: String,
    /// The template's `severity`, when it has one.
    pub severity: Option<Severity>,
}

impl Fields<'_> {
    /// The template's name (for errors).
    pub fn template(&self) -> &str {
        self.template
    }

    /// The template's `github` section: which parts it has, and its settings that are
    /// not templates (booleans, required contexts).
    pub fn github(&self) -> Option<&GitHubDef> {
        self.github
    }

    /// The payload of a kind that sends the message as rendered.
    pub fn message_only(&self) -> Payload {
        Ok(Map::from_iter([("message".to_string(), Value::from(self.message.clone()))]))
    }

    /// The payload of a SIEM kind: the message without trailing blank space (the record
    /// around it is built at delivery).
    pub fn message_trimmed(&self) -> Payload {
        Ok(Map::from_iter([("message".to_string(), Value::from(self.message.trim_end()))]))
    }

    /// The payload of a kind that sends the message and its section's fields under
    /// their own names (text trimmed, JSON parsed).
    pub fn message_and_section(&self, section: &str) -> Payload {
        let mut out = Map::from_iter([("message".to_string(), Value::from(self.message.clone()))]);
        self.copy_section(section, &mut out)?;
        Ok(out)
    }

    /// The paths of the fields under `prefix` (`webhook.siem.headers.`), in order.
    pub fn paths_under(&self, prefix: &str) -> Vec<&str> {
        self.fields.range(prefix.to_string()..).map(|(k, _)| k.as_str()).take_while(|k| k.starts_with(prefix)).collect()
    }

    /// The field rendered as text, if the template has it (cut at
    /// [`MAX_FIELD_BYTES`]).
    pub fn text(&self, field: &str) -> Result<Option<String>, RenderError> {
        let Some((reg, _)) = self.fields.get(field) else { return Ok(None) };
        // Rendered into a writer that stops the render once the field passes its bound:
        // a template looping over a large list must not build a gigabyte first.
        let mut out = Bounded { buf: Vec::new(), over: false };
        let rendered = self.hb.render_with_context_to_write(reg, self.ctx, &mut out);
        if let Err(e) = rendered
            && !out.over
        {
            return Err(RenderError::Field { template: self.template.into(), field: field.into(), message: e.to_string() });
        }
        let mut s = match String::from_utf8(out.buf) {
            Ok(s) => s,
            // Cut inside a character at the bound: keep the whole ones.
            Err(e) => {
                let valid = e.utf8_error().valid_up_to();
                let mut b = e.into_bytes();
                b.truncate(valid);
                String::from_utf8(b).unwrap_or_default()
            }
        };
        if s.len() > MAX_FIELD_BYTES {
            if self.fields.get(field).is_some_and(|(_, k)| *k == FieldKind::Json) {
                return Err(RenderError::TooLong { template: self.template.into(), field: field.into(), bytes: s.len() });
            }
            let mut cut = MAX_FIELD_BYTES;
            while !s.is_char_boundary(cut) {
                cut -= 1;
            }
            s.truncate(cut);
        }
        Ok(Some(s))
    }

    /// The field as a severity (`critical`, `error`, `warning`, `info`), if the
    /// template has it; anything else is an error naming the field.
    pub fn severity_of(&self, field: &str) -> Result<Option<Severity>, RenderError> {
        let Some(s) = self.text(field)? else { return Ok(None) };
        Severity::parse(&s).map(Some).ok_or_else(|| RenderError::Field {
            template: self.template.into(),
            field: field.into(),
            message: format!("severity {:?} is not one of critical, error, warning, info", s.trim()),
        })
    }

    /// Every field of `section` the template defines, into `out` under its own name:
    /// text trimmed, JSON parsed.
    pub fn copy_section(&self, section: &str, out: &mut Map<String, Value>) -> Result<(), RenderError> {
        for (path, kind) in SECTION_FIELDS {
            let Some(name) = path.strip_prefix(section).and_then(|p| p.strip_prefix('.')) else { continue };
            let value = match kind {
                FieldKind::Text => self.text(path)?.map(|v| Value::from(v.trim())),
                FieldKind::Json => self.json(path)?,
            };
            if let Some(v) = value {
                out.insert(name.into(), v);
            }
        }
        Ok(())
    }

    /// The field parsed as JSON, if the template has it and it rendered to something
    /// (blank is absent); invalid JSON is an error naming the field.
    pub fn json(&self, field: &str) -> Result<Option<Value>, RenderError> {
        let Some(s) = self.text(field)? else { return Ok(None) };
        if s.trim().is_empty() {
            return Ok(None);
        }
        serde_json::from_str(&s).map(Some).map_err(|e| RenderError::InvalidJson {
            template: self.template.into(),
            field: field.into(),
            error: e.to_string(),
        })
    }
}

/// The fields of the destination sections whose field names are fixed (not
/// `webhook.<service>.*`, `alertmanager.labels.*` or `github.*`), and whether each must
/// render to JSON. `def_fields` gives the same paths and kinds (a test holds them
/// together); `driftwatch import` maps Argo CD's fields onto these.
const SECTION_FIELDS: &[(&str, FieldKind)] = {
    use FieldKind::{Json, Text};
    &[
        ("slack.text", Text),
        ("slack.attachments", Json),
        ("slack.blocks", Json),
        ("slack.groupingKey", Text),
        ("email.subject", Text),
        ("email.body", Text),
        ("email.html", Text),
        ("pagerduty.summary", Text),
        ("pagerduty.severity", Text),
        ("pagerduty.source", Text),
        ("pagerduty.component", Text),
        ("pagerduty.group", Text),
        ("pagerduty.class", Text),
        ("pagerduty.customDetails", Json),
        ("teams.title", Text),
        ("teams.summary", Text),
        ("teams.text", Text),
        ("teams.themeColor", Text),
        ("teams.facts", Json),
        ("teams.sections", Json),
        ("teams.potentialAction", Json),
        ("teams.template", Json),
        ("opsgenie.description", Text),
        ("opsgenie.priority", Text),
        ("opsgenie.alias", Text),
        ("opsgenie.note", Text),
        ("opsgenie.entity", Text),
        ("opsgenie.user", Text),
        ("opsgenie.tags", Json),
        ("opsgenie.actions", Json),
        ("opsgenie.responders", Json),
        ("opsgenie.visibleTo", Json),
        ("opsgenie.details", Json),
        ("pushover.title", Text),
        ("pushover.priority", Text),
        ("pushover.url", Text),
        ("pushover.urlTitle", Text),
        ("pushover.sound", Text),
        ("pushover.device", Text),
        ("newrelic.revision", Text),
        ("newrelic.changelog", Text),
        ("newrelic.description", Text),
        ("newrelic.user", Text),
        ("rocketchat.attachments", Json),
        ("rocketchat.alias", Text),
        ("rocketchat.emoji", Text),
        ("rocketchat.avatar", Text),
        ("mattermost.attachments", Json),
        ("telegram.parseMode", Text),
        ("googlechat.cards", Json),
        ("googlechat.cardsV2", Json),
        ("googlechat.threadKey", Text),
    ]
};

/// Every field of the destination sections with fixed names, and whether it must
/// render to JSON.
pub fn section_fields() -> impl Iterator<Item = (&'static str, bool)> {
    SECTION_FIELDS.iter().map(|(p, k)| (*p, *k == FieldKind::Json))
}

/// Whether `section.field` (`teams.facts`) is a field of a destination section.
pub fn has_field(path: &str) -> bool {
    SECTION_FIELDS.iter().any(|(p, _)| *p == path)
}

/// Whether a template may have a `section:` for a destination: one with fields of
/// fixed names, or one keyed by name (`webhook.<service>`, `alertmanager.labels`,
/// `github.status`).
pub fn has_section(section: &str) -> bool {
    SECTION_FIELDS.iter().any(|(p, _)| p.split('.').next() == Some(section)) || matches!(section, "webhook" | "alertmanager" | "github")
}

/// Whether `section.field` must render to JSON.
pub fn is_json_field(path: &str) -> bool {
    SECTION_FIELDS.iter().any(|(p, k)| *p == path && *k == FieldKind::Json)
}

/// Every field of a definition, with its path (`slack.attachments`) and kind.
fn def_fields(def: &TemplateDef) -> Vec<(String, FieldKind, &At<String>)> {
    use FieldKind::{Json, Text};
    let mut all: Vec<(String, FieldKind, Option<&At<String>>)> =
        vec![("message".into(), Text, def.message.as_ref()), ("severity".into(), Text, def.severity.as_ref())];
    if let Some(s) = &def.slack {
        all.push(("slack.text".into(), Text, s.text.as_ref()));
        all.push(("slack.attachments".into(), Json, s.attachments.as_ref()));
        all.push(("slack.blocks".into(), Json, s.blocks.as_ref()));
        all.push(("slack.groupingKey".into(), Text, s.grouping_key.as_ref()));
    }
    if let Some(e) = &def.email {
        all.push(("email.subject".into(), Text, e.subject.as_ref()));
        all.push(("email.body".into(), Text, e.body.as_ref()));
        all.push(("email.html".into(), Text, e.html.as_ref()));
    }
    if let Some(p) = &def.pagerduty {
        all.push(("pagerduty.summary".into(), Text, p.summary.as_ref()));
        all.push(("pagerduty.severity".into(), Text, p.severity.as_ref()));
        all.push(("pagerduty.source".into(), Text, p.source.as_ref()));
        all.push(("pagerduty.component".into(), Text, p.component.as_ref()));
        all.push(("pagerduty.group".into(), Text, p.group.as_ref()));
        all.push(("pagerduty.class".into(), Text, p.class.as_ref()));
        all.push(("pagerduty.customDetails".into(), Json, p.custom_details.as_ref()));
    }
    for (service, w) in &def.webhook {
        all.push((format!("webhook.{service}.method"), Text, w.method.as_ref()));
        all.push((format!("webhook.{service}.path"), Text, w.path.as_ref()));
        for (h, v) in &w.headers {
            all.push((format!("webhook.{service}.headers.{h}"), Text, Some(v)));
        }
        all.push((format!("webhook.{service}.body"), Text, w.body.as_ref()));
    }
    if let Some(t) = &def.teams {
        for (f, k, v) in [
            ("title", Text, &t.title),
            ("summary", Text, &t.summary),
            ("text", Text, &t.text),
            ("themeColor", Text, &t.theme_color),
            ("facts", Json, &t.facts),
            ("sections", Json, &t.sections),
            ("potentialAction", Json, &t.potential_action),
            ("template", Json, &t.template),
        ] {
            all.push((format!("teams.{f}"), k, v.as_ref()));
        }
    }
    if let Some(o) = &def.opsgenie {
        for (f, k, v) in [
            ("description", Text, &o.description),
            ("priority", Text, &o.priority),
            ("alias", Text, &o.alias),
            ("note", Text, &o.note),
            ("entity", Text, &o.entity),
            ("user", Text, &o.user),
            ("tags", Json, &o.tags),
            ("actions", Json, &o.actions),
            ("responders", Json, &o.responders),
            ("visibleTo", Json, &o.visible_to),
            ("details", Json, &o.details),
        ] {
            all.push((format!("opsgenie.{f}"), k, v.as_ref()));
        }
    }
    if let Some(a) = &def.alertmanager {
        for (l, v) in &a.labels {
            all.push((format!("alertmanager.labels.{l}"), Text, Some(v)));
        }
        for (l, v) in &a.annotations {
            all.push((format!("alertmanager.annotations.{l}"), Text, Some(v)));
        }
        all.push(("alertmanager.generatorURL".into(), Text, a.generator_url.as_ref()));
    }
    if let Some(g) = &def.github {
        all.push(("github.repoURLPath".into(), Text, g.repo_url_path.as_ref()));
        all.push(("github.revisionPath".into(), Text, g.revision_path.as_ref()));
        if let Some(st) = &g.status {
            all.push(("github.status.state".into(), Text, st.state.as_ref()));
            all.push(("github.status.label".into(), Text, st.label.as_ref()));
            all.push(("github.status.targetURL".into(), Text, st.target_url.as_ref()));
        }
        if let Some(d) = &g.deployment {
            for (f, v) in [
                ("state", &d.state),
                ("environment", &d.environment),
                ("environmentURL", &d.environment_url),
                ("logURL", &d.log_url),
                ("reference", &d.reference),
            ] {
                all.push((format!("github.deployment.{f}"), Text, v.as_ref()));
            }
        }
        if let Some(c) = &g.pull_request_comment {
            all.push(("github.pullRequestComment.content".into(), Text, c.content.as_ref()));
            all.push(("github.pullRequestComment.commentTag".into(), Text, c.comment_tag.as_ref()));
        }
    }
    if let Some(p) = &def.pushover {
        for (f, v) in [
            ("title", &p.title),
            ("priority", &p.priority),
            ("url", &p.url),
            ("urlTitle", &p.url_title),
            ("sound", &p.sound),
            ("device", &p.device),
        ] {
            all.push((format!("pushover.{f}"), Text, v.as_ref()));
        }
    }
    if let Some(n) = &def.newrelic {
        for (f, v) in [("revision", &n.revision), ("changelog", &n.changelog), ("description", &n.description), ("user", &n.user)] {
            all.push((format!("newrelic.{f}"), Text, v.as_ref()));
        }
    }
    if let Some(r) = &def.rocketchat {
        all.push(("rocketchat.attachments".into(), Json, r.attachments.as_ref()));
        for (f, v) in [("alias", &r.alias), ("emoji", &r.emoji), ("avatar", &r.avatar)] {
            all.push((format!("rocketchat.{f}"), Text, v.as_ref()));
        }
    }
    if let Some(m) = &def.mattermost {
        all.push(("mattermost.attachments".into(), Json, m.attachments.as_ref()));
    }
    if let Some(t) = &def.telegram {
        all.push(("telegram.parseMode".into(), Text, t.parse_mode.as_ref()));
    }
    if let Some(g) = &def.googlechat {
        all.push(("googlechat.cards".into(), Json, g.cards.as_ref()));
        all.push(("googlechat.cardsV2".into(), Json, g.cards_v2.as_ref()));
        all.push(("googlechat.threadKey".into(), Text, g.thread_key.as_ref()));
    }
    all.into_iter().filter_map(|(path, kind, v)| v.map(|v| (path, kind, v))).collect()
}

#[cfg(test)]
mod tests;
