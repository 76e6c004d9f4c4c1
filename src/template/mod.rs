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
use serde_json::{Map, Value, json};

use chrono::{DateTime, Utc};

use crate::drift::Drift;
use crate::drift::episode::Episode;
use crate::model::{App, DestinationKind, Severity};
use crate::source::{At, ConfigError, SourceFile};

/// Most bytes one rendered field may have; longer text is cut (JSON fields fail).
pub const MAX_FIELD_BYTES: usize = 64 * 1024;

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
pub enum FieldKind {
    Text,
    Json,
}

/// All compiled templates of one configuration.
pub struct TemplateSet {
    hb: Handlebars<'static>,
    /// Template name -> field path -> registered handlebars name.
    fields: BTreeMap<String, BTreeMap<String, (String, FieldKind)>>,
    /// Per template, the settings of its sections that are not templates (GitHub's
    /// booleans and required contexts), by section.
    settings: BTreeMap<String, SectionSettings>,
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
    /// The same data with every string escaped for one destination's markup, built on
    /// the first render that needs it (dropped when the data changes).
    escaped: Option<(Markup, Context)>,
    /// The same data for the fields that render to JSON (cards, attachments, details):
    /// every string escaped for the destination's markup where it has one, then
    /// [`json_safe`], so a value from the cluster cannot end a JSON string and add
    /// fields of its own, whatever the template writes around it.
    json: Option<(Option<Markup>, Context)>,
}

/// A string as a JSON field's template may place it inside a JSON string literal
/// without changing the JSON's structure: `"`, `\` and control characters become
/// private-use characters (U+E000 plus their code), which end no string. The JSON
/// helpers (`json_escape`, `json`, `toJson`, `toPrettyJson`) turn them back before they
/// escape, so a template that escapes shows the text as it was
/// ([`helpers::json_restore`]).
fn json_safe(s: &str) -> String {
    s.chars()
        .map(|c| match c {
            '"' | '\\' => helpers::json_hidden(c),
            // The place hidden characters are kept in is not the cluster's to write:
            // what arrives there would be put back as markup by the JSON helpers.
            '\u{E000}'..='\u{E0FF}' => '\u{FFFD}',
            c if c.is_control() && u32::from(c) < 0x100 => helpers::json_hidden(c),
            c => c,
        })
        .collect()
}

/// `v` with every string passed through [`json_safe`] (keys left as they are).
fn json_safe_all(v: &Value) -> Value {
    match v {
        Value::String(s) => Value::String(json_safe(s)),
        Value::Array(items) => Value::Array(items.iter().map(json_safe_all).collect()),
        Value::Object(m) => Value::Object(m.iter().map(|(k, v)| (k.clone(), json_safe_all(v))).collect()),
        other => other.clone(),
    }
}

/// Markup whose control characters text from the cluster must not carry into what is
/// sent: a `User-Agent: <!channel> <https://evil|Re-authenticate>` stays text.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Markup {
    /// Slack mrkdwn: `&`, `<`, `>` (mentions, links and commands are written with them).
    Slack,
    /// HTML (an e-mail's `email.html`).
    Html,
    /// Markdown (Teams, Teams Workflows, Mattermost, Webex, Rocket.Chat): link, image,
    /// emphasis and code syntax backslash-escaped, `<`/`>` (autolinks, inline HTML,
    /// Teams' `<at>` mentions) as entities, and `@` followed by an invisible joiner so
    /// `@channel`, `@all` and `@here` mention nobody.
    Markdown,
    /// Google Chat's text syntax: `<url|text>` links and `<users/all>` mentions are
    /// written with angle brackets, which become look-alike single guillemets.
    GoogleChat,
}

