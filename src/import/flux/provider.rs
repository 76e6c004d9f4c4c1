//! A `Provider` as a driftwatch service: the fields every provider type has (timeout,
//! proxy, certificates, suspend, the Secret it references), what its type's mapping
//! ([`super::kinds`]) takes from it, and the marks for the rest. The service written is
//! checked with driftwatch's own service parser.

use std::collections::{BTreeMap, BTreeSet};

use serde_json::{Map, Value, json};

use super::super::Todo;
use super::kinds;
use super::read::{Object, SecretKeys};
use super::{Imported, at_line};
use crate::model::DestinationKind;

/// A setting's value: as written in the Provider, or a `$secret` reference.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Val {
    Plain(String),
    Ref(String),
}

impl Val {
    pub(super) fn text(&self) -> &str {
        match self {
            Val::Plain(s) | Val::Ref(s) => s,
        }
    }
}

/// The Secret a Provider references: its keys when it is in the input, else the keys
/// its type usually has (assumed, and marked).
struct SecretView<'a> {
    name: String,
    prefix: String,
    found: Option<&'a SecretKeys>,
    typical: &'static [&'static str],
}

/// One Provider being converted: what its type's mapping reads, the settings it
/// writes, and the marks.
pub(super) struct Ctx<'a> {
    pub(super) obj: &'a Object,
    pub(super) ty: &'a str,
    pub(super) service: &'a str,
    secret: Option<SecretView<'a>>,
    pub(super) settings: Map<String, Value>,
    used: BTreeSet<&'static str>,
    used_keys: BTreeSet<String>,
    /// The Secret's keys a setting references.
    refs: BTreeSet<String>,
    assumed: BTreeSet<String>,
    /// References written where the Secret has no key (`$<service>-<what>`).
    placeholders: BTreeSet<String>,
    /// TODOs (`true`) and notes, each at a line of the Provider.
    pub(super) marks: Vec<(bool, Todo)>,
}

impl<'a> Ctx<'a> {
    /// `spec.<field>` as text (absent or empty: `None`); the field counts as used.
    pub(super) fn spec_str(&mut self, field: &'static str) -> Option<String> {
        self.used.insert(field);
        self.obj.spec().get(field).and_then(Value::as_str).filter(|s| !s.is_empty()).map(str::to_string)
    }

    /// Whether the Secret has `key` (for a Secret not in the input: whether the type
    /// usually has it).
    pub(super) fn has_key(&self, key: &str) -> bool {
        self.secret.as_ref().is_some_and(|s| match s.found {
            Some(keys) => keys.keys.contains_key(key),
            None => s.typical.contains(&key),
        })
    }

    /// The reference to the Secret's `key` (`$<secret>-<key>`), when it has it.
    pub(super) fn key(&mut self, key: &str) -> Option<String> {
        if !self.has_key(key) {
            return None;
        }
        let s = self.secret.as_ref()?;
        if s.found.is_none() {
            self.assumed.insert(key.to_string());
        }
        self.used_keys.insert(key.to_string());
        self.refs.insert(key.to_string());
        Some(format!("${}-{key}", s.prefix))
    }

    /// A reference to fill in where the Secret has nothing (`$<service>-<what>`); it goes
    /// into the secrets skeleton.
    pub(super) fn placeholder(&mut self, what: &str) -> String {
        let key = format!("{}-{what}", self.service);
        self.placeholders.insert(key.clone());
        format!("${key}")
    }

    /// Takes the Secret's `key` as read by a mark (a value driftwatch cannot reference):
    /// no note says it is unused, and no reference is written for it.
    pub(super) fn consume(&mut self, key: &str) -> bool {
        let has = self.has_key(key);
        if has {
            self.used_keys.insert(key.to_string());
        }
        has
    }

    /// The endpoint: the Secret's `address` (which overrides the spec's, as in Flux),
    /// else `spec.address`.
    pub(super) fn address(&mut self) -> Option<Val> {
        let spec = self.spec_str("address");
        self.key("address").map(Val::Ref).or(spec.map(Val::Plain))
    }

    /// The name of the Secret referenced (for a reason's words).
    pub(super) fn secret_name(&self) -> String {
        self.secret.as_ref().map_or_else(|| "(none)".to_string(), |s| s.name.clone())
    }

    pub(super) fn set(&mut self, key: &str, v: Value) {
        self.settings.insert(key.to_string(), v);
    }

