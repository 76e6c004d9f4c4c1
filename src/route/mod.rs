//! Decides which trigger goes to which destination for an Application: Argo CD's
//! subscription annotations (on the Application and on its AppProject) and config-level
//! subscriptions with label selectors, merged and de-duplicated per trigger.

pub mod selector;
pub mod tree;

use std::collections::{BTreeMap, BTreeSet};

use serde::Deserialize;

use crate::model::{App, Destination, Project};
pub use selector::Selector;

/// The annotation namespace Argo CD notifications uses.
pub const ANNOTATION_PREFIX: &str = "notifications.argoproj.io/";
const SUBSCRIBE_PREFIX: &str = "notifications.argoproj.io/subscribe.";
const SUBSCRIPTIONS_KEY: &str = "notifications.argoproj.io/subscriptions";

/// Trigger name -> destinations, ordered for deterministic output.
pub type Subscriptions = BTreeMap<String, BTreeSet<Destination>>;

/// How much one Application's annotations (its own and its AppProject's) may
/// subscribe: whoever may edit an Application writes them, and one annotation under
/// the API server's size limit can name tens of thousands of channels. The
/// configuration's own subscriptions and routes are not counted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Distinct triggers; past it the rest (in name order) are dropped.
    pub max_triggers: usize,
    /// Distinct destinations over all triggers; past it the rest are dropped.
    pub max_recipients: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits { max_triggers: 32, max_recipients: 64 }
    }
}

/// What an Application is subscribed to.
#[derive(Debug, Default)]
pub struct AppSubscriptions {
    pub subs: Subscriptions,
    /// Malformed subscription annotations.
    pub errors: Vec<String>,
    /// What [`Limits`] dropped, said once (the Application subscribes to more than it may).
    pub capped: Option<String>,
}

/// A config-level subscription: these recipients get these triggers for every
/// Application the selector matches.
#[derive(Debug, Clone)]
pub struct GlobalSubscription {
    pub recipients: Vec<Destination>,
    /// Empty means the default triggers.
    pub triggers: Vec<String>,
    pub selector: Selector,
}

/// One subscription as written, before default triggers are applied.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RawSubscription {
    /// `None` means "the default triggers" (`subscribe.<service>`, `subscribe..<service>`).
    pub trigger: Option<String>,
    pub service: String,
    pub recipients: Vec<String>,
}

#[derive(Debug, Deserialize)]
struct AnnotationDestination {
    service: String,
    #[serde(default)]
    recipients: Vec<String>,
}

#[derive(Debug, Deserialize)]
struct AnnotationSubscription {
    #[serde(default)]
    trigger: Vec<String>,
    #[serde(default)]
    destinations: Vec<AnnotationDestination>,
}

/// Reads every subscription annotation. Malformed ones are returned as errors (to be
/// logged and counted); the others still apply.
pub fn parse_annotations(annotations: &BTreeMap<String, String>) -> (Vec<RawSubscription>, Vec<String>) {
    let mut subs = Vec::new();
    let mut errors = Vec::new();
    for (key, value) in annotations {
        if let Some(rest) = key.strip_prefix(SUBSCRIBE_PREFIX) {
            // `subscribe.<trigger>.<service>`, `subscribe.<service>`, `subscribe..<service>`.
            let parts: Vec<&str> = rest.split('.').collect();
            let (trigger, service) = match parts.as_slice() {
                [service] => (None, *service),
                ["", service] => (None, *service),
                [trigger, service] => (Some(trigger.to_string()), *service),
                _ => {
                    errors.push(format!("annotation {key}: expected subscribe.<trigger>.<service> or subscribe.<service>"));
                    continue;
                }
            };
            if service.is_empty() {
                errors.push(format!("annotation {key}: the service name is empty"));
                continue;
            }
            // As Argo CD: split on `;` and trim; an empty value is one empty recipient.
            let recipients = value.split(';').map(|r| r.trim().to_string()).collect();
            subs.push(RawSubscription { trigger, service: service.to_string(), recipients });
        } else if key == SUBSCRIPTIONS_KEY {
            match serde_saphyr::from_str::<Vec<AnnotationSubscription>>(value) {
                Ok(list) => {
                    for s in list {
                        let triggers: Vec<Option<String>> =
                            if s.trigger.is_empty() { vec![None] } else { s.trigger.into_iter().map(Some).collect() };
                        for t in &triggers {
                            for d in &s.destinations {
                                subs.push(RawSubscription {
                                    trigger: t.clone(),
                                    service: d.service.clone(),
                                    recipients: d.recipients.clone(),
                                });
                            }
                        }
                    }
                }
                Err(e) => {
                    let msg = e.without_snippet().to_string();
                    errors.push(format!("annotation {key}: {}", msg.lines().next().unwrap_or("invalid YAML")));
                }
            }
        }
    }
    (subs, errors)
}

