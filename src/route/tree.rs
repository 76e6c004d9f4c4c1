//! The route tree: destinations decided by *what* drifted, on top of subscriptions.
//!
//! Routes work like Alertmanager's: the top-level list is tried in order; the first
//! route whose `match` holds takes the drift, its children are tried the same way, and
//! when no child matches the route's own recipients get it. `continue: true` goes on to
//! the next sibling after a match. A child inherits its parent's `triggers` and
//! `recipients` unless it names its own.
//!
//! A route is matched against the Application's drift episode (the open one, or the
//! last resolved one — so the page a route opened also gets its resolve), or against
//! the current drift when there has been no episode.

use std::collections::BTreeMap;

use serde::Deserialize;

use crate::drift::classes::CLASSES;
use crate::drift::episode::Episode;
use crate::drift::{Direction, Drift, DriftResource};
use crate::model::{Destination, Severity};
use crate::route::Subscriptions;
use crate::route::selector::Selector;
use crate::source::{At, ConfigDuration};

/// Routes nest at most this deep, and there are at most this many in all.
pub const MAX_DEPTH: usize = 8;
pub const MAX_ROUTES: usize = 256;

/// One value or a list of them.
#[derive(Debug, Clone, Deserialize, Default, PartialEq, Eq)]
#[serde(untagged)]
pub enum OneOrMany {
    #[default]
    None,
    One(String),
    Many(Vec<String>),
}

impl OneOrMany {
    pub fn values(&self) -> Vec<String> {
        match self {
            OneOrMany::None => Vec::new(),
            OneOrMany::One(s) => vec![s.clone()],
            OneOrMany::Many(v) => v.clone(),
        }
    }
}

/// `match:` of a route as written. Every given matcher must hold; a list matches any
/// of its values. `class`, `kind` and `namespace` are about one drifted resource (some
/// resource must match all three); the others about the Application and its episode.
#[derive(Debug, Clone, Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub struct MatchDef {
    #[serde(default)]
    pub class: OneOrMany,
    #[serde(default)]
    pub kind: OneOrMany,
    /// Namespace of the drifted resource.
    #[serde(default)]
    pub namespace: OneOrMany,
    /// `spec.project` of the Application.
    #[serde(default)]
    pub project: OneOrMany,
    /// The unit's engine: `argocd`, `flux`, `fleet`.
    #[serde(default)]
    pub engine: OneOrMany,
    /// The episode's severity (the highest it reached): critical, error, warning, info.
    #[serde(default)]
    pub severity: OneOrMany,
    /// `git`, `live`, `unknown` or `none`.
    #[serde(default)]
    pub direction: OneOrMany,
    /// A label selector on the Application (`env=prod,tier in (web)`).
    #[serde(default)]
    pub selector: Option<String>,
    /// Exact Application labels.
    #[serde(default)]
    pub labels: BTreeMap<String, String>,
    /// `true`: only while an approved break-glass exception is in force on the
    /// Application (its live drift comes here instead of paging); `false`: only while
    /// none is.
    #[serde(default, rename = "breakGlass")]
    pub break_glass: Option<bool>,
}

/// `group:` of a route as written: Alertmanager's `group_by`, `group_wait` and
/// `group_interval`. Notifications of the route that share the `by` values go out as
/// one message listing the Applications.
#[derive(Debug, Clone, Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub struct GroupDef {
    /// What members of one group share: `revision`, `project`, `class`, `severity`,
    /// `cluster`, `namespace`, `destinationNamespace`, `label:<key>`. Empty: everything
    /// the route takes is one group.
    #[serde(default)]
    pub by: Vec<String>,
    /// How long the first message waits for more members (default 30s, at most 1h).
    #[serde(default)]
    pub wait: Option<ConfigDuration>,
    /// How long after a message the next update of the group waits (default 5m, 1s to 24h).
    #[serde(default)]
    pub interval: Option<ConfigDuration>,
    /// The template of the group's message (default `app-group`).
    #[serde(default)]
    pub template: Option<String>,
}

/// The engines a route may match (`match.engine`).
const ENGINES: [&str; 3] = ["argocd", "flux", "fleet"];

/// The `by` values a group may be keyed on (besides `label:<key>`).
pub const GROUP_BY: [&str; 7] = ["revision", "project", "class", "severity", "cluster", "namespace", "destinationNamespace"];
/// At most this many `by` values.
pub const MAX_GROUP_BY: usize = 8;
/// The default `group.template`.
pub const DEFAULT_GROUP_TEMPLATE: &str = "app-group";

