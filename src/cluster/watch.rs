//! Turns the Kubernetes API's Application and AppProject watch streams into
//! [`Change`]s (the only module that knows kube). Uses `kube::runtime::watcher`: list,
//! then watch from the list's `resourceVersion` with bookmarks; on a dropped connection
//! it resumes, on `410 Gone` it lists again (objects come back as `InitApply`, which
//! the state store's dedup keys make harmless). There is one stream per kind and
//! namespace (or one for all namespaces); each reports its own lists as a [`Stream`],
//! because a relist of one namespace says nothing about the objects of another.

use futures::StreamExt;
use kube::api::{Api, ApiResource, GroupVersionKind};
use kube::runtime::{WatchStreamExt, watcher};
use serde_json::Value;

use crate::model::{App, Project};
use crate::unit::Engine;

/// What the watch reports, in kube-free types.
#[derive(Debug, Clone)]
pub enum Change {
    App(Box<App>),
    AppDeleted(Box<App>),
    Project(Project),
    ProjectDeleted {
        namespace: String,
        name: String,
    },
    /// A (re)list of one stream started: objects follow, then `ListDone`.
    ListStarted(Stream),
    /// A (re)list of one stream ended: objects of *that stream's scope* not seen since
    /// `ListStarted` were deleted meanwhile.
    ListDone(Stream),
    /// An object that is not a valid Application/AppProject (skipped, counted).
    Malformed {
        kind: Kind,
        name: String,
        reason: String,
    },
    /// The stream failed and will be retried with backoff.
    Error {
        kind: Kind,
        error: String,
    },
}

/// One watch stream: a kind in one namespace, or in all (`namespace: None`).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Stream {
    pub kind: Kind,
    pub namespace: Option<String>,
}

impl Stream {
    /// Whether an object in `namespace` belongs to this stream's scope.
    pub fn covers(&self, namespace: &str) -> bool {
        self.namespace.as_deref().is_none_or(|n| n == namespace)
    }
}

impl std::fmt::Display for Stream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.namespace {
            Some(ns) => write!(f, "{} in {ns}", self.kind.as_str()),
            None => write!(f, "{} in all namespaces", self.kind.as_str()),
        }
    }
}

/// What a stream watches: the deployment units of one engine (an Argo CD
/// Application, a Flux Kustomization or HelmRelease, a Fleet BundleDeployment), or
/// Argo CD's AppProjects.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Kind {
    /// Argo CD's Applications (`Kind::Unit(Engine::ArgoCd)` by another name).
    Application,
    AppProject,
    /// The units of an engine other than Argo CD.
    Unit(Engine),
}

impl Kind {
    /// The stream kind of `engine`'s units.
    pub fn of(engine: Engine) -> Kind {
        match engine {
            Engine::ArgoCd => Kind::Application,
            e => Kind::Unit(e),
        }
    }

    /// The engine whose units this kind's streams carry (`None`: AppProjects).
    pub fn engine(self) -> Option<Engine> {
        match self {
            Kind::Application => Some(Engine::ArgoCd),
            Kind::AppProject => None,
            Kind::Unit(e) => Some(e),
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Kind::Application | Kind::Unit(Engine::ArgoCd) => "application",
            Kind::AppProject => "appproject",
            Kind::Unit(Engine::FluxKustomization) => "kustomization",
            Kind::Unit(Engine::FluxHelmRelease) => "helmrelease",
            Kind::Unit(Engine::Fleet) => "bundledeployment",
        }
    }
}

/// What to watch.
#[derive(Debug, Clone, Default)]
pub struct WatchOptions {
    /// Namespaces whose Applications are watched; all when empty.
    pub namespaces: Vec<String>,
    /// Label selector on Applications.
    pub selector: Option<String>,
    /// Namespaces whose AppProjects are watched (where Argo CD keeps them, whatever
    /// `namespaces` says: Applications in `team-a` belong to projects in `argocd`); all
    /// when empty.
    pub project_namespaces: Vec<String>,
    /// The engines besides Argo CD whose units are watched too (in `namespaces`, with
    /// `selector`): those the API server serves and lets driftwatch list
    /// ([`served_engines`]).
    pub engines: Vec<Engine>,
}