impl Markup {
    /// Which markup a destination kind's fields are in, and whether `field` is one of them.
    fn of(kind: crate::model::DestinationKind, field: &str) -> Option<Markup> {
        use crate::model::DestinationKind as K;
        match kind {
            K::Slack => Some(Markup::Slack),
            K::Email if field == "email.html" => Some(Markup::Html),
            // Only the text fields: the JSON ones (cards, attachments) are written by the
            // template's own JSON, where a backslash is an escape of JSON's.
            K::Teams | K::TeamsWorkflows | K::Mattermost | K::Webex | K::Rocketchat
                if matches!(field, "message" | "teams.title" | "teams.summary" | "teams.text") =>
            {
                Some(Markup::Markdown)
            }
            K::Googlechat if field == "message" => Some(Markup::GoogleChat),
            _ => None,
        }
    }

    fn escape(self, s: &str) -> String {
        // The private-use characters JSON fields hide `"`, `\` and control characters in
        // are put back by the JSON helpers: arriving in the cluster's text they would
        // come back as `<` after this escape.
        let scrubbed;
        let s = if s.chars().any(|c| ('\u{E000}'..='\u{E0FF}').contains(&c)) {
            scrubbed = s.chars().map(|c| if ('\u{E000}'..='\u{E0FF}').contains(&c) { '\u{FFFD}' } else { c }).collect::<String>();
            scrubbed.as_str()
        } else {
            s
        };
        match self {
            Markup::Slack => helpers::slack_escape(s),
            Markup::Html => {
                let mut out = String::with_capacity(s.len());
                for c in s.chars() {
                    match c {
                        '&' => out.push_str("&amp;"),
                        '<' => out.push_str("&lt;"),
                        '>' => out.push_str("&gt;"),
                        '"' => out.push_str("&quot;"),
                        '\'' => out.push_str("&#39;"),
                        c => out.push(c),
                    }
                }
                out
            }
            Markup::Markdown => {
                let mut out = String::with_capacity(s.len());
                for c in s.chars() {
                    match c {
                        '\\' | '`' | '*' | '_' | '~' | '[' | ']' | '(' | ')' | '!' | '|' | '#' => {
                            out.push('\\');
                            out.push(c);
                        }
                        '<' => out.push_str("&lt;"),
                        '>' => out.push_str("&gt;"),
                        '@' => out.push_str("@\u{2060}"),
                        c => out.push(c),
                    }
                }
                out
            }
            Markup::GoogleChat => s.replace('<', "\u{2039}").replace('>', "\u{203a}"),
        }
    }

    /// `v` with every string (keys left as they are) escaped.
    fn escape_all(self, v: &Value) -> Value {
        match v {
            Value::String(s) => Value::String(self.escape(s)),
            Value::Array(items) => Value::Array(items.iter().map(|i| self.escape_all(i)).collect()),
            Value::Object(m) => Value::Object(m.iter().map(|(k, v)| (k.clone(), self.escape_all(v))).collect()),
            other => other.clone(),
        }
    }
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
        RenderContext { ctx: Context::from(data), escaped: None, json: None }
    }

    /// Adds what the pass found: `drift` and `episode` (the open or last resolved one,
    /// seen at `now`; null when there is none).
    pub fn with_pass(mut self, drift: &Drift, episode: Option<&Episode>, now: DateTime<Utc>) -> RenderContext {
        self.escaped = None;
        self.json = None;
        if let Some(map) = self.ctx.data_mut().as_object_mut() {
            map.insert("drift".into(), drift.view());
            map.insert("episode".into(), episode.map_or(Value::Null, |e| e.view(now)));
        }
        self
    }

    /// Sets one top-level value templates see (`group` for a grouped route's message).
    pub fn set(&mut self, key: &str, value: Value) {
        self.escaped = None;
        self.json = None;
        if let Some(map) = self.ctx.data_mut().as_object_mut() {
            map.insert(key.into(), value);
        }
    }

    /// The data for `t`, the same data escaped for `markup` when asked, and the data
    /// for JSON fields (escaped for `json`'s markup, then [`json_safe`]) when the
    /// template has any (`json` is `Some`).
    fn for_target(&mut self, t: &Target<'_>, markup: Option<Markup>, json: Option<Option<Markup>>) -> Contexts<'_> {
        let set = |ctx: &mut Context| {
            if let Some(map) = ctx.data_mut().as_object_mut() {
                map.insert("trigger".into(), Value::String(t.trigger.into()));
                map.insert("serviceType".into(), Value::String(t.kind.as_str().into()));
                map.insert("recipient".into(), Value::String(t.recipient.into()));
                map.insert("resolved".into(), Value::Bool(t.resolved));
            }
        };
        set(&mut self.ctx);
        if let Some(m) = markup
            && self.escaped.as_ref().is_none_or(|(have, _)| *have != m)
        {
            self.escaped = Some((m, Context::from(m.escape_all(self.ctx.data()))));
        }
        if let Some(jm) = json
            && self.json.as_ref().is_none_or(|(have, _)| *have != jm)
        {
            let base = match jm {
                Some(m) => m.escape_all(self.ctx.data()),
                None => self.ctx.data().clone(),
            };
            self.json = Some((jm, Context::from(json_safe_all(&base))));
        }
        let escaped = match (markup, self.escaped.as_mut()) {
            (Some(_), Some((_, e))) => {
                set(e);
                Some(&*e)
            }
            _ => None,
        };
        let json_ctx = match (json, self.json.as_mut()) {
            (Some(_), Some((_, j))) => {
                set(j);
                Some(&*j)
            }
            _ => None,
        };
        Contexts { ctx: &self.ctx, escaped, json: json_ctx }
    }
}

