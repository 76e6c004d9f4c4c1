//! Turns a firing into the payload for a destination kind by rendering handlebars
//! templates (the only module that knows handlebars).
//!
//! A template has a `message` and optional fields per destination kind. Every field is
//! compiled at load time. Output is not HTML-escaped (Slack's `<url|text>` must survive);
//! a reference to a missing variable renders empty, as in Argo CD.

mod context;
mod fields;
pub mod helpers;
pub mod partials;
pub mod schema;
pub mod sprig;

use std::collections::BTreeMap;

use handlebars::Handlebars;
use serde_json::Value;

use crate::model::{App, DestinationKind, Severity};
use crate::source::{At, ConfigError, SourceFile};

use context::Markup;
pub use context::RenderContext;
pub use fields::{Encoder, Fields, Payload};

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