impl WatchOptions {
    /// The streams [`changes`] opens, AppProjects first. Readiness waits for the first
    /// list of each.
    pub fn streams(&self) -> Vec<Stream> {
        let scoped = |kind: Kind, namespaces: &[String]| -> Vec<Stream> {
            let mut ns: Vec<String> = namespaces.to_vec();
            ns.sort();
            ns.dedup();
            match ns.is_empty() {
                true => vec![Stream { kind, namespace: None }],
                false => ns.into_iter().map(|n| Stream { kind, namespace: Some(n) }).collect(),
            }
        };
        let mut out = scoped(Kind::AppProject, &self.project_namespaces);
        out.extend(scoped(Kind::Application, &self.namespaces));
        for e in self.engines.iter().filter(|e| **e != Engine::ArgoCd) {
            out.extend(scoped(Kind::Unit(*e), &self.namespaces));
        }
        out
    }
}

fn resource(kind: Kind) -> ApiResource {
    match kind.engine() {
        Some(e) => {
            let (group, version, k) = e.gvk();
            ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk(group, version, k), e.resource())
        }
        None => ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk("argoproj.io", "v1alpha1", "AppProject"), "appprojects"),
    }
}

/// The engines besides Argo CD whose units the API server serves (discovery) and
/// driftwatch may list (a list of one object, in the first of `namespaces` or in
/// all): each one missing is logged once and left out, never fatal.
pub async fn served_engines(client: &kube::Client, namespaces: &[String]) -> Vec<Engine> {
    let mut out = Vec::new();
    for engine in Engine::ALL.iter().map(|(e, ..)| *e).filter(|e| *e != Engine::ArgoCd) {
        let (group, version, kind) = engine.gvk();
        let ar = resource(Kind::Unit(engine));
        let served = match client.list_api_group_resources(&format!("{group}/{version}")).await {
            Ok(list) => list.resources.iter().any(|r| r.kind == kind && r.name == ar.plural),
            Err(e) => {
                tracing::info!(engine = engine.as_str(), kind, %e, "not served here: not watched");
                continue;
            }
        };
        if !served {
            tracing::info!(engine = engine.as_str(), kind, "not served here: not watched");
            continue;
        }
        let api: Api<Watched> = match namespaces.first() {
            Some(ns) => Api::namespaced_with(client.clone(), ns, &ar),
            None => Api::all_with(client.clone(), &ar),
        };
        match api.list_metadata(&kube::api::ListParams::default().limit(1)).await {
            Ok(_) => {
                tracing::info!(engine = engine.as_str(), kind, "served: watched");
                out.push(engine);
            }
            Err(e) => tracing::warn!(engine = engine.as_str(), kind, %e,
                "served, but driftwatch may not list them (grant get/list/watch, deploy/kubernetes): not watched"),
        }
    }
    out
}

/// An object as kube's watcher decodes it from a list page or a watch event: its
/// `metadata` parsed (what the watcher reads, `resourceVersion`, and what logs name),
/// every other top-level field (`spec`, `status`, ...) kept as its JSON text, to be
/// parsed by [`Field::tree`] when the object is taken from [`changes`]. kube's
/// watcher asks for the next list page only once it has handed out the last one's
/// objects: scanning a field is cheaper than building its tree, and the trees are
/// built while the next page is on its way ([`ReadAhead`]).
///
/// Left out, as what no trigger, template, route or fingerprint reads and what makes an
/// Application large: `metadata.managedFields` (often as big as the rest, skipped
/// unparsed) and the `kubectl.kubernetes.io/last-applied-configuration` annotation (a
/// copy of the spec). Any JSON object decodes: whether it is a valid Application is
/// [`App::from_value`]'s to say, so one bad object is skipped and counted instead of
/// failing its whole list page.
#[derive(Debug, Clone)]
pub struct Watched {
    metadata: kube::api::ObjectMeta,
    fields: Vec<(String, Field)>,
}

/// A top-level field of a [`Watched`] object.
#[derive(Debug, Clone)]
enum Field {
    /// Its JSON text, as `serde_json` scanned it: valid JSON. Parsing it fails only
    /// past `serde_json`'s nesting limit (128), which the scan does not have: then the
    /// one object is malformed (skipped and counted), not its whole list page.
    Text(String),
    /// Parsed at once: `metadata`, and any field of an object whose deserializer
    /// cannot hand out text (a watch event with `object` before `type`, which serde
    /// buffers before it knows the variant).
    Parsed(Value),
}