/// The contexts one target's fields render with.
struct Contexts<'a> {
    ctx: &'a Context,
    escaped: Option<&'a Context>,
    json: Option<&'a Context>,
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
    pub fn compile<D: TemplateFields>(defs: &[(String, D, SourceFile)]) -> Result<(TemplateSet, Vec<Warning>), Vec<ConfigError>> {
        let mut hb = Handlebars::new();
        hb.register_escape_fn(handlebars::no_escape);
        hb.set_strict_mode(false);
        register_helpers(&mut hb);
        let mut errors = Vec::new();
        let mut warnings = Vec::new();
        let mut fields = BTreeMap::new();
        let mut settings = BTreeMap::new();
        // Where each registered field was written, for the partials' errors.
        let mut written: BTreeMap<String, (Option<crate::source::Pos>, String)> = BTreeMap::new();
        for (name, def, file) in defs {
            let mut mine = BTreeMap::new();
            let all = def.fields();
            if all.is_empty() {
                errors.push(ConfigError::new(
                    file.pos_at_start(),
                    format!("template {name}"),
                    "a template needs a message or a destination field",
                ));
            }
            for (field, kind, src) in all {
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
            fields.insert(name.clone(), mine);
            let own = def.settings();
            if !own.is_empty() {
                settings.insert(name.clone(), own);
            }
        }
        for e in partials::check(hb.get_templates()) {
            let (pos, key) = written.get(&e.template).cloned().unwrap_or((None, format!("template {}", e.template)));
            errors.push(ConfigError::new(pos, key, e.message));
        }
        if errors.is_empty() { Ok((TemplateSet { hb, fields, settings }, warnings)) } else { Err(errors) }
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
        // Slack's fields are all mrkdwn; of an e-mail only `email.html` is markup.
        let markup = match target.kind {
            crate::model::DestinationKind::Email if !fields.contains_key("email.html") => None,
            k => Markup::of(k, "message").or(Markup::of(k, "email.html")),
        };
        let kind = target.kind;
        // The JSON fields' markup: the kind's for that field (Slack's are all mrkdwn).
        let json = fields.iter().find(|(_, (_, k))| *k == FieldKind::Json).map(|(path, _)| Markup::of(kind, path));
        let contexts = ctx.for_target(target, markup, json);
        let mut f = Fields {
            hb: &self.hb,
            template: name,
            fields,
            ctx: contexts.ctx,
            escaped: contexts.escaped.map(|e| (e, kind)),
            json: contexts.json,
            settings: self.settings.get(name),
            message: String::new(),
            severity: None,
        };
        f.message = f.text("message")?.unwrap_or_default();
        f.severity = f.severity_of("severity")?;
        let payload = encode(&f, target, app)?;
        Ok(Rendered { payload: Value::Object(payload), severity: f.severity.unwrap_or_default() })
    }
}