/// A validated `group:`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GroupSpec {
    pub by: Vec<String>,
    pub wait: std::time::Duration,
    pub interval: std::time::Duration,
    pub template: String,
}

/// A route as written in `routes:`.
#[derive(Debug, Clone, Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub struct RouteDef {
    /// A name for `routes test` output and logs.
    #[serde(default)]
    pub name: Option<String>,
    #[serde(default, rename = "match")]
    pub matcher: MatchDef,
    /// Triggers whose notifications this route delivers; inherited when empty.
    #[serde(default)]
    pub triggers: Vec<String>,
    /// `service:recipient` strings; inherited when empty.
    #[serde(default)]
    pub recipients: Vec<String>,
    #[serde(default, rename = "continue")]
    pub continue_: bool,
    /// Grouping of this route's notifications (inherited by child routes without one).
    #[serde(default)]
    pub group: Option<GroupDef>,
    #[serde(default)]
    pub routes: Vec<At<RouteDef>>,
}

/// A route error: the route's path and key, the message, and where the route is
/// written.
pub type RouteError = (String, String, Option<serde_saphyr::Location>);

/// A validated route.
#[derive(Debug, Clone)]
pub struct Route {
    /// `routes[0].routes[2]`, for explanations.
    pub path: String,
    pub name: Option<String>,
    classes: Vec<String>,
    kinds: Vec<String>,
    namespaces: Vec<String>,
    projects: Vec<String>,
    engines: Vec<String>,
    severities: Vec<Severity>,
    directions: Vec<Direction>,
    selector: Option<(String, Selector)>,
    labels: BTreeMap<String, String>,
    break_glass: Option<bool>,
    /// It or a parent matches `breakGlass: true`: its pagers page during an exception.
    pub for_break_glass: bool,
    pub triggers: Vec<String>,
    pub recipients: Vec<Destination>,
    pub continue_: bool,
    /// Its own `group:` or its parent's.
    pub group: Option<GroupSpec>,
    pub routes: Vec<Route>,
}

/// What a route is matched against: the Application and its episode (or drift).
pub struct RouteInput<'a> {
    pub labels: &'a BTreeMap<String, String>,
    pub project: &'a str,
    /// The unit's engine (`argocd`, `flux`, `fleet`).
    pub engine: &'a str,
    /// The episode (open or last resolved) when there is one, else the current drift.
    pub subject: RouteSubject<'a>,
    /// An approved break-glass exception is in force on the Application.
    pub break_glass: bool,
}

/// What routes match of an episode or a drift.
#[derive(Debug, Clone, Copy)]
pub struct RouteSubject<'a> {
    /// `None` when nothing drifted.
    pub severity: Option<Severity>,
    pub direction: Direction,
    pub resources: &'a [DriftResource],
}

impl<'a> From<&'a Drift> for RouteSubject<'a> {
    fn from(d: &'a Drift) -> Self {
        RouteSubject { severity: d.severity, direction: d.direction, resources: &d.resources }
    }
}

impl<'a> From<&'a Episode> for RouteSubject<'a> {
    fn from(e: &'a Episode) -> Self {
        RouteSubject { severity: Some(e.severity), direction: e.direction, resources: &e.resources }
    }
}

/// A route that took the drift, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RouteHit {
    pub path: String,
    pub name: Option<String>,
    /// The matchers that held, as `class=rbac` etc.; empty for a catch-all.
    pub reasons: Vec<String>,
    pub triggers: Vec<String>,
    pub recipients: Vec<Destination>,
    /// A break-glass route (`breakGlass: true`, its own or a parent's).
    pub break_glass: bool,
    /// How the route groups its notifications, when it does.
    pub group: Option<GroupSpec>,
}

/// The validated tree.
#[derive(Debug, Clone, Default)]
pub struct RouteTree {
    pub routes: Vec<Route>,
}