impl Field {
    /// An object's fields as one JSON tree, in the order they came.
    fn tree(fields: Vec<(String, Field)>) -> Result<Value, serde_json::Error> {
        let mut out = serde_json::Map::with_capacity(fields.len());
        for (key, field) in fields {
            let v = match field {
                Field::Text(text) => serde_json::from_str(&text)?,
                Field::Parsed(v) => v,
            };
            out.insert(key, v);
        }
        Ok(Value::Object(out))
    }
}

/// The name under which `serde_json`'s deserializer hands out a value's text
/// (`serde_json::value::RawValue`'s deserialisation, `src/raw.rs`: `TOKEN`).
/// `Box<RawValue>` itself cannot be used: it fails on a buffered deserializer, and a
/// watch line's key order is the server's. Should the name ever change, the field is
/// parsed at once (slower, the same result; a test says so).
const RAW_VALUE_TOKEN: &str = "$serde_json::private::RawValue";

impl<'de> serde::Deserialize<'de> for Field {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> serde::de::Visitor<'de> for V {
            type Value = Field;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a JSON value")
            }
            /// `serde_json`'s deserializer: one entry, the token and the text. (No other
            /// deserializer answers a newtype struct with a map.)
            fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> Result<Field, A::Error> {
                match map.next_key::<String>()? {
                    Some(token) if token == RAW_VALUE_TOKEN => Ok(Field::Text(map.next_value()?)),
                    _ => Err(serde::de::Error::custom("a JSON value's text was expected")),
                }
            }
            /// Any other deserializer (serde's buffer of a watch event's object).
            fn visit_newtype_struct<E: serde::Deserializer<'de>>(self, d: E) -> Result<Field, E::Error> {
                serde::Deserialize::deserialize(d).map(Field::Parsed)
            }
        }
        d.deserialize_newtype_struct(RAW_VALUE_TOKEN, V)
    }
}

impl kube::Resource for Watched {
    type DynamicType = ApiResource;
    type Scope = kube::core::DynamicResourceScope;

    fn kind(dt: &ApiResource) -> std::borrow::Cow<'_, str> {
        dt.kind.as_str().into()
    }
    fn group(dt: &ApiResource) -> std::borrow::Cow<'_, str> {
        dt.group.as_str().into()
    }
    fn version(dt: &ApiResource) -> std::borrow::Cow<'_, str> {
        dt.version.as_str().into()
    }
    fn api_version(dt: &ApiResource) -> std::borrow::Cow<'_, str> {
        dt.api_version.as_str().into()
    }
    fn plural(dt: &ApiResource) -> std::borrow::Cow<'_, str> {
        dt.plural.as_str().into()
    }
    fn meta(&self) -> &kube::api::ObjectMeta {
        &self.metadata
    }
    fn meta_mut(&mut self) -> &mut kube::api::ObjectMeta {
        &mut self.metadata
    }
}

const LAST_APPLIED: &str = "kubectl.kubernetes.io/last-applied-configuration";

/// An object's `metadata` read lean: `managedFields` skipped unparsed, the
/// last-applied annotation dropped.
struct LeanMeta(serde_json::Map<String, Value>);

impl<'de> serde::Deserialize<'de> for LeanMeta {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> serde::de::Visitor<'de> for V {
            type Value = LeanMeta;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("object metadata")
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> Result<LeanMeta, A::Error> {
                let mut out = serde_json::Map::new();
                while let Some(key) = map.next_key::<String>()? {
                    let v = match key.as_str() {
                        "managedFields" => {
                            map.next_value::<serde::de::IgnoredAny>()?;
                            continue;
                        }
                        "annotations" => {
                            let mut v: Value = map.next_value()?;
                            if let Some(a) = v.as_object_mut() {
                                a.remove(LAST_APPLIED);
                            }
                            v
                        }
                        _ => map.next_value::<Value>()?,
                    };
                    out.insert(key, v);
                }
                Ok(LeanMeta(out))
            }
        }
        d.deserialize_map(V)
    }
}

