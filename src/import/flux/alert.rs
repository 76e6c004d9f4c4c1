//! An `Alert` as config-level subscriptions: one per event source, naming the unit's
//! engine, kind, namespace, name and labels, the triggers its severity gives, and the
//! recipient of the Provider it references.

use std::collections::BTreeMap;

use serde_json::{Map, Value, json};

use super::provider::Converted;
use super::read::Object;
use super::{Imported, at_line};
use crate::import::yaml;

/// The triggers of a failed and of a successful reconcile (the catalog's).
pub(super) const ON_FAILED: &str = "on-reconcile-failed";
pub(super) const ON_SUCCEEDED: &str = "on-reconcile-succeeded";

/// The units driftwatch watches, by Flux kind.
const UNITS: &[&str] = &["Kustomization", "HelmRelease"];

/// Flux's kinds that are sources, image automation or artifacts, not units.
const SOURCES: &[&str] = &[
    "GitRepository",
    "HelmRepository",
    "OCIRepository",
    "Bucket",
    "HelmChart",
    "ImageRepository",
    "ImagePolicy",
    "ImageUpdateAutomation",
    "ArtifactGenerator",
    "ExternalArtifact",
];

const FIELDS: &[&str] =
    &["providerRef", "eventSeverity", "eventSources", "inclusionList", "exclusionList", "eventMetadata", "summary", "suspend"];

/// The Providers converted, by namespace and name.
pub(super) type Providers = BTreeMap<(Option<String>, String), Converted>;

/// The Provider `name` in the Alert's namespace (either without one: the same
/// namespace when applied).
fn find<'a>(providers: &'a Providers, ns: &Option<String>, name: &str) -> Option<&'a Converted> {
    providers
        .get(&(ns.clone(), name.to_string()))
        .or_else(|| providers.iter().find(|((pns, pname), _)| pname == name && (pns.is_none() || ns.is_none())).map(|(_, c)| c))
}

/// One event source as a subscription, or why not (with the source to keep).
fn entry(src: &Value, alert_ns: &str, recipient: &str, triggers: &[&str]) -> Result<Map<String, Value>, String> {
    let kind = src.get("kind").and_then(Value::as_str).unwrap_or("");
    if SOURCES.contains(&kind) {
        return Err(format!(
            "driftwatch does not watch sources: events of a {kind} are not notified (its Kustomizations and HelmReleases are)"
        ));
    }
    if !UNITS.contains(&kind) {
        return Err(format!("unknown event source kind `{kind}`; driftwatch's Flux units are Kustomization and HelmRelease"));
    }
    let mut e = Map::new();
    e.insert("recipients".into(), json!([recipient]));
    e.insert("triggers".into(), json!(triggers));
    e.insert("engine".into(), json!("flux"));
    e.insert("kind".into(), json!(kind));
    let ns = src.get("namespace").and_then(Value::as_str).filter(|n| !n.is_empty()).unwrap_or(alert_ns);
    e.insert("namespace".into(), json!(ns));
    let name = match src.get("name") {
        None => "*",
        Some(Value::String(n)) => n.as_str(),
        Some(other) => return Err(format!("the name {other} is not text")),
    };
    match name {
        "*" => {}
        n if n.contains(['*', '?', '[']) => {
            return Err(format!("the name {n:?} is a pattern; a subscription names a unit exactly, or any (`*`)"));
        }
        n => {
            e.insert("name".into(), json!(n));
        }
    }
    if let Some(labels) = src.get("matchLabels").and_then(Value::as_object).filter(|m| !m.is_empty()) {
        let mut pairs: Vec<String> = labels.iter().map(|(k, v)| format!("{k}={}", text(v))).collect();
        pairs.sort();
        let selector = pairs.join(",");
        if let Err(err) = crate::route::selector::Selector::parse(&selector) {
            return Err(format!("matchLabels as a selector ({selector}) is refused: {err}"));
        }
        e.insert("selector".into(), json!(selector));
    }
    Ok(e)
}