impl RouteTree {
    /// Validates `defs`; `known_trigger` and `known_service` say what exists. Errors
    /// name the route's path and key.
    pub fn build(defs: &[At<RouteDef>], known: &Known<'_>) -> Result<RouteTree, Vec<RouteError>> {
        let mut errors = Vec::new();
        let mut count = 0;
        let routes = build_level(defs, "routes", 1, Inherited::default(), known, &mut count, &mut errors);
        if count > MAX_ROUTES {
            errors.push(("routes".into(), format!("{count} routes; at most {MAX_ROUTES} are allowed"), None));
        }
        if errors.is_empty() { Ok(RouteTree { routes }) } else { Err(errors) }
    }

    pub fn is_empty(&self) -> bool {
        self.routes.is_empty()
    }

    /// The routes that take this drift, in tree order.
    pub fn matches(&self, input: &RouteInput<'_>) -> Vec<RouteHit> {
        let mut out = Vec::new();
        walk(&self.routes, input, &mut out);
        out
    }
}

impl RouteHit {
    /// Adds this route's (trigger, destination) pairs to subscriptions.
    pub fn add_to(&self, subs: &mut Subscriptions) {
        for t in &self.triggers {
            subs.entry(t.clone()).or_default().extend(self.recipients.iter().cloned());
        }
    }
}

/// What a route's validation asks of the rest of the configuration.
pub struct Known<'a> {
    pub trigger: &'a dyn Fn(&str) -> bool,
    pub service: &'a dyn Fn(&str) -> bool,
    pub template: &'a dyn Fn(&str) -> bool,
}

/// What a child route takes from its parent when it names none of its own.
#[derive(Default, Clone)]
struct Inherited<'a> {
    triggers: &'a [String],
    recipients: &'a [Destination],
    break_glass: bool,
    group: Option<GroupSpec>,
}

/// Validates a `group:`; errors are (key, message).
fn group_spec(path: &str, g: &GroupDef, known_template: &dyn Fn(&str) -> bool, errors: &mut Vec<(String, String)>) -> Option<GroupSpec> {
    let before = errors.len();
    let mut by: Vec<String> = Vec::new();
    for b in &g.by {
        let ok = GROUP_BY.contains(&b.as_str()) || b.strip_prefix("label:").is_some_and(|k| !k.is_empty() && k.len() <= 317);
        if !ok {
            errors.push((format!("{path}.group.by"), format!("{b:?} is not one of {}, label:<key>", GROUP_BY.join(", "))));
        } else if by.contains(b) {
            errors.push((format!("{path}.group.by"), format!("{b:?} is named twice")));
        } else {
            by.push(b.clone());
        }
    }
    if g.by.len() > MAX_GROUP_BY {
        errors.push((format!("{path}.group.by"), format!("{} values; at most {MAX_GROUP_BY} are allowed", g.by.len())));
    }
    let wait = g.wait.map_or(std::time::Duration::from_secs(30), |d| d.0);
    if wait > std::time::Duration::from_secs(3600) {
        errors.push((format!("{path}.group.wait"), "must be at most 1h".into()));
    }
    let interval = g.interval.map_or(std::time::Duration::from_secs(300), |d| d.0);
    if !(std::time::Duration::from_secs(1)..=std::time::Duration::from_secs(86_400)).contains(&interval) {
        errors.push((format!("{path}.group.interval"), "must be between 1s and 24h".into()));
    }
    let template = g.template.clone().unwrap_or_else(|| DEFAULT_GROUP_TEMPLATE.to_string());
    if !known_template(&template) {
        errors.push((format!("{path}.group.template"), format!("template {template:?} does not exist")));
    }
    (errors.len() == before).then_some(GroupSpec { by, wait, interval, template })
}