impl<'de> serde::Deserialize<'de> for Watched {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> serde::de::Visitor<'de> for V {
            type Value = Watched;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a Kubernetes object")
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> Result<Watched, A::Error> {
                let mut fields = Vec::with_capacity(6);
                let mut metadata = kube::api::ObjectMeta::default();
                while let Some(key) = map.next_key::<String>()? {
                    let field = match key.as_str() {
                        "metadata" => {
                            let m = map.next_value::<LeanMeta>()?.0;
                            let s = |k: &str| m.get(k).and_then(Value::as_str).map(str::to_string);
                            metadata = kube::api::ObjectMeta {
                                name: s("name"),
                                namespace: s("namespace"),
                                resource_version: s("resourceVersion"),
                                uid: s("uid"),
                                ..Default::default()
                            };
                            Field::Parsed(Value::Object(m))
                        }
                        _ => map.next_value::<Field>()?,
                    };
                    fields.push((key, field));
                }
                Ok(Watched { metadata, fields })
            }
        }
        d.deserialize_map(V)
    }
}

/// What the watch read ahead holds: an object still to parse, or a change already made.
enum Arrived {
    Object { kind: Kind, object: Watched, deleted: bool },
    Change(Change),
}

/// How many arrivals the watch may be read ahead of its consumer: two of kube's list
/// pages (500 objects each). While one page's objects are parsed, the next page is
/// requested.
const READ_AHEAD: usize = 1_000;

fn to_change(kind: Kind, object: Watched, deleted: bool) -> Change {
    let Watched { metadata, fields } = object;
    let malformed = |reason: String| {
        let name = format!("{}/{}", metadata.namespace.as_deref().unwrap_or_default(), metadata.name.as_deref().unwrap_or_default());
        Change::Malformed { kind, name, reason }
    };
    let v = match Field::tree(fields) {
        Ok(v) => v,
        Err(e) => return malformed(e.to_string()),
    };
    match kind {
        Kind::Application | Kind::Unit(_) => match App::from_value(v) {
            Ok(app) if deleted => Change::AppDeleted(Box::new(app)),
            Ok(app) => Change::App(Box::new(app)),
            Err(e) => malformed(e.to_string()),
        },
        Kind::AppProject => match Project::from_value(&v) {
            Ok(p) if deleted => Change::ProjectDeleted { namespace: p.namespace, name: p.name },
            Ok(p) => Change::Project(p),
            Err(e) => malformed(e.to_string()),
        },
    }
}

fn stream_for(api: Api<Watched>, stream: Stream, config: watcher::Config) -> impl futures::Stream<Item = Arrived> + Send {
    let kind = stream.kind;
    watcher(api, config).default_backoff().map(move |ev| match ev {
        Ok(watcher::Event::Apply(object)) | Ok(watcher::Event::InitApply(object)) => Arrived::Object { kind, object, deleted: false },
        Ok(watcher::Event::Delete(object)) => Arrived::Object { kind, object, deleted: true },
        Ok(watcher::Event::Init) => Arrived::Change(Change::ListStarted(stream.clone())),
        Ok(watcher::Event::InitDone) => Arrived::Change(Change::ListDone(stream.clone())),
        Err(e) => Arrived::Change(Change::Error { kind, error: e.to_string() }),
    })
}

type Watch = futures::stream::BoxStream<'static, Arrived>;

/// The merged watch streams, read ahead: each time it is polled it first takes from
/// kube's watchers whatever they have ready, up to [`READ_AHEAD`] objects, and only
/// then hands one on, parsed. Taking a list page's last object makes kube's watcher ask
/// for the next page, so the next page is on its way while this one's objects are
/// parsed and evaluated. All of it runs in the task that polls (the daemon's shell),
/// as the watch did before: a task of its own on the runtime's workers, tried first,
/// made events wait behind the deliveries' tasks (PostgreSQL at 100 changes/s: p99
/// 420–480 ms against 69 ms).
struct ReadAhead {
    watch: futures::stream::SelectAll<Watch>,
    /// The Applications' streams, until every AppProject stream has listed (or failed).
    apps: Vec<Watch>,
    /// The AppProject streams whose first list has not ended.
    waiting: std::collections::BTreeSet<Stream>,
    ahead: std::collections::VecDeque<Arrived>,
}

