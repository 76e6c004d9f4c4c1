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

/// What the watch reports, in kube-free types.
#[derive(Debug, Clone)]
pub enum Change {
    App(Box<App>),
    AppDeleted(Box<App>),
    Project(Project),
    ProjectDeleted(String),
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

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Kind {
    Application,
    AppProject,
}

impl Kind {
    pub fn as_str(self) -> &'static str {
        match self {
            Kind::Application => "application",
            Kind::AppProject => "appproject",
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
        out
    }
}

fn resource(kind: Kind) -> ApiResource {
    let k = match kind {
        Kind::Application => "Application",
        Kind::AppProject => "AppProject",
    };
    ApiResource::from_gvk(&GroupVersionKind::gvk("argoproj.io", "v1alpha1", k))
}

fn name_of(v: &Value) -> String {
    let s = |p: &str| v.pointer(p).and_then(Value::as_str).unwrap_or_default().to_string();
    format!("{}/{}", s("/metadata/namespace"), s("/metadata/name"))
}

/// An object as the watch decodes it: the JSON tree itself (no typed metadata, no
/// `#[serde(flatten)]` buffering as [`kube::api::DynamicObject`] does, no second copy),
/// without what no trigger, template, route or fingerprint reads and what makes an
/// Application large: `metadata.managedFields` (often as big as the rest, skipped while
/// parsing, never built) and the `kubectl.kubernetes.io/last-applied-configuration`
/// annotation (a copy of the spec). `metadata` holds only what the watcher reads
/// (`resourceVersion`) and what logs name. Any JSON object decodes: whether it is a
/// valid Application is [`App::from_value`]'s to say, so one bad object is skipped and
/// counted instead of failing its whole list page.
#[derive(Debug, Clone)]
pub struct Watched {
    metadata: kube::api::ObjectMeta,
    value: Value,
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

/// A JSON object read lean: at the top level (`META = false`), `metadata` is read with
/// `META = true`, which skips `managedFields` unparsed and drops the last-applied
/// annotation.
struct Lean<const META: bool>(serde_json::Map<String, Value>);

impl<'de, const META: bool> serde::Deserialize<'de> for Lean<META> {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V<const META: bool>;
        impl<'de, const META: bool> serde::de::Visitor<'de> for V<META> {
            type Value = Lean<META>;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str(if META { "object metadata" } else { "a Kubernetes object" })
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> Result<Lean<META>, A::Error> {
                let mut out = serde_json::Map::new();
                while let Some(key) = map.next_key::<String>()? {
                    let v = match (META, key.as_str()) {
                        (false, "metadata") => Value::Object(map.next_value::<Lean<true>>()?.0),
                        (true, "managedFields") => {
                            map.next_value::<serde::de::IgnoredAny>()?;
                            continue;
                        }
                        (true, "annotations") => {
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
                Ok(Lean(out))
            }
        }
        d.deserialize_map(V::<META>)
    }
}

impl<'de> serde::Deserialize<'de> for Watched {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let object = Lean::<false>::deserialize(d)?.0;
        let meta = |k: &str| object.get("metadata").and_then(|m| m.get(k)).and_then(Value::as_str).map(str::to_string);
        let metadata = kube::api::ObjectMeta {
            name: meta("name"),
            namespace: meta("namespace"),
            resource_version: meta("resourceVersion"),
            uid: meta("uid"),
            ..Default::default()
        };
        Ok(Watched { metadata, value: Value::Object(object) })
    }
}

fn to_change(kind: Kind, obj: Watched, deleted: bool) -> Change {
    let v = obj.value;
    match kind {
        Kind::Application => {
            let name = name_of(&v);
            match App::from_value(v) {
                Ok(app) if deleted => Change::AppDeleted(Box::new(app)),
                Ok(app) => Change::App(Box::new(app)),
                Err(e) => Change::Malformed { kind, name, reason: e.to_string() },
            }
        }
        Kind::AppProject => match Project::from_value(&v) {
            Ok(p) if deleted => Change::ProjectDeleted(p.name),
            Ok(p) => Change::Project(p),
            Err(e) => Change::Malformed { kind, name: name_of(&v), reason: e.to_string() },
        },
    }
}

fn stream_for(api: Api<Watched>, stream: Stream, config: watcher::Config) -> impl futures::Stream<Item = Change> + Send {
    let kind = stream.kind;
    watcher(api, config).default_backoff().map(move |ev| match ev {
        Ok(watcher::Event::Apply(o)) | Ok(watcher::Event::InitApply(o)) => to_change(kind, o, false),
        Ok(watcher::Event::Delete(o)) => to_change(kind, o, true),
        Ok(watcher::Event::Init) => Change::ListStarted(stream.clone()),
        Ok(watcher::Event::InitDone) => Change::ListDone(stream.clone()),
        Err(e) => Change::Error { kind, error: e.to_string() },
    })
}

/// Every Application and AppProject change of [`WatchOptions::streams`], merged into
/// one stream.
pub fn changes(client: kube::Client, opts: &WatchOptions) -> impl futures::Stream<Item = Change> + Send {
    let mut streams = Vec::new();
    for stream in opts.streams() {
        let ar = resource(stream.kind);
        // Bookmarks keep the resume point fresh; a timeout under the API server's own
        // keeps connections recycled.
        let mut config = watcher::Config::default().timeout(290);
        if stream.kind == Kind::Application
            && let Some(sel) = &opts.selector
        {
            config = config.labels(sel);
        }
        let api = match &stream.namespace {
            None => Api::all_with(client.clone(), &ar),
            Some(ns) => Api::namespaced_with(client.clone(), ns, &ar),
        };
        streams.push(stream_for(api, stream, config).boxed());
    }
    futures::stream::select_all(streams)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_watched_object_keeps_everything_but_managed_fields_and_the_last_applied_annotation() {
        let text = r#"{"apiVersion": "argoproj.io/v1alpha1", "kind": "Application",
            "metadata": {"name": "a", "namespace": "argocd", "uid": "u", "resourceVersion": "7",
                         "managedFields": [{"manager": "x", "fieldsV1": {"f:spec": {}}}],
                         "annotations": {"kubectl.kubernetes.io/last-applied-configuration": "{}", "keep": "yes"},
                         "labels": {"team": 7}},
            "spec": {"project": "p"}}"#;
        let w: Watched = serde_json::from_str(text).unwrap();
        assert_eq!(w.metadata.resource_version.as_deref(), Some("7"), "what the watcher resumes from");
        assert_eq!((w.metadata.name.as_deref(), w.metadata.namespace.as_deref()), (Some("a"), Some("argocd")));
        assert!(w.value.pointer("/metadata/managedFields").is_none());
        assert_eq!(w.value.pointer("/metadata/annotations"), Some(&json!({"keep": "yes"})));
        assert_eq!(w.value.pointer("/metadata/labels/team"), Some(&json!(7)), "kept as sent: the model judges it");
        assert_eq!(w.value["spec"], json!({"project": "p"}));
        assert!(matches!(to_change(Kind::Application, w, false), Change::Malformed { .. }));
        assert!(serde_json::from_str::<Watched>("[1]").is_err(), "not an object");
    }
}
