//! Decides which trigger goes to which destination for an Application: Argo CD's
//! subscription annotations (on the Application and on its AppProject) and config-level
//! subscriptions with label selectors, merged and de-duplicated per trigger.

mod annotations;
pub mod selector;
pub mod tree;

use std::collections::{BTreeMap, BTreeSet};

use crate::model::{App, Destination, Project};
pub use annotations::{AnnotationError, MAX_PAIRS, Refusal, parse_annotations};
pub use selector::Selector;

/// The annotation namespace Argo CD notifications uses.
pub const ANNOTATION_PREFIX: &str = "notifications.argoproj.io/";

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

impl Limits {
    /// The most (trigger, recipient) pairs one object's annotations may expand to: an
    /// annotation that would make more is refused before they are made.
    pub fn max_pairs(self) -> usize {
        self.max_triggers.saturating_mul(self.max_recipients).min(MAX_PAIRS)
    }
}

/// What an Application is subscribed to.
#[derive(Debug, Default)]
pub struct AppSubscriptions {
    pub subs: Subscriptions,
    /// Refused subscription annotations: malformed, or past the bounds.
    pub errors: Vec<AnnotationError>,
    /// What [`Limits`] dropped, said once (the Application subscribes to more than it may).
    pub capped: Option<String>,
}

/// A config-level subscription: these recipients get these triggers for every unit
/// the selector and the unit filter match.
#[derive(Debug, Clone)]
pub struct GlobalSubscription {
    pub recipients: Vec<Destination>,
    /// Empty means the default triggers.
    pub triggers: Vec<String>,
    pub selector: Selector,
    pub units: UnitFilter,
}

/// Which units a config-level subscription is for: by engine (`argocd`, `flux`,
/// `fleet`), kind (`Application`, `Kustomization`, `HelmRelease`,
/// `BundleDeployment`), namespace and name; an empty list (or a name `*`) is any.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct UnitFilter {
    pub engines: Vec<String>,
    pub kinds: Vec<String>,
    pub namespaces: Vec<String>,
    pub names: Vec<String>,
}

impl UnitFilter {
    /// The engines' names a filter may give.
    pub const ENGINES: [&'static str; 3] = ["argocd", "flux", "fleet"];

    pub fn matches(&self, app: &App) -> bool {
        let any = |list: &[String], v: &str| list.is_empty() || list.iter().any(|x| x == v || x == "*");
        any(&self.engines, app.engine().as_str())
            && any(&self.kinds, app.engine().kind())
            && any(&self.namespaces, &app.namespace)
            && any(&self.names, &app.name)
    }
}

/// One subscription as written, before default triggers are applied.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RawSubscription {
    /// `None` means "the default triggers" (`subscribe.<service>`, `subscribe..<service>`).
    pub trigger: Option<String>,
    pub service: String,
    pub recipients: Vec<String>,
}

/// What is kept on an Application about its subscription annotations (`driftwatch
/// state list`): the refused ones (the first few, each clipped), then what the limits
/// dropped; `None` when neither.
pub fn note(errors: &[AnnotationError], capped: Option<&str>) -> Option<String> {
    const SHOWN: usize = 3;
    let mut parts: Vec<String> = errors.iter().take(SHOWN).map(|e| crate::text::clip(&e.message, 300)).collect();
    if errors.len() > SHOWN {
        parts.push(format!("{} more refused", errors.len() - SHOWN));
    }
    parts.extend(capped.map(str::to_string));
    (!parts.is_empty()).then(|| parts.join("; "))
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
        // Each object's annotations within the limits: an AppProject's are read again
        // for every member, so what one costs is bounded as it is parsed.
        let (mut raw, mut errors) = parse_annotations(&app.annotations, self.limits);
        if let Some(p) = project {
            let (r, e) = parse_annotations(&p.annotations, self.limits);
            raw.extend(r);
            errors.extend(e.into_iter().map(|e| e.in_project(&p.name)));
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
            if !g.selector.matches(&app.labels) || !g.units.matches(app) {
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
use annotations::LIST_TOO_LONG;
#[cfg(test)]
mod tests;