fn build_level(
    defs: &[At<RouteDef>],
    prefix: &str,
    depth: usize,
    parent: Inherited<'_>,
    known: &Known<'_>,
    count: &mut usize,
    all_errors: &mut Vec<RouteError>,
) -> Vec<Route> {
    let (parent_triggers, parent_recipients, parent_break_glass) = (parent.triggers, parent.recipients, parent.break_glass);
    let (known_trigger, known_service) = (known.trigger, known.service);
    let mut out = Vec::new();
    for (i, spanned) in defs.iter().enumerate() {
        let d = &spanned.value;
        let at = Some(spanned.referenced);
        let mut errors: Vec<(String, String)> = Vec::new();
        *count += 1;
        let path = if depth == 1 { format!("{prefix}[{i}]") } else { format!("{prefix}.routes[{i}]") };
        if depth > MAX_DEPTH {
            all_errors.push((path, format!("routes nest at most {MAX_DEPTH} deep"), at));
            continue;
        }
        let m = &d.matcher;
        let classes = m.class.values();
        let severities: Vec<Severity> = m.severity.values().iter().filter_map(|s| Severity::parse(s)).collect();
        let directions: Vec<Direction> = m.direction.values().iter().filter_map(|d| Direction::parse(d)).collect();
        let directions_known = Direction::ALL.map(Direction::as_str);
        for (key, given, known) in [
            ("engine", m.engine.values(), &ENGINES[..]),
            ("class", classes.clone(), CLASSES),
            // Any case, as `Severity::parse` reads it.
            ("severity", m.severity.values().into_iter().filter(|s| Severity::parse(s).is_none()).collect(), &[][..]),
            ("direction", m.direction.values(), &directions_known[..]),
        ] {
            for v in given.iter().filter(|v| !known.contains(&v.as_str())) {
                let known = if key == "severity" { "critical, error, warning, info".to_string() } else { known.join(", ") };
                errors.push((format!("{path}.match.{key}"), format!("{key} {v:?} is not one of {known}")));
            }
        }
        let selector = match &m.selector {
            None => None,
            Some(s) => match Selector::parse(s) {
                Ok(sel) => Some((s.clone(), sel)),
                Err(e) => {
                    errors.push((format!("{path}.match.selector"), e.to_string()));
                    None
                }
            },
        };
        let triggers = if d.triggers.is_empty() { parent_triggers.to_vec() } else { d.triggers.clone() };
        for t in d.triggers.iter().filter(|t| !known_trigger(t)) {
            errors.push((format!("{path}.triggers"), format!("trigger {t:?} does not exist")));
        }
        let recipients: Vec<Destination> =
            if d.recipients.is_empty() { parent_recipients.to_vec() } else { d.recipients.iter().map(|r| Destination::parse(r)).collect() };
        for r in d.recipients.iter().map(|r| Destination::parse(r)).filter(|r| !known_service(&r.service)) {
            errors.push((format!("{path}.recipients"), format!("service {:?} is not configured", r.service)));
        }
        if d.routes.is_empty() && (triggers.is_empty() || recipients.is_empty()) {
            errors.push((path.clone(), "a route without child routes needs triggers and recipients (its own or its parent's)".into()));
        }
        let group = match &d.group {
            Some(g) => group_spec(&path, g, known.template, &mut errors),
            None => parent.group.clone(),
        };
        all_errors.extend(errors.into_iter().map(|(k, m)| (k, m, at)));
        let for_break_glass = parent_break_glass || m.break_glass == Some(true);
        let inherited = Inherited { triggers: &triggers, recipients: &recipients, break_glass: for_break_glass, group: group.clone() };
        let routes = build_level(&d.routes, &path, depth + 1, inherited, known, count, all_errors);
        out.push(Route {
            path,
            name: d.name.clone(),
            classes,
            kinds: m.kind.values(),
            namespaces: m.namespace.values(),
            projects: m.project.values(),
            engines: m.engine.values(),
            severities,
            directions,
            selector,
            labels: m.labels.clone(),
            break_glass: m.break_glass,
            for_break_glass,
            triggers,
            recipients,
            continue_: d.continue_,
            group,
            routes,
        });
    }
    out
}

/// Alertmanager's walk: returns whether any route at this level matched.
fn walk(routes: &[Route], input: &RouteInput<'_>, out: &mut Vec<RouteHit>) -> bool {
    let mut matched = false;
    for r in routes {
        let Some(reasons) = r.matches(input) else { continue };
        matched = true;
        let before = out.len();
        let child = walk(&r.routes, input, out);
        if !child {
            out.insert(
                before,
                RouteHit {
                    path: r.path.clone(),
                    name: r.name.clone(),
                    reasons,
                    triggers: r.triggers.clone(),
                    recipients: r.recipients.clone(),
                    break_glass: r.for_break_glass,
                    group: r.group.clone(),
                },
            );
        }
        if !r.continue_ {
            break;
        }
    }
    matched
}

