//! The `googlechat:` section of a template: its fields, typed, as the template files write
//! them (the kind's template schema).

use serde::Deserialize;

use crate::source::At;
use crate::template::FieldKind::{self, Json, Text};
use crate::template::Section;

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

impl Section for GoogleChatDef {
    const FIELDS: &'static [(&'static str, FieldKind)] = &[("googlechat.cards", Json), ("googlechat.cardsV2", Json), ("googlechat.threadKey", Text)];

    /// Every field of a `googlechat:` section, with its path and whether it renders to JSON.
    fn fields<'a>(&'a self, all: &mut Vec<(String, FieldKind, Option<&'a At<String>>)>) {
        let g = self;
        all.push(("googlechat.cards".into(), Json, g.cards.as_ref()));
        all.push(("googlechat.cardsV2".into(), Json, g.cards_v2.as_ref()));
        all.push(("googlechat.threadKey".into(), Text, g.thread_key.as_ref()));
    }
}
