//! The fields of one template rendered on demand for one destination: what a
//! destination kind's encoder reads to shape its payload.

use std::collections::BTreeMap;

use handlebars::{Context, Handlebars};
use serde_json::{Map, Value};

use super::context::Markup;
use super::{FieldKind, MAX_FIELD_BYTES, RenderError, SectionSettings, Target};
use crate::model::{App, Severity};

/// Shapes a destination kind's payload from a template's fields (`deliver::kinds::encoder`
/// picks one per kind).
pub type Encoder = fn(&Fields<'_>, &Target<'_>, &App) -> Payload;

/// What an [`Encoder`] returns: the payload's fields.
pub type Payload = Result<Map<String, Value>, RenderError>;

/// The fields of one template, rendered on demand for one destination: what an
/// [`Encoder`] reads.
pub struct Fields<'a> {
    pub(super) hb: &'a Handlebars<'static>,
    pub(super) template: &'a str,
    pub(super) fields: &'a BTreeMap<String, (String, FieldKind)>,
    pub(super) ctx: &'a Context,
    /// The data escaped for the destination's markup, for the fields in it.
    pub(super) escaped: Option<(&'a Context, crate::model::DestinationKind)>,
    /// The data for the fields that render to JSON (see `RenderContext::json`).
    pub(super) json: Option<&'a Context>,
    pub(super) settings: Option<&'a SectionSettings>,
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
