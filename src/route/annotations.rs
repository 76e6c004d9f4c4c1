//! Reading Argo CD's subscription annotations within bounds. Whoever may edit an
//! Application (or an AppProject) writes them, and the API server takes 256 KiB of
//! annotations: enough for a `notifications.argoproj.io/subscriptions` list of 4,000
//! triggers × 4,000 destinations, sixteen million subscriptions once expanded. So the
//! bounds apply while the text is parsed (no anchors or aliases, lists of at most
//! [`MAX_LIST_ITEMS`], a node budget), and the product of triggers × recipients is
//! counted on what was parsed and refused past [`Limits::max_pairs`] before a single
//! subscription is made of it. A refused annotation is reported with its reason
//! ([`Refusal`]); the Application's other annotations still apply.

use std::collections::BTreeMap;
use std::fmt;
use std::marker::PhantomData;

use serde::Deserialize;
use serde::de::{self, Deserializer, IgnoredAny, SeqAccess, Visitor};

use super::{Limits, RawSubscription};

const SUBSCRIBE_PREFIX: &str = "notifications.argoproj.io/subscribe.";
const SUBSCRIPTIONS_KEY: &str = "notifications.argoproj.io/subscriptions";

/// The most items one list of the `subscriptions` annotation may have (the entries,
/// an entry's triggers or destinations, a destination's recipients); the next one is
/// refused as it is read.
pub const MAX_LIST_ITEMS: usize = 1024;
/// The longest trigger or service name (a Kubernetes name's bound).
pub const MAX_NAME_BYTES: usize = 253;
/// The longest recipient: a channel, an address, a webhook's name. Longer ones are
/// refused, which bounds what each subscription holds.
pub const MAX_RECIPIENT_BYTES: usize = 1024;
/// The most YAML nodes (lists, maps, scalars) one annotation may have.
pub const MAX_NODES: usize = 32 * 1024;
/// The most scalar text one annotation may hold: the API server's bound on all of an
/// object's annotations together.
pub const MAX_SCALAR_BYTES: usize = 256 * 1024;
/// Whatever the limits say, one Application's (or AppProject's) annotations expand to
/// at most this many (trigger, recipient) pairs.
pub const MAX_PAIRS: usize = 16 * 1024;

/// Marks the refusal of a list past [`MAX_LIST_ITEMS`] in the parser's message.
pub(super) const LIST_TOO_LONG: &str = "more items in a list than a subscription annotation may have";

/// Why an annotation was refused: the label of
/// `driftwatch_subscription_annotations_refused_total`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Refusal {
    /// Not the annotation's format (YAML, the `subscribe.<trigger>.<service>` key).
    Malformed,
    /// Past a bound: a list, a name, the product of triggers × recipients, an alias.
    Limits,
}

impl Refusal {
    pub fn as_str(self) -> &'static str {
        match self {
            Refusal::Malformed => "malformed",
            Refusal::Limits => "limits",
        }
    }
}

/// One refused subscription annotation: why, and what to tell the operator (the
/// annotation's key and the first line of the reason, never its value).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct AnnotationError {
    pub reason: Refusal,
    pub message: String,
}

impl AnnotationError {
    fn new(reason: Refusal, key: &str, what: impl fmt::Display) -> Self {
        // Clipped: a parser's message may quote the value, which the tenant sized.
        AnnotationError { reason, message: format!("annotation {key}: {}", crate::text::clip(&what.to_string(), 300)) }
    }

    /// The same refusal, said of an AppProject's annotation.
    pub fn in_project(self, project: &str) -> Self {
        AnnotationError { reason: self.reason, message: format!("project {project}: {}", self.message) }
    }
}

impl fmt::Display for AnnotationError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl serde::Serialize for AnnotationError {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.message)
    }
}

/// A list of at most [`MAX_LIST_ITEMS`]: past it, the parse stops with an error before
/// the next item is built.
#[derive(Debug)]
struct Bounded<T>(Vec<T>);