/// A scalar as text (a label's value written as a number is the number's text).
fn text(v: &Value) -> String {
    v.as_str().map_or_else(|| v.to_string(), str::to_string)
}

/// The triggers for the Alert's severity, or a mark's reason.
fn triggers(spec: &Map<String, Value>) -> (Vec<&'static str>, Option<String>) {
    match spec.get("eventSeverity") {
        None | Some(Value::Null) => (vec![ON_FAILED, ON_SUCCEEDED], None),
        Some(v) if v == "info" => (vec![ON_FAILED, ON_SUCCEEDED], None),
        Some(v) if v == "error" => (vec![ON_FAILED], None),
        Some(other) => (vec![ON_FAILED, ON_SUCCEEDED], Some(format!("eventSeverity {other} is neither info nor error; taken as info"))),
    }
}

/// Why none of the Alert's subscriptions can be written as they are.
fn blocked(obj: &Object, provider: Option<&Converted>, name: &str) -> Option<String> {
    if obj.spec().get("suspend").and_then(Value::as_bool).unwrap_or(false) {
        return Some("the Alert is suspended (Flux sends nothing for it): its subscriptions are kept commented out".into());
    }
    match provider {
        None if name.is_empty() => Some("the Alert has no providerRef".into()),
        None => Some(format!("its providerRef names the Provider {name:?}, which is not in the input: import it too")),
        Some(p) if p.suspended => {
            Some(format!("the Provider {name} is suspended (Flux sends nothing to it): its subscriptions are kept commented out"))
        }
        Some(p) => p.problem.as_ref().map(|why| format!("the Provider {name}: {why}")),
    }
}

/// Converts one Alert into subscriptions.
pub(super) fn alert(obj: &Object, providers: &Providers, imp: &mut Imported) {
    let spec = obj.spec().clone();
    let id = obj.id();
    let item = format!("alert {id}");
    let mut todo = false;
    for k in spec.keys().filter(|k| !FIELDS.contains(&k.as_str())) {
        todo = true;
        imp.todo(
            &at_line(obj, obj.line_of(&["spec", k])),
            &format!("{item}.spec.{k}"),
            &format!("unknown field spec.{k}; not carried over"),
        );
    }
    let (triggers, severity_mark) = triggers(&spec);
    if let Some(reason) = severity_mark {
        todo = true;
        imp.todo(&at_line(obj, obj.line_of(&["spec", "eventSeverity"])), &format!("{item}.spec.eventSeverity"), &reason);
    }
    let provider_name = spec.get("providerRef").and_then(|r| r.get("name")).and_then(Value::as_str).unwrap_or("").to_string();
    let provider = if provider_name.is_empty() { None } else { find(providers, &obj.namespace, &provider_name) };
    let recipient = provider.map_or_else(|| provider_name.clone(), |p| p.recipient.clone().unwrap_or_else(|| p.service.clone()));
    let alert_ns = match &obj.namespace {
        Some(ns) => ns.clone(),
        None => {
            let sources = spec.get("eventSources").and_then(Value::as_array).into_iter().flatten();
            if sources.clone().any(|s| s.get("namespace").and_then(Value::as_str).is_none_or(str::is_empty)) {
                todo = true;
                let reason = "the Alert has no metadata.namespace, and its event sources without one are in the namespace it is applied to: taken as `default`; correct the subscriptions' namespace";
                imp.todo(&at_line(obj, obj.line), &item, reason);
            }
            "default".to_string()
        }
    };
    todo |= filters(obj, &spec, &item, imp);
    notes(obj, &spec, &item, provider, &triggers, imp);
    let sources: Vec<Value> = spec.get("eventSources").and_then(Value::as_array).cloned().unwrap_or_default();
    let lines = obj.item_lines(&["spec", "eventSources"]);
    let mut entries = Vec::new();
    for (i, src) in sources.iter().enumerate() {
        let line = lines.get(i).copied().unwrap_or(obj.line);
        match entry(src, &alert_ns, &recipient, &triggers) {
            Ok(e) => entries.push(Value::Object(e)),
            Err(reason) => {
                imp.out.report.subscriptions.todo += 1;
                imp.todo_kept(&at_line(obj, line), &format!("{item}.eventSources[{i}]"), &reason, &yaml::to_yaml(&json!([src])));
            }
        }
    }
    if sources.is_empty() {
        imp.todo(&at_line(obj, obj.line), &item, "the Alert has no list of eventSources: nothing to subscribe to");
    }
    if let Some(reason) = blocked(obj, provider, &provider_name) {
        imp.out.report.subscriptions.todo += entries.len();
        if !entries.is_empty() {
            imp.todo_kept(&at_line(obj, obj.line), &item, &reason, &yaml::to_yaml(&json!({ "subscriptions": entries })));
        } else {
            imp.todo(&at_line(obj, obj.line), &item, &reason);
        }
        return;
    }
    if todo {
        imp.out.report.subscriptions.todo += entries.len();
    } else {
        imp.out.report.subscriptions.converted += entries.len();
    }
    let all = imp.out.config.entry("subscriptions").or_insert_with(|| json!([]));
    if let Some(a) = all.as_array_mut() {
        a.extend(entries);
    }
}

