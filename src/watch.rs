//! Turns the Kubernetes API's Application and AppProject watch streams into
//! [`Change`]s (the only module that knows kube). Uses `kube::runtime::watcher`: list,
//! then watch from the list's `resourceVersion` with bookmarks; on a dropped connection
//! it resumes, on `410 Gone` it lists again (objects come back as `InitApply`, which
//! the state store's dedup keys make harmless).

use std::time::Duration;

use futures::{Stream, StreamExt};
use kube::api::{Api, ApiResource, DynamicObject, GroupVersionKind};
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
    /// A (re)list started: objects follow, then `ListDone`.
    ListStarted(Kind),
    /// A (re)list ended: objects not seen since `ListStarted` were deleted meanwhile.
    ListDone(Kind),
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
    /// Namespaces to watch; all when empty.
    pub namespaces: Vec<String>,
    /// Label selector on Applications.
    pub selector: Option<String>,
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

fn to_change(kind: Kind, obj: DynamicObject, deleted: bool) -> Change {
    let v = match serde_json::to_value(&obj) {
        Ok(v) => v,
        Err(e) => return Change::Malformed { kind, name: obj.metadata.name.unwrap_or_default(), reason: e.to_string() },
    };
    match kind {
        Kind::Application => match App::from_value(v.clone()) {
            Ok(app) if deleted => Change::AppDeleted(Box::new(app)),
            Ok(app) => Change::App(Box::new(app)),
            Err(e) => Change::Malformed { kind, name: name_of(&v), reason: e.to_string() },
        },
        Kind::AppProject => match Project::from_value(&v) {
            Ok(p) if deleted => Change::ProjectDeleted(p.name),
            Ok(p) => Change::Project(p),
            Err(e) => Change::Malformed { kind, name: name_of(&v), reason: e.to_string() },
        },
    }
}

fn stream_for(api: Api<DynamicObject>, kind: Kind, config: watcher::Config) -> impl Stream<Item = Change> + Send {
    watcher(api, config).default_backoff().map(move |ev| match ev {
        Ok(watcher::Event::Apply(o)) | Ok(watcher::Event::InitApply(o)) => to_change(kind, o, false),
        Ok(watcher::Event::Delete(o)) => to_change(kind, o, true),
        Ok(watcher::Event::Init) => Change::ListStarted(kind),
        Ok(watcher::Event::InitDone) => Change::ListDone(kind),
        Err(e) => Change::Error { kind, error: e.to_string() },
    })
}

/// Every Application and AppProject change, merged into one stream.
pub fn changes(client: kube::Client, opts: &WatchOptions) -> impl Stream<Item = Change> + Send {
    let mut streams = Vec::new();
    for kind in [Kind::AppProject, Kind::Application] {
        let ar = resource(kind);
        // Bookmarks keep the resume point fresh; a timeout under the API server's own
        // keeps connections recycled.
        let mut config = watcher::Config::default().timeout(290);
        if kind == Kind::Application
            && let Some(sel) = &opts.selector
        {
            config = config.labels(sel);
        }
        if opts.namespaces.is_empty() {
            streams.push(stream_for(Api::all_with(client.clone(), &ar), kind, config).boxed());
        } else {
            for ns in &opts.namespaces {
                streams.push(stream_for(Api::namespaced_with(client.clone(), ns, &ar), kind, config.clone()).boxed());
            }
        }
    }
    futures::stream::select_all(streams)
}

/// A client from an explicit kubeconfig (and context), or the usual inference:
/// in-cluster service account, then `$KUBECONFIG` / `~/.kube/config`.
pub async fn client(kubeconfig: Option<&std::path::Path>, context: Option<&str>) -> Result<kube::Client, String> {
    crate::deliver::http::init_crypto();
    let options = kube::config::KubeConfigOptions { context: context.map(str::to_string), ..Default::default() };
    let mut config = match kubeconfig {
        Some(path) => {
            let kc = kube::config::Kubeconfig::read_from(path).map_err(|e| format!("kubeconfig {}: {e}", path.display()))?;
            kube::Config::from_custom_kubeconfig(kc, &options).await.map_err(|e| format!("kubeconfig {}: {e}", path.display()))?
        }
        None if context.is_some() => kube::Config::from_kubeconfig(&options).await.map_err(|e| format!("kubeconfig: {e}"))?,
        None => kube::Config::infer().await.map_err(|e| format!("no cluster configuration found (in-cluster or kubeconfig): {e}"))?,
    };
    config.read_timeout = Some(Duration::from_secs(330));
    kube::Client::try_from(config).map_err(|e| format!("kubernetes client: {e}"))
}