impl<T> Default for Bounded<T> {
    fn default() -> Self {
        Bounded(Vec::new())
    }
}

impl<'de, T: Deserialize<'de>> Deserialize<'de> for Bounded<T> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Items<T>(PhantomData<T>);
        impl<'de, T: Deserialize<'de>> Visitor<'de> for Items<T> {
            type Value = Bounded<T>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                write!(f, "a list of at most {MAX_LIST_ITEMS} items")
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
                let mut items = Vec::new();
                loop {
                    if items.len() >= MAX_LIST_ITEMS {
                        // One more item, skipped unbuilt, is one too many.
                        return match seq.next_element::<IgnoredAny>()? {
                            Some(_) => Err(de::Error::custom(format!("{LIST_TOO_LONG} ({MAX_LIST_ITEMS})"))),
                            None => Ok(Bounded(items)),
                        };
                    }
                    match seq.next_element()? {
                        Some(item) => items.push(item),
                        None => return Ok(Bounded(items)),
                    }
                }
            }
        }
        d.deserialize_seq(Items(PhantomData))
    }
}

#[derive(Debug, Deserialize)]
struct AnnotationDestination {
    service: String,
    #[serde(default)]
    recipients: Bounded<String>,
}

#[derive(Debug, Deserialize)]
struct AnnotationSubscription {
    #[serde(default)]
    trigger: Bounded<String>,
    #[serde(default)]
    destinations: Bounded<AnnotationDestination>,
}

/// The parser's options for an annotation: its budget refuses anchors and aliases
/// (nothing an annotation needs, and the way a small text expands into a large one),
/// more than one document, deep nesting, and more than [`MAX_NODES`] nodes or
/// [`MAX_SCALAR_BYTES`] of text.
fn options() -> serde_saphyr::Options {
    let mut budget = serde_saphyr::Budget::default();
    budget.max_aliases = 0;
    budget.max_anchors = 0;
    budget.max_documents = 1;
    budget.max_depth = 8;
    budget.max_nodes = MAX_NODES;
    budget.max_total_scalar_bytes = MAX_SCALAR_BYTES;
    budget.max_merge_keys = 0;
    let mut options = serde_saphyr::Options::default();
    options.budget = Some(budget);
    options
}

/// Reads every subscription annotation of one object (an Application or an
/// AppProject), within `limits`: what is malformed or past a bound is refused and
/// returned as an error (to be reported on the Application and counted), the others
/// apply. At most [`Limits::max_pairs`] (trigger, recipient) pairs are made.
pub fn parse_annotations(annotations: &BTreeMap<String, String>, limits: Limits) -> (Vec<RawSubscription>, Vec<AnnotationError>) {
    let mut subs = Vec::new();
    let mut errors = Vec::new();
    let mut pairs_left = limits.max_pairs();
    for (key, value) in annotations {
        let parsed = if let Some(rest) = key.strip_prefix(SUBSCRIBE_PREFIX) {
            subscribe_key(key, rest, value, pairs_left)
        } else if key == SUBSCRIPTIONS_KEY {
            subscriptions_list(key, value, pairs_left)
        } else {
            continue;
        };
        match parsed {
            Ok((list, pairs)) => {
                pairs_left = pairs_left.saturating_sub(pairs);
                subs.extend(list);
            }
            Err(e) => errors.push(e),
        }
    }
    (subs, errors)
}

