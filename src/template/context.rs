//! The data a template sees: one Application's, built once per Application and
//! adjusted per destination, with the strings from the cluster escaped so that they
//! cannot act as the destination's markup or as JSON structure.

use std::collections::BTreeMap;

use handlebars::Context;
use serde_json::{Value, json};

use chrono::{DateTime, Utc};

use super::{Target, helpers};
use crate::drift::Drift;
use crate::drift::episode::Episode;
use crate::model::App;

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
pub(super) enum Markup {
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
    pub(super) fn of(kind: crate::model::DestinationKind, field: &str) -> Option<Markup> {
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
            "unit": app.unit.view_masked(&|s| crate::drift::mask::BUILT_IN.text(s).into_owned()),
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
    pub(super) fn for_target(&mut self, t: &Target<'_>, markup: Option<Markup>, json: Option<Option<Markup>>) -> Contexts<'_> {
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
pub(super) struct Contexts<'a> {
    pub(super) ctx: &'a Context,
    pub(super) escaped: Option<&'a Context>,
    pub(super) json: Option<&'a Context>,
}