impl Route {
    /// `Some(reasons)` when every matcher holds.
    fn matches(&self, input: &RouteInput<'_>) -> Option<Vec<String>> {
        let mut reasons = Vec::new();
        let s = input.subject;
        if !self.projects.is_empty() {
            if !self.projects.iter().any(|p| p == input.project) {
                return None;
            }
            reasons.push(format!("project={}", input.project));
        }
        if !self.engines.is_empty() {
            if !self.engines.iter().any(|e| e == input.engine) {
                return None;
            }
            reasons.push(format!("engine={}", input.engine));
        }
        if let Some(want) = self.break_glass {
            if want != input.break_glass {
                return None;
            }
            reasons.push(format!("breakGlass={want}"));
        }
        if let Some((text, sel)) = &self.selector {
            if !sel.matches(input.labels) {
                return None;
            }
            reasons.push(format!("selector {text}"));
        }
        for (k, v) in &self.labels {
            if input.labels.get(k) != Some(v) {
                return None;
            }
            reasons.push(format!("label {k}={v}"));
        }
        if !self.severities.is_empty() {
            match s.severity {
                Some(sev) if self.severities.contains(&sev) => reasons.push(format!("severity={}", sev.as_str())),
                _ => return None,
            }
        }
        if !self.directions.is_empty() {
            if !self.directions.contains(&s.direction) {
                return None;
            }
            reasons.push(format!("direction={}", s.direction));
        }
        if !self.classes.is_empty() || !self.kinds.is_empty() || !self.namespaces.is_empty() {
            let any = |list: &[String], v: &str| list.is_empty() || list.iter().any(|x| x == v);
            let hit = s
                .resources
                .iter()
                .find(|r| any(&self.classes, &r.class) && any(&self.kinds, &r.object.kind) && any(&self.namespaces, &r.object.namespace))?;
            let mut parts = Vec::new();
            if !self.classes.is_empty() {
                parts.push(format!("class={}", hit.class));
            }
            if !self.kinds.is_empty() {
                parts.push(format!("kind={}", hit.object.kind));
            }
            if !self.namespaces.is_empty() {
                parts.push(format!("namespace={}", hit.object.namespace));
            }
            reasons.push(format!("{} ({} {}/{})", parts.join(" "), hit.object.kind, hit.object.namespace, hit.object.name));
        }
        Some(reasons)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn tree(yaml: &str) -> RouteTree {
        let defs: Vec<At<RouteDef>> = serde_saphyr::from_str(yaml).unwrap();
        RouteTree::build(&defs, &known(&|s| ["oncall", "slack", "siem"].contains(&s))).unwrap()
    }

    fn known<'a>(service: &'a dyn Fn(&str) -> bool) -> Known<'a> {
        Known { trigger: &|t| t.starts_with("on-"), service, template: &|t| t.starts_with("app-") }
    }

    const POLICY: &str = r#"
- name: security
  match: {class: [rbac, network-policy, security-context, admission]}
  triggers: [on-security-drift]
  recipients: [oncall:platform]
  continue: true
- name: siem
  triggers: [on-drift-episode]
  recipients: [siem]
  continue: true
- name: chat
  match: {direction: [live, unknown]}
  triggers: [on-live-drift]
  recipients: [slack:drift]
  routes:
    - match: {project: payments}
      recipients: [slack:payments-drift]