impl ReadAhead {
    /// What the watchers have ready, into `ahead`; whether they ended.
    fn fill(&mut self, cx: &mut std::task::Context<'_>) -> bool {
        while self.ahead.len() < READ_AHEAD {
            match self.watch.poll_next_unpin(cx) {
                std::task::Poll::Ready(Some(arrived)) => {
                    if !self.apps.is_empty() {
                        match &arrived {
                            Arrived::Change(Change::ListDone(s)) => {
                                self.waiting.remove(s);
                            }
                            Arrived::Change(Change::Error { .. }) => self.waiting.clear(),
                            _ => {}
                        }
                        if self.waiting.is_empty() {
                            // kube's watchers ask for nothing until polled: the
                            // Applications' lists start now.
                            self.watch.extend(std::mem::take(&mut self.apps));
                        }
                    }
                    self.ahead.push_back(arrived);
                }
                std::task::Poll::Ready(None) => return true,
                std::task::Poll::Pending => return false,
            }
        }
        false
    }
}

impl futures::Stream for ReadAhead {
    type Item = Change;

    fn poll_next(mut self: std::pin::Pin<&mut Self>, cx: &mut std::task::Context<'_>) -> std::task::Poll<Option<Change>> {
        let ended = self.fill(cx);
        match self.ahead.pop_front() {
            Some(Arrived::Object { kind, object, deleted }) => std::task::Poll::Ready(Some(to_change(kind, object, deleted))),
            Some(Arrived::Change(c)) => std::task::Poll::Ready(Some(c)),
            None if ended => std::task::Poll::Ready(None),
            None => std::task::Poll::Pending,
        }
    }
}