    /// A TODO at the line of `spec.<field>` (the object's line for `""`).
    pub(super) fn todo(&mut self, field: &str, reason: impl Into<String>) {
        self.mark(true, field, reason.into());
    }

    pub(super) fn note(&mut self, field: &str, reason: impl Into<String>) {
        self.mark(false, field, reason.into());
    }

    fn mark(&mut self, todo: bool, field: &str, reason: String) {
        let (line, item) = match field {
            "" => (self.obj.line, format!("provider {}", self.obj.id())),
            f => (self.obj.line_of(&["spec", f]), format!("provider {}.spec.{f}", self.obj.id())),
        };
        self.marks.push((todo, Todo { file: self.obj.file.clone(), line, item, reason }));
    }
}

/// The spec fields every type has, besides those a type's mapping reads.
const COMMON: &[&str] = &["type", "timeout", "suspend", "interval", "secretRef", "certSecretRef", "proxy", "proxySecretRef"];

/// The Secret keys Flux reads for every type, which the common part handles.
const PROXY_KEY: &str = "proxy";

/// What became of a Provider: its service's name, and when converted the recipient
/// its subscriptions name (`None`: no subscription can be written to it).
#[derive(Debug, Clone)]
pub(super) struct Converted {
    pub(super) service: String,
    pub(super) kind: Option<DestinationKind>,
    pub(super) recipient: Option<String>,
    pub(super) suspended: bool,
    /// Why subscriptions to it cannot be written as they are.
    pub(super) problem: Option<String>,
}

/// Converts one Provider into `imp` as the service `service`.
pub(super) fn provider(
    obj: &Object,
    service: &str,
    secrets: &BTreeMap<(Option<String>, String), (String, &SecretKeys)>,
    prefix_of: &dyn Fn(&Option<String>, &str) -> String,
    imp: &mut Imported,
) -> Converted {
    let ty = match obj.spec().get("type") {
        None | Some(Value::Null) => String::new(),
        Some(Value::String(t)) => t.clone(),
        Some(other) => other.to_string(),
    };
    let suspended = obj.spec().get("suspend").and_then(Value::as_bool).unwrap_or(false);
    let Some((mapper, typical)) = kinds::mapper(&ty, obj.spec()) else {
        let reason = kinds::unmapped_reason(&ty);
        let original = super::yaml_of_spec(obj);
        imp.todo_kept(&at_line(obj, obj.line_of(&["spec", "type"])), &format!("provider {}", obj.id()), &reason, &original);
        imp.out.report.services.todo += 1;
        return Converted {
            service: service.to_string(),
            kind: None,
            recipient: None,
            suspended,
            problem: Some(format!("its type `{ty}` was not converted")),
        };
    };
    let secret = obj.spec().get("secretRef").and_then(|r| r.get("name")).and_then(Value::as_str).map(|name| {
        let found = secrets.get(&(obj.namespace.clone(), name.to_string())).map(|(_, k)| *k);
        SecretView { name: name.to_string(), prefix: prefix_of(&obj.namespace, name), found, typical }
    });
    let mut c = Ctx {
        obj,
        ty: &ty,
        service,
        secret,
        settings: Map::new(),
        used: BTreeSet::new(),
        used_keys: BTreeSet::new(),
        refs: BTreeSet::new(),
        assumed: BTreeSet::new(),
        placeholders: BTreeSet::new(),
        marks: Vec::new(),
    };
    let mapped = mapper(&mut c);
    common(&mut c, suspended, mapped.kind);
    let Ctx { settings, marks, refs, secret, placeholders, .. } = c;
    let mut svc = Map::new();
    svc.insert("type".into(), json!(mapped.kind.as_str()));
    svc.extend(settings.clone());
    let mut marks = marks;
    if let Err(e) = crate::deliver::services::ServiceSpec::from_value(mapped.kind, Value::Object(settings)) {
        let reason = format!("driftwatch refuses the service as converted: {e}");
        marks.push((true, Todo { file: obj.file.clone(), line: obj.line, item: format!("provider {}", obj.id()), reason }));
    }
    let todo = marks.iter().any(|(todo, _)| *todo);
    for (todo, m) in &marks {
        let e = at_line(obj, m.line);
        if *todo { imp.todo(&e, &m.item, &m.reason) } else { imp.out.note(&e, &m.item, &m.reason) }
    }
    if todo {
        imp.out.report.services.todo += 1
    } else {
        imp.out.report.services.converted += 1
    }
    if let Some(s) = &secret {
        for k in &refs {
            let key = format!("{}-{k}", s.prefix);
            match s.found.and_then(|f| f.keys.get(k).map(|line| (f, *line))) {
                Some((f, line)) => {
                    imp.secret_keys.insert(key, (f.file.clone(), line));
                }
                None => {
                    imp.out.secret_refs.entry(key).or_insert_with(|| service.to_string());
                }
            }
        }
    }
    for key in placeholders {
        imp.out.secret_refs.entry(key).or_insert_with(|| service.to_string());
    }
    let services = imp.out.config.entry("services").or_insert_with(|| json!({}));
    if let Some(m) = services.as_object_mut() {
        m.insert(service.to_string(), Value::Object(svc));
    }
    let problem = mapped.recipient.is_none().then(|| "it names no recipient driftwatch can send to (see its mark)".to_string());
    Converted { service: service.to_string(), kind: Some(mapped.kind), recipient: mapped.recipient, suspended, problem }
}