/// Shapes a destination kind's payload from a template's fields (`deliver::kinds::encoder`
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
    /// The data escaped for the destination's markup, for the fields in it.
    escaped: Option<(&'a Context, crate::model::DestinationKind)>,
    /// The data for the fields that render to JSON (see `RenderContext::json`).
    json: Option<&'a Context>,
    settings: Option<&'a SectionSettings>,
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

    /// The settings of the template's `section` that are not templates, as the kind
    /// that defines the section typed them (GitHub's: which parts it has, booleans,
    /// required contexts).
    pub fn settings<T: 'static>(&self, section: &str) -> Option<&T> {
        self.settings?.iter().find(|(s, _)| *s == section)?.1.downcast_ref()
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
        let Some((reg, field_kind)) = self.fields.get(field) else { return Ok(None) };
        // Rendered into a writer that stops the render once the field passes its bound:
        // a template looping over a large list must not build a gigabyte first.
        let mut out = Bounded { buf: Vec::new(), over: false };
        let ctx = match (self.json, self.escaped) {
            (Some(j), _) if *field_kind == FieldKind::Json => j,
            (_, Some((e, kind))) if Markup::of(kind, field).is_some() => e,
            _ => self.ctx,
        };
        let rendered = self.hb.render_with_context_to_write(reg, ctx, &mut out);
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
            s.truncate(crate::text::prefix(&s, MAX_FIELD_BYTES).len());
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
        // The fields the template defines under `section.`, in name order.
        let prefix = format!("{section}.");
        let fields: &BTreeMap<String, (String, FieldKind)> = self.fields;
        for (path, (_, kind)) in fields.range(prefix.clone()..).take_while(|(k, _)| k.starts_with(&prefix)) {
            let Some(name) = path.strip_prefix(&prefix) else { continue };
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

/// A destination kind's template section, as the kind defines it
/// (`deliver/kinds/<kind>/template.rs`): what a template file may hold under the kind's
/// name, checked when the file loads.
pub trait Section: serde::de::DeserializeOwned + Clone + std::fmt::Debug + Default + Send + Sync + 'static {
    /// Whether a template may have it (`false`: the kind reads the message only).
    const PRESENT: bool = true;
    /// Its fields (`slack.attachments`), and whether each renders to JSON: what
    /// `driftwatch import` maps Argo CD's fields onto. A `*` segment is a name the
    /// template chooses (`webhook.*.body`, `alertmanager.labels.*`).
    const FIELDS: &'static [(&'static str, FieldKind)] = &[];
    /// Its settings that are not templates (`github.deployment.autoMerge`): the import
    /// keeps them as written.
    const SETTINGS: &'static [&'static str] = &[];
    /// Every field it holds, with its path and kind.
    fn fields<'a>(&'a self, all: &mut Vec<(String, FieldKind, Option<&'a At<String>>)>);
    /// Its settings that are not templates, which the kind's client reads back when it
    /// sends (GitHub's booleans and required contexts).
    fn settings(&self) -> Option<Box<dyn std::any::Any + Send + Sync>> {
        None
    }
}

/// Per section of one template (`github`), its settings that are not templates, typed
/// by the kind that defines the section.
pub type SectionSettings = Vec<(&'static str, Box<dyn std::any::Any + Send + Sync>)>;

/// A template definition as the destination kinds' registry reads it
/// (`deliver::kinds::TemplateDef`): its fields to compile, and the settings of its
/// sections that are not templates, which a kind's client reads back.
pub trait TemplateFields {
    /// Every field with its path (`slack.attachments`) and kind.
    fn fields(&self) -> Vec<(String, FieldKind, &At<String>)>;
    /// Per section (`github`), its settings that are not templates.
    fn settings(&self) -> SectionSettings {
        Vec::new()
    }
}

#[cfg(test)]
mod tests;