/// Every Application and AppProject change of [`WatchOptions::streams`], merged into
/// one stream, read at most [`READ_AHEAD`] objects ahead ([`ReadAhead`]); objects are
/// parsed into Applications as they are taken from this stream. The Applications are
/// listed once the AppProjects are (or one of their streams failed: a project list
/// refused does not stop the Applications): an Application evaluated before its
/// project is known is evaluated again when it comes.
pub fn changes(client: kube::Client, opts: &WatchOptions) -> impl futures::Stream<Item = Change> + Send {
    let (mut projects, mut apps) = (Vec::new(), Vec::new());
    let mut waiting = std::collections::BTreeSet::new();
    for stream in opts.streams() {
        let ar = resource(stream.kind);
        // Bookmarks keep the resume point fresh; a timeout under the API server's own
        // keeps connections recycled.
        let mut config = watcher::Config::default().timeout(290);
        if stream.kind != Kind::AppProject
            && let Some(sel) = &opts.selector
        {
            config = config.labels(sel);
        }
        let api = match &stream.namespace {
            None => Api::all_with(client.clone(), &ar),
            Some(ns) => Api::namespaced_with(client.clone(), ns, &ar),
        };
        match stream.kind {
            Kind::AppProject => {
                waiting.insert(stream.clone());
                projects.push(stream_for(api, stream, config).boxed());
            }
            Kind::Application | Kind::Unit(_) => apps.push(stream_for(api, stream, config).boxed()),
        }
    }
    if waiting.is_empty() {
        projects.append(&mut apps);
    }
    ReadAhead { watch: futures::stream::select_all(projects), apps, waiting, ahead: Default::default() }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kube::core::{ObjectList, WatchEvent};
    use serde_json::json;

    const APP: &str = r#"{"apiVersion": "argoproj.io/v1alpha1", "kind": "Application",
        "metadata": {"name": "a", "namespace": "argocd", "uid": "u", "resourceVersion": "7",
                     "managedFields": [{"manager": "x", "fieldsV1": {"f:spec": {}}}],
                     "annotations": {"kubectl.kubernetes.io/last-applied-configuration": "{}", "keep": "yes"},
                     "labels": {"team": 7}},
        "spec": {"project": "p", "destination": {"server": "https://kubernetes.default.svc"}},
        "status": {"sync": {"status": "OutOfSync"}, "weird": [1, 2.5, "\u00e9", null]}}"#;

    fn texts(w: &Watched) -> Vec<&str> {
        w.fields.iter().filter(|(_, f)| matches!(f, Field::Text(_))).map(|(k, _)| k.as_str()).collect()
    }

    #[test]
    fn a_watched_object_keeps_everything_but_managed_fields_and_the_last_applied_annotation() {
        let w: Watched = serde_json::from_str(APP).unwrap();
        assert_eq!(w.metadata.resource_version.as_deref(), Some("7"), "what the watcher resumes from");
        assert_eq!((w.metadata.name.as_deref(), w.metadata.namespace.as_deref()), (Some("a"), Some("argocd")));
        let v = Field::tree(w.fields).unwrap();
        assert!(v.pointer("/metadata/managedFields").is_none());
        assert_eq!(v.pointer("/metadata/annotations"), Some(&json!({"keep": "yes"})));
        assert_eq!(v.pointer("/metadata/labels/team"), Some(&json!(7)), "kept as sent: the model judges it");
        let mut whole: Value = serde_json::from_str(APP).unwrap();
        let meta = whole["metadata"].as_object_mut().unwrap();
        meta.remove("managedFields");
        meta.insert("annotations".into(), json!({"keep": "yes"}));
        assert_eq!(v, whole, "everything else as sent");
        let keys: Vec<&String> = v.as_object().unwrap().keys().collect();
        assert_eq!(keys, ["apiVersion", "kind", "metadata", "spec", "status"], "in the order they came");
        let w: Watched = serde_json::from_str(APP).unwrap();
        assert!(
            matches!(to_change(Kind::Application, w, false), Change::Malformed { name, .. } if name == "argocd/a"),
            "labels must be strings"
        );
        assert!(serde_json::from_str::<Watched>("[1]").is_err(), "not an object");
        assert!(serde_json::from_str::<Watched>(r#"{"spec": {"a": }}"#).is_err(), "the scan refuses what is not JSON");
    }

    /// The point of [`Watched`]: a list page's fields are scanned, not built, while the
    /// page is decoded; and a watch event decodes whatever its key order.
    #[test]
    fn a_list_page_keeps_fields_as_text_and_a_watch_event_decodes_in_either_key_order() {
        let page = format!(r#"{{"apiVersion": "v1", "kind": "List", "metadata": {{"resourceVersion": "9"}}, "items": [{APP}, {APP}]}}"#);
        let list: ObjectList<Watched> = serde_json::from_str(&page).unwrap();
        assert_eq!(list.items.len(), 2);
        for w in &list.items {
            assert_eq!(
                texts(w),
                ["apiVersion", "kind", "spec", "status"],
                "serde_json handed out the text: RAW_VALUE_TOKEN is still its name"
            );
        }
        let expected = Field::tree(list.items[0].fields.clone()).unwrap();
        let type_first = format!(r#"{{"type": "MODIFIED", "object": {APP}}}"#);
        let object_first = format!(r#"{{"object": {APP}, "type": "MODIFIED"}}"#);
        for (line, read_as_text) in [(type_first, true), (object_first, false)] {
            let Ok(WatchEvent::Modified(w)) = serde_json::from_str::<WatchEvent<Watched>>(&line) else {
                panic!("not decoded: {line}");
            };
            assert_eq!(w.metadata.resource_version.as_deref(), Some("7"));
            assert_eq!(texts(&w).is_empty(), !read_as_text, "buffered by serde: parsed at once");
            assert_eq!(Field::tree(w.fields).unwrap(), expected);
        }
        let bad = r#"{"object": {"metadata": {"name": "x"}, "spec": [1, }, "type": "ADDED"}"#;
        assert!(serde_json::from_str::<WatchEvent<Watched>>(bad).is_err());
    }

    /// An object nested past `serde_json`'s limit is one malformed object, skipped and
    /// counted: the rest of its list page decodes. (Parsed whole, as before, it failed
    /// the page, and the list was retried over and over.)
    #[test]
    fn an_object_nested_too_deep_is_malformed_and_its_page_decodes() {
        let deep = format!("{}1{}", "[".repeat(300), "]".repeat(300));
        let other = APP.replace(r#""labels": {"team": 7}"#, r#""labels": {"team": "shop"}"#);
        let too_deep = other.replace(r#""weird": [1, 2.5, "\u00e9", null]"#, &format!(r#""weird": {deep}"#));
        let page = format!(r#"{{"metadata": {{"resourceVersion": "9"}}, "items": [{too_deep}, {other}]}}"#);
        let list: ObjectList<Watched> = serde_json::from_str(&page).expect("the page decodes");
        let changes: Vec<Change> = list.items.into_iter().map(|w| to_change(Kind::Application, w, false)).collect();
        assert!(
            matches!(&changes[0], Change::Malformed { name, reason, .. } if name == "argocd/a" && reason.contains("recursion")),
            "{:?}",
            changes[0]
        );
        assert!(matches!(&changes[1], Change::App(_)), "{:?}", changes[1]);
    }
}