"#;

    /// What an Argo CD Application of `project` with `labels` and the drift `s` matches.
    fn matched(t: &RouteTree, labels: &BTreeMap<String, String>, project: &str, s: &Drift, break_glass: bool) -> Vec<RouteHit> {
        t.matches(&RouteInput { labels, project, engine: "argocd", subject: RouteSubject::from(s), break_glass })
    }

    fn subject(class: &str, direction: &str) -> Drift {
        serde_json::from_value(json!({"severity": "warning", "direction": direction,
               "resources": [{"class": class, "kind": "Role", "namespace": "prod", "name": "reader"}]}))
        .unwrap()
    }

    #[test]
    fn first_match_wins_unless_continue_and_children_refine() {
        let t = tree(POLICY);
        let labels = BTreeMap::new();
        let s = subject("rbac", "live");
        let hits = matched(&t, &labels, "default", &s, false);
        let paths: Vec<&str> = hits.iter().map(|h| h.path.as_str()).collect();
        assert_eq!(paths, ["routes[0]", "routes[1]", "routes[2]"]);
        assert_eq!(hits[0].reasons, ["class=rbac (Role prod/reader)"]);
        assert!(hits[1].reasons.is_empty(), "the SIEM route is a catch-all");
        let mut subs = Subscriptions::new();
        hits.iter().for_each(|h| h.add_to(&mut subs));
        assert_eq!(subs["on-security-drift"].iter().next(), Some(&Destination::new("oncall", "platform")));

        // A payments workload: no security page; the child route takes the chat part,
        // inheriting the parent's trigger.
        let s = subject("workload", "live");
        let hits = matched(&t, &labels, "payments", &s, false);
        let paths: Vec<&str> = hits.iter().map(|h| h.path.as_str()).collect();
        assert_eq!(paths, ["routes[1]", "routes[2].routes[0]"]);
        assert_eq!(hits[1].triggers, ["on-live-drift"]);
        assert_eq!(hits[1].recipients, [Destination::new("slack", "payments-drift")]);

        // A Git change reaches only the SIEM.
        let s = subject("config", "git");
        let hits = matched(&t, &labels, "default", &s, false);
        assert_eq!(hits.len(), 1);
        assert_eq!(hits[0].path, "routes[1]");
    }

    #[test]
    fn resource_matchers_must_hold_on_one_resource_and_labels_on_the_app() {
        let t = tree(
            r#"
- match: {kind: Deployment, namespace: prod, selector: "env=prod", severity: [critical, warning]}
  triggers: [on-live-drift]
  recipients: [slack:x]
"#,
        );
        let mut labels = BTreeMap::new();
        let s: Drift = serde_json::from_value(json!({"severity": "warning", "resources": [
            {"class": "workload", "kind": "Deployment", "namespace": "dev", "name": "a"},
            {"class": "config", "kind": "ConfigMap", "namespace": "prod", "name": "b"}]}))
        .unwrap();
        labels.insert("env".to_string(), "prod".to_string());
        assert!(matched(&t, &labels, "p", &s, false).is_empty(), "kind and namespace on different resources");
        let s: Drift = serde_json::from_value(
            json!({"severity": "warning", "resources": [{"class": "workload", "kind": "Deployment", "namespace": "prod", "name": "a"}]}),
        )
        .unwrap();
        let hits = matched(&t, &labels, "p", &s, false);
        assert_eq!(hits[0].reasons, ["selector env=prod", "severity=warning", "kind=Deployment namespace=prod (Deployment prod/a)"]);
        labels.insert("env".to_string(), "dev".to_string());
        assert!(matched(&t, &labels, "p", &s, false).is_empty());
    }

    /// `match: {engine: …}` takes the units of that engine only; an engine no one has
    /// is refused at load time with its path.
    #[test]
    fn a_route_matches_by_engine() {
        let t = tree("- match: {engine: [flux, fleet]}\n  triggers: [on-reconcile-failed]\n  recipients: [slack:flux]\n");
        let (labels, s) = (BTreeMap::new(), subject("workload", "live"));
        let input = |engine| RouteInput { labels: &labels, project: "", engine, subject: RouteSubject::from(&s), break_glass: false };
        assert_eq!(t.matches(&input("flux"))[0].reasons, ["engine=flux"]);
        assert!(t.matches(&input("argocd")).is_empty());
        let defs: Vec<At<RouteDef>> =
            serde_saphyr::from_str("- match: {engine: jenkins}\n  triggers: [on-x]\n  recipients: [slack:x]\n").unwrap();
        let errs = RouteTree::build(&defs, &known(&|s| s == "slack")).unwrap_err();
        assert_eq!(
            errs.iter().map(|(k, m, _)| format!("{k}: {m}")).collect::<Vec<_>>(),
            ["routes[0].match.engine: engine \"jenkins\" is not one of argocd, flux, fleet"]
        );
    }

    #[test]
    fn invalid_routes_are_reported_with_their_path() {
        let defs: Vec<At<RouteDef>> = serde_saphyr::from_str(
            r#"
- match: {class: loud, severity: huge, direction: sideways}
  triggers: [nope]
  recipients: [pager:x]
- routes:
    - name: orphan
"#,
        )
        .unwrap();
        let errs = RouteTree::build(&defs, &known(&|s| s == "slack")).unwrap_err();
        let keys: Vec<&str> = errs.iter().map(|(k, _, _)| k.as_str()).collect();
        let lines: Vec<u64> = errs.iter().map(|(_, _, at)| at.map_or(0, |l| l.line())).collect();
        assert_eq!(lines, [2, 2, 2, 2, 2, 6], "each error points at its route");
        assert_eq!(
            keys,
            [
                "routes[0].match.class",
                "routes[0].match.severity",
                "routes[0].match.direction",
                "routes[0].triggers",
                "routes[0].recipients",
                "routes[1].routes[0]"
            ]
        );
        assert!(serde_saphyr::from_str::<Vec<RouteDef>>("- matcher: {}").is_err(), "unknown keys are errors");
    }

    /// `breakGlass: true` matches only while an exception is in force (its children
    /// are break-glass routes too); `false` only while none is.
    #[test]
    fn the_break_glass_matcher() {
        let t = tree(
            "- name: incident\n  match: {breakGlass: true}\n  triggers: [on-security-drift]\n  continue: true\n  routes:\n    - recipients: [slack:incident]\n- name: page\n  match: {breakGlass: false}\n  triggers: [on-security-drift]\n  recipients: [oncall:platform]\n",
        );
        let s = subject("rbac", "live");
        let labels = BTreeMap::new();
        let hits = |on: bool| matched(&t, &labels, "p", &s, on);
        let under = hits(true);
        assert_eq!(under.iter().map(|h| (h.name.clone(), h.break_glass)).collect::<Vec<_>>(), [(None, true)]);
        assert_eq!(under[0].recipients, [Destination::parse("slack:incident")]);
        let normal = hits(false);
        assert_eq!(normal.iter().map(|h| (h.name.as_deref(), h.break_glass)).collect::<Vec<_>>(), [(Some("page"), false)]);
        assert_eq!(normal[0].reasons, ["breakGlass=false"]);
    }

    /// `group:` takes Alertmanager's defaults, children inherit it (or set their own),
    /// and a bad one is refused naming the key.
    #[test]
    fn groups_default_inherit_and_refuse_what_is_out_of_range() {
        let t = tree(
            "- triggers: [on-out-of-sync]\n  recipients: [slack:drift]\n  group: {by: [revision, label:team]}\n  routes:\n    - match: {project: payments}\n    - match: {project: web}\n      group: {by: [project], wait: 1s, interval: 10s, template: app-digest}\n",
        );
        let s = subject("workload", "live");
        let labels = BTreeMap::new();
        let hit = |project: &str| matched(&t, &labels, project, &s, false).remove(0).group;
        let inherited = GroupSpec {
            by: vec!["revision".into(), "label:team".into()],
            wait: std::time::Duration::from_secs(30),
            interval: std::time::Duration::from_secs(300),
            template: DEFAULT_GROUP_TEMPLATE.into(),
        };
        assert_eq!(hit("payments"), Some(inherited));
        let own = GroupSpec {
            by: vec!["project".into()],
            wait: std::time::Duration::from_secs(1),
            interval: std::time::Duration::from_secs(10),
            template: "app-digest".into(),
        };
        assert_eq!(hit("web"), Some(own));
        assert_eq!(tree("- triggers: [on-x]\n  recipients: [slack:x]\n").routes[0].group, None, "ungrouped unless asked");

        let defs: Vec<At<RouteDef>> = serde_saphyr::from_str(
            "- triggers: [on-x]\n  recipients: [slack:x]\n  group: {by: [revision, colour, revision, 'label:'], wait: 2h, interval: 0s, template: nope}\n",
        )
        .unwrap();
        let errs = RouteTree::build(&defs, &known(&|s| s == "slack")).unwrap_err();
        let got: Vec<(&str, &str)> = errs.iter().map(|(k, m, _)| (k.as_str(), m.as_str())).collect();
        assert_eq!(
            got,
            [
                (
                    "routes[0].group.by",
                    "\"colour\" is not one of revision, project, class, severity, cluster, namespace, destinationNamespace, label:<key>"
                ),
                ("routes[0].group.by", "\"revision\" is named twice"),
                (
                    "routes[0].group.by",
                    "\"label:\" is not one of revision, project, class, severity, cluster, namespace, destinationNamespace, label:<key>"
                ),
                ("routes[0].group.wait", "must be at most 1h"),
                ("routes[0].group.interval", "must be between 1s and 24h"),
                ("routes[0].group.template", "template \"nope\" does not exist"),
            ]
        );
        assert!(errs.iter().all(|(_, _, at)| at.is_some_and(|l| l.line() == 1)), "each points at its route");
        assert!(serde_saphyr::from_str::<Vec<RouteDef>>("- group: {wiat: 1s}").is_err(), "unknown keys are errors");
    }
}
