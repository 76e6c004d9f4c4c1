//! The Applications an evaluation thread keeps between passes, packed
//! ([`PackedApp`]): the latest of each by state key, and the deleted ones whose last
//! pass could not be written yet. What the loops over all Applications filter on
//! (namespace, AppProject) is kept beside the packed JSON.

use std::collections::{BTreeSet, HashMap};

use serde_json::Value;

use crate::cluster::watch::Stream;
use crate::metrics::METRICS;
use crate::model::App;

/// An Application between evaluations: its JSON text, compressed (LZ4), and what the
/// loops over all Applications filter on. A `serde_json::Value` tree takes several
/// times the object's JSON and the JSON was most of what the daemon held (3.5 KB of the
/// 5.9 KB per Application, heap profile at 3,000); compressed it is a fifth of that or
/// less: an Application's keys repeat in every entry of `status.resources`. It is
/// decompressed and parsed again only when the Application is evaluated without a
/// change of its own (a wake-up, a reload, an attribution read, a change of its
/// AppProject), so a change pays for one compression and nothing more. LZ4 rather than
/// deflate: deflate's fastest level was a tenth of a first pass's CPU (its tables
/// cleared for every Application), LZ4 under 2%, for somewhat more kept
/// (BENCHMARKS.md, "A first pass's cost").
struct PackedApp {
    compressed: Box<[u8]>,
    /// The JSON's length (what decompression makes room for).
    len: u32,
    namespace: String,
    project: String,
    engine: crate::unit::Engine,
}

impl PackedApp {
    fn of(app: &App) -> PackedApp {
        let json = serde_json::to_vec(&app.object).unwrap_or_default();
        // An object is at most a few MB (etcd's limit): its length fits.
        let (compressed, len) = match u32::try_from(json.len()) {
            Ok(len) => (lz4_flex::compress(&json).into_boxed_slice(), len),
            Err(_) => (Box::default(), 0),
        };
        PackedApp { compressed, len, namespace: app.namespace.clone(), project: app.project.clone(), engine: app.engine() }
    }

    /// The Application again. It was one when kept, so this does not fail in practice;
    /// if it did, the Application is skipped until its next change.
    fn app(&self) -> Option<App> {
        let json = lz4_flex::decompress(&self.compressed, usize::try_from(self.len).ok()?).ok()?;
        let v: Value = serde_json::from_slice(&json).ok()?;
        App::from_value(v).ok()
    }
}

/// The Applications one evaluation thread keeps, by state key.
#[derive(Default)]
pub(super) struct AppCache {
    /// Latest Application per state key (for re-evaluation and missed deletes).
    kept: HashMap<String, PackedApp>,
    /// Deleted Applications whose last pass could not be written yet (the store
    /// failed): evaluated again, as deleted, until it is.
    retiring: HashMap<String, PackedApp>,
    /// How many Applications this thread counts in `driftwatch_applications` (the
    /// gauge is the process's, the sum of its threads').
    counted: usize,
}

impl AppCache {
    /// Keeps `app` as the latest of its state key.
    pub fn keep(&mut self, app: &App) {
        self.kept.insert(app.state_key(), PackedApp::of(app));
    }

    /// The kept Application of `key`, unpacked.
    pub fn get(&self, key: &str) -> Option<App> {
        self.kept.get(key).and_then(PackedApp::app)
    }

    /// What a pass of `key` evaluates when nothing changed: the kept Application, else
    /// the retiring one; with whether it is deleted.
    pub fn for_pass(&self, key: &str) -> Option<(App, bool)> {
        match self.get(key) {
            Some(app) => Some((app, false)),
            None => self.retiring.get(key).and_then(PackedApp::app).map(|app| (app, true)),
        }
    }

    /// `app` is deleted but its last pass could not be written: it is evaluated again,
    /// as deleted, until it is ([`AppCache::retired`]).
    pub fn retire(&mut self, app: &App) {
        self.retiring.insert(app.state_key(), PackedApp::of(app));
    }

    /// The last pass of the deleted Application `key` was written.
    pub fn retired(&mut self, key: &str) {
        self.retiring.remove(key);
    }

    /// Stops keeping `key` (deleted: its last pass was done or it is retiring).
    pub fn remove(&mut self, key: &str) {
        self.kept.remove(key);
    }

    /// Forgets `key`, kept or else retiring; whether there was one.
    pub fn forget(&mut self, key: &str) -> bool {
        self.kept.remove(key).is_some() || self.retiring.remove(key).is_some()
    }

    /// Forgets everything, giving the maps' capacity back; the keys that were kept or
    /// retiring.
    pub fn forget_all(&mut self) -> Vec<String> {
        let keys = self.keys();
        self.kept = HashMap::new();
        self.retiring = HashMap::new();
        keys
    }

    /// Every key, kept or retiring.
    pub fn keys(&self) -> Vec<String> {
        self.kept.keys().chain(self.retiring.keys()).cloned().collect()
    }

    /// The kept members of AppProject `project`.
    pub fn members_of(&self, project: &str) -> Vec<String> {
        self.kept.iter().filter(|(_, a)| a.project == project).map(|(k, _)| k.clone()).collect()
    }