/// The fields every type has, the Secret's keys no mapping took, and the spec fields
/// left.
fn common(c: &mut Ctx<'_>, suspended: bool, kind: DestinationKind) {
    let spec = c.obj.spec().clone();
    if let Some(t) = spec.get("timeout").and_then(Value::as_str) {
        c.set("timeout", json!(t));
    }
    if suspended {
        c.note(
            "suspend",
            "the Provider is suspended: the service is written, and the subscriptions of the Alerts that use it are kept commented out",
        );
    }
    if spec.contains_key("interval") {
        c.note("interval", "deprecated in Flux and not used; left out");
    }
    for (field, what) in [("proxy", "spec.proxy"), ("proxySecretRef", "spec.proxySecretRef")] {
        if spec.contains_key(field) {
            c.todo(
                field,
                format!("driftwatch's services have no proxy setting: {what} is not carried over; reach the endpoint without it"),
            );
        }
    }
    if c.secret.as_ref().is_some_and(|s| s.found.is_some()) && c.consume(PROXY_KEY) {
        c.todo(
            "secretRef",
            format!("the Secret {}'s `proxy` key sets a proxy; driftwatch's services have no proxy setting", c.secret_name()),
        );
    }
    if let Some(name) = spec.get("certSecretRef").and_then(|r| r.get("name")).and_then(Value::as_str) {
        let ca = if kinds::has_ca_file(kind) { "mount it and set `caFile` to its ca.crt; " } else { "" };
        c.todo(
            "certSecretRef",
            format!("certificates from the Secret {name} are not carried over ({ca}driftwatch sends no client certificate)"),
        );
    }
    if let Some(s) = c.secret.as_ref().filter(|s| s.found.is_none()) {
        let assumed: Vec<&str> = c.assumed.iter().map(String::as_str).collect();
        let keys = if assumed.is_empty() { "none".to_string() } else { assumed.join(", ") };
        let reason = format!(
            "the Secret {} is not in the input, so its keys are not known: taken to hold {keys} (what Flux's docs give for a {} provider); \
             check them, or import the Secret too (only its keys are read)",
            s.name, c.ty
        );
        c.todo("secretRef", reason);
    }
    if let Some(found) = c.secret.as_ref().and_then(|s| s.found) {
        let unused: Vec<String> = found.keys.keys().filter(|k| !c.used_keys.contains(*k)).map(|k| format!("`{k}`")).collect();
        if !unused.is_empty() {
            let name = c.secret_name();
            c.note(
                "secretRef",
                format!("key(s) {} of the Secret {name} are not used by driftwatch's service; left out", unused.join(", ")),
            );
        }
    }
    for field in ["serviceAccountName", "commitStatusExpr"] {
        if spec.contains_key(field) {
            c.todo(field, format!("driftwatch has no counterpart of spec.{field}; not carried over"));
        }
    }
    let left: Vec<String> = spec.keys().filter(|k| !COMMON.contains(&k.as_str()) && !c.used.contains(k.as_str())).cloned().collect();
    for k in left {
        match k.as_str() {
            "channel" | "username" | "address" => c.note(&k, format!("not used by driftwatch's {kind} service; left out")),
            // Marked above.
            "serviceAccountName" | "commitStatusExpr" => {}
            _ => c.todo(&k, format!("unknown field spec.{k}; not carried over")),
        }
    }
}