/// `inclusionList` and `exclusionList`: regular expressions on Flux's event messages,
/// which driftwatch's subscriptions have no counterpart of. Whether any was marked.
fn filters(obj: &Object, spec: &Map<String, Value>, item: &str, imp: &mut Imported) -> bool {
    let mut marked = false;
    for (field, what) in
        [("inclusionList", "only events whose message matches one of"), ("exclusionList", "no event whose message matches one of")]
    {
        if let Some(list) = spec.get(field).filter(|l| !l.is_null() && l.as_array().is_none_or(|l| !l.is_empty())) {
            marked = true;
            let reason = format!(
                "Flux sends {what} these regular expressions; driftwatch's subscriptions select units, not messages, so its subscriptions \
                 send {}: narrow them (name, selector, triggers) or accept it",
                if field == "inclusionList" { "every event of the units" } else { "these too" }
            );
            let original = yaml::to_yaml(&json!({ field: list }));
            imp.todo_kept(&at_line(obj, obj.line_of(&["spec", field])), &format!("{item}.spec.{field}"), &reason, &original);
        }
    }
    marked
}

/// What is converted with a caveat: the event metadata and summary Flux adds to each
/// message, and a paging service told of successes.
fn notes(obj: &Object, spec: &Map<String, Value>, item: &str, provider: Option<&Converted>, triggers: &[&str], imp: &mut Imported) {
    if let Some(meta) = spec.get("eventMetadata").and_then(Value::as_object).filter(|m| !m.is_empty()) {
        let pairs: Vec<String> = meta.iter().map(|(k, v)| format!("{k}={}", text(v))).collect();
        let reason = format!(
            "Flux adds {} to each message; driftwatch's messages come from its templates: put such values in `context:` and use them there",
            pairs.join(", ")
        );
        imp.out.note(&at_line(obj, obj.line_of(&["spec", "eventMetadata"])), &format!("{item}.spec.eventMetadata"), &reason);
    }
    if let Some(summary) = spec.get("summary").and_then(Value::as_str).filter(|s| !s.is_empty()) {
        let reason = format!("Flux adds the summary {summary:?} to each message; driftwatch's messages come from its templates");
        imp.out.note(&at_line(obj, obj.line_of(&["spec", "summary"])), &format!("{item}.spec.summary"), &reason);
    }
    if let Some(kind) = provider.and_then(|p| p.kind).filter(|k| crate::deliver::kinds::pages(*k))
        && triggers.contains(&ON_SUCCEEDED)
    {
        let reason = format!(
            "eventSeverity info subscribes the {kind} service to {ON_SUCCEEDED} too, as Flux sends it every event: each revision applied \
             then opens an alert; drop it from the triggers unless that is wanted"
        );
        imp.out.note(&at_line(obj, obj.line), item, &reason);
    }
}