/// Subscriptions from config plus default triggers: everything needed to turn an
/// Application's annotations into [`Subscriptions`].
#[derive(Debug, Clone, Default)]
pub struct Router {
    pub global: Vec<GlobalSubscription>,
    pub default_triggers: Vec<String>,
    /// `defaultTriggers.<service>` overrides for one service.
    pub default_triggers_by_service: BTreeMap<String, Vec<String>>,
    pub limits: Limits,
}

impl Router {
    fn defaults_for(&self, service: &str) -> &[String] {
        self.default_triggers_by_service.get(service).unwrap_or(&self.default_triggers)
    }

    /// Every (trigger, destination) pair for `app`, from its own annotations, its
    /// project's and the config, de-duplicated. Also returns annotation errors.
    pub fn subscriptions(&self, app: &App, project: Option<&Project>) -> AppSubscriptions {
        let mut out = Subscriptions::new();
        let (mut raw, mut errors) = parse_annotations(&app.annotations);
        if let Some(p) = project {
            let (r, e) = parse_annotations(&p.annotations);
            raw.extend(r);
            errors.extend(e.into_iter().map(|e| format!("project {}: {e}", p.name)));
        }
        // The annotations' destinations, within the limits: a trigger past the first
        // `max_triggers` and a destination past the first `max_recipients` distinct
        // ones are dropped (and counted), so one Application's annotation cannot
        // decide tens of thousands of notifications per change.
        let limits = self.limits;
        let mut destinations: BTreeSet<Destination> = BTreeSet::new();
        // Distinct destinations dropped, by hash (a recipient named for two triggers is
        // one recipient; the names themselves need not be kept).
        let (mut dropped_triggers, mut dropped_recipients) = (BTreeSet::new(), std::collections::HashSet::<u64>::new());
        let hasher = std::hash::RandomState::new();
        for s in raw {
            let triggers: Vec<String> = match s.trigger {
                Some(t) => vec![t],
                None => self.defaults_for(&s.service).to_vec(),
            };
            for t in triggers {
                if !out.contains_key(&t) && out.len() >= limits.max_triggers {
                    dropped_triggers.insert(t);
                    continue;
                }
                let set = out.entry(t).or_default();
                for r in &s.recipients {
                    let d = Destination::new(s.service.clone(), r.clone());
                    if !destinations.contains(&d) {
                        if destinations.len() >= limits.max_recipients {
                            dropped_recipients.insert(std::hash::BuildHasher::hash_one(&hasher, (&s.service, r)));
                            continue;
                        }
                        destinations.insert(d.clone());
                    }
                    set.insert(d);
                }
            }
        }
        let capped = (!dropped_triggers.is_empty() || !dropped_recipients.is_empty()).then(|| {
            format!(
                "subscription annotations name more than the limits (limits.maxTriggersPerApp {}, limits.maxRecipientsPerApp {}): {} trigger(s) and {} recipient(s) ignored",
                limits.max_triggers,
                limits.max_recipients,
                dropped_triggers.len(),
                dropped_recipients.len()
            )
        });
        for g in &self.global {
            if !g.selector.matches(&app.labels) {
                continue;
            }
            for d in &g.recipients {
                let triggers = if g.triggers.is_empty() { self.defaults_for(&d.service) } else { &g.triggers };
                for t in triggers {
                    out.entry(t.clone()).or_default().insert(d.clone());
                }
            }
        }
        out.retain(|_, v| !v.is_empty());
        AppSubscriptions { subs: out, errors, capped }
    }
}

#[cfg(test)]
mod tests;