    /// The kept Applications of `stream`'s namespaces that its relist did not have.
    pub fn gone_from(&self, stream: &Stream, seen: &BTreeSet<String>) -> Vec<String> {
        let engine = stream.kind.engine();
        self.kept
            .iter()
            .filter(|(k, a)| Some(a.engine) == engine && stream.covers(&a.namespace) && !seen.contains(*k))
            .map(|(k, _)| k.clone())
            .collect()
    }

    /// This thread's part of `driftwatch_applications`: the Applications it keeps.
    pub fn count(&mut self) {
        let now = self.kept.len();
        if now != self.counted {
            let delta = i64::try_from(now).unwrap_or(i64::MAX).saturating_sub(i64::try_from(self.counted).unwrap_or(i64::MAX));
            METRICS.applications.inc_by(delta);
            self.counted = now;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_kept_application_comes_back_whole_in_a_fraction_of_its_json() {
        let resources: Vec<Value> = (0..20)
            .map(|r| {
                serde_json::json!({"group": "apps", "version": "v1", "kind": "Deployment", "namespace": "shop",
                                   "name": format!("res-{r}"), "status": "Synced", "health": {"status": "Healthy"}})
            })
            .collect();
        let object = serde_json::json!({
            "apiVersion": "argoproj.io/v1alpha1", "kind": "Application",
            "metadata": {"name": "shop", "namespace": "argocd", "uid": "u-1", "labels": {"team": "shop"},
                         "annotations": {"notifications.argoproj.io/subscribe.on-drift.slack": "ops"}},
            "spec": {"project": "payments", "destination": {"server": "https://kubernetes.default.svc", "namespace": "shop"}},
            "status": {"sync": {"status": "OutOfSync", "revision": "4f1c0de"}, "resources": resources, "unicode": "größe ✓"}
        });
        let app = App::from_value(object.clone()).unwrap();
        let kept = PackedApp::of(&app);
        assert_eq!((kept.namespace.as_str(), kept.project.as_str()), ("argocd", "payments"));
        let json = object.to_string().len();
        assert!(kept.compressed.len() * 3 < json, "{} bytes kept for {json} of JSON", kept.compressed.len());
        assert_eq!(kept.app(), Some(app));
    }

    #[test]
    fn an_application_that_does_not_compress_is_kept_whole_too() {
        // 256 KB of characters with no repeats to speak of: the output is larger than
        // the input.
        let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
        let noise: String = (0..256 * 1024)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                char::from(b'!' + (x % 90) as u8)
            })
            .collect();
        for n in 0..3 {
            let app = App::from_value(serde_json::json!({"apiVersion": "argoproj.io/v1alpha1", "kind": "Application",
                "metadata": {"name": format!("a{n}"), "namespace": "argocd", "annotations": {"noise": noise}}}))
            .unwrap();
            assert_eq!(PackedApp::of(&app).app(), Some(app));
        }
    }

    #[test]
    fn a_damaged_kept_application_is_none_not_a_panic() {
        let app = App::from_value(serde_json::json!({"apiVersion": "argoproj.io/v1alpha1", "kind": "Application",
                                                     "metadata": {"name": "a", "namespace": "argocd"}}))
        .unwrap();
        let mut kept = PackedApp::of(&app);
        let half = kept.compressed.len() / 2;
        kept.compressed = kept.compressed[..half].into();
        assert_eq!(kept.app(), None);
        let mut kept = PackedApp::of(&app);
        kept.len /= 2;
        assert_eq!(kept.app(), None, "a length too short");
    }

    fn app(name: &str, namespace: &str, project: &str) -> App {
        App::from_value(serde_json::json!({"apiVersion": "argoproj.io/v1alpha1", "kind": "Application",
                                           "metadata": {"name": name, "namespace": namespace}, "spec": {"project": project}}))
        .unwrap()
    }

    #[test]
    fn the_cache_finds_members_and_relist_gaps_and_passes_a_retiring_application_as_deleted() {
        let (a, b, r) = (app("a", "argocd", "shop"), app("b", "argocd", "pay"), app("r", "tenants", "shop"));
        let mut cache = AppCache::default();
        cache.keep(&a);
        cache.keep(&b);
        cache.retire(&r);
        assert_eq!(cache.members_of("shop"), [a.state_key()], "a retiring Application is no member");
        assert_eq!(cache.for_pass(&a.state_key()), Some((a.clone(), false)));
        assert_eq!(cache.for_pass(&r.state_key()), Some((r.clone(), true)));
        let argocd = Stream { kind: crate::cluster::watch::Kind::Application, namespace: Some("argocd".into()) };
        assert_eq!(cache.gone_from(&argocd, &BTreeSet::from([a.state_key()])), [b.state_key()]);
        cache.retired(&r.state_key());
        assert_eq!(cache.for_pass(&r.state_key()), None);
        assert!(cache.forget(&a.state_key()));
        assert!(!cache.forget(&a.state_key()), "forgotten once");
        assert_eq!(cache.forget_all(), [b.state_key()]);
        assert!(cache.keys().is_empty());
    }
}