/// `subscribe.<trigger>.<service>`, `subscribe.<service>`, `subscribe..<service>`: one
/// subscription, and the pairs it counts.
fn subscribe_key(key: &str, rest: &str, value: &str, pairs_left: usize) -> Result<(Vec<RawSubscription>, usize), AnnotationError> {
    let mut parts = rest.split('.');
    let (trigger, service) = match (parts.next(), parts.next(), parts.next()) {
        (Some(service), None, None) => (None, service),
        (Some(""), Some(service), None) => (None, service),
        (Some(trigger), Some(service), None) => (Some(trigger), service),
        _ => {
            return Err(AnnotationError::new(Refusal::Malformed, key, "expected subscribe.<trigger>.<service> or subscribe.<service>"));
        }
    };
    if service.is_empty() {
        return Err(AnnotationError::new(Refusal::Malformed, key, "the service name is empty"));
    }
    // As Argo CD: split on `;` and trim; an empty value is one empty recipient. Counted
    // and measured before any is kept.
    let count = value.split(';').count();
    if count > pairs_left {
        return Err(over_pairs(key, count, pairs_left));
    }
    if let Some(r) = value.split(';').find(|r| r.trim().len() > MAX_RECIPIENT_BYTES) {
        return Err(too_long(key, "recipient", r.trim().len(), MAX_RECIPIENT_BYTES));
    }
    let recipients = value.split(';').map(|r| r.trim().to_string()).collect();
    let sub = RawSubscription { trigger: trigger.map(str::to_string), service: service.to_string(), recipients };
    Ok((vec![sub], count))
}

/// The `subscriptions` list: parsed within the budget, measured, and expanded into
/// one subscription per (trigger, destination) only once the pairs it makes fit.
fn subscriptions_list(key: &str, value: &str, pairs_left: usize) -> Result<(Vec<RawSubscription>, usize), AnnotationError> {
    let list = match serde_saphyr::from_str_with_options::<Bounded<AnnotationSubscription>>(value, options()) {
        Ok(list) => list.0,
        Err(e) => {
            let e = e.without_snippet();
            let msg = e.to_string();
            let reason = match e {
                serde_saphyr::Error::Budget { .. } => Refusal::Limits,
                _ if msg.contains(LIST_TOO_LONG) => Refusal::Limits,
                _ => Refusal::Malformed,
            };
            return Err(AnnotationError::new(reason, key, msg.lines().next().unwrap_or("invalid YAML")));
        }
    };
    let mut pairs = 0usize;
    for s in &list {
        if let Some(t) = s.trigger.0.iter().find(|t| t.len() > MAX_NAME_BYTES) {
            return Err(too_long(key, "trigger name", t.len(), MAX_NAME_BYTES));
        }
        let mut recipients = 0usize;
        for d in &s.destinations.0 {
            if d.service.len() > MAX_NAME_BYTES {
                return Err(too_long(key, "service name", d.service.len(), MAX_NAME_BYTES));
            }
            if let Some(r) = d.recipients.0.iter().find(|r| r.len() > MAX_RECIPIENT_BYTES) {
                return Err(too_long(key, "recipient", r.len(), MAX_RECIPIENT_BYTES));
            }
            // A destination without recipients is still one subscription made.
            recipients = recipients.saturating_add(d.recipients.0.len().max(1));
        }
        let made = s.trigger.0.len().max(1).saturating_mul(recipients);
        pairs = pairs.saturating_add(made);
        if pairs > pairs_left {
            return Err(over_pairs(key, pairs, pairs_left));
        }
    }
    let mut subs = Vec::new();
    for s in list {
        let triggers: Vec<Option<String>> = if s.trigger.0.is_empty() { vec![None] } else { s.trigger.0.into_iter().map(Some).collect() };
        for t in &triggers {
            for d in &s.destinations.0 {
                subs.push(RawSubscription { trigger: t.clone(), service: d.service.clone(), recipients: d.recipients.0.clone() });
            }
        }
    }
    Ok((subs, pairs))
}

fn over_pairs(key: &str, pairs: usize, left: usize) -> AnnotationError {
    let what = format!(
        "names {}{pairs} (trigger, recipient) pairs, more than the {left} left within the limits (limits.maxTriggersPerApp × limits.maxRecipientsPerApp, at most {MAX_PAIRS}): refused",
        if pairs == usize::MAX { "at least " } else { "" }
    );
    AnnotationError::new(Refusal::Limits, key, what)
}

fn too_long(key: &str, what: &str, len: usize, max: usize) -> AnnotationError {
    AnnotationError::new(Refusal::Limits, key, format!("a {what} of {len} bytes (at most {max}): refused"))
}
