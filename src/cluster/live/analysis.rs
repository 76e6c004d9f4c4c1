//! What a live object says, whether it was read from a cluster or given as a file (a
//! replay's and `routes test`'s stand-in for the cluster, with no API call): its
//! attribution from `managedFields` and its diff against the desired values.

use super::{Attribution, DesiredSource, METRICS, ReadSettings, Wanted, diff};
use serde_json::Value;

use crate::model::ResourceRef;

/// The attribution and diff of a live object given as a file (a replay's or `routes
/// test`'s stand-in for the cluster, read with no API call),
/// under the key the pipeline looks it up by; the `ignoreDifferences` of the
/// Application among `apps` that lists it as a resource apply.
pub fn offline_attribution<'a>(
    rt: &crate::config::Runtime,
    object: &Value,
    apps: impl IntoIterator<Item = &'a Value>,
) -> (String, crate::drift::attribution::Attribution) {
    let s = |p: &str| object.pointer(p).and_then(Value::as_str).unwrap_or_default();
    let (group, version) = s("/apiVersion").rsplit_once('/').unwrap_or(("", s("/apiVersion")));
    let (kind, namespace, name) = (s("/kind"), s("/metadata/namespace"), s("/metadata/name"));
    let class = rt.classes.class_of(group, kind);
    let lists = |app: &Value| {
        app.pointer("/status/resources").and_then(Value::as_array).is_some_and(|rs| {
            rs.iter().any(|r| {
                let f = |k: &str| r.get(k).and_then(Value::as_str).unwrap_or_default();
                (f("group"), f("kind"), f("namespace"), f("name")) == (group, kind, namespace, name)
            })
        })
    };
    let app = apps.into_iter().find(|a| lists(a));
    // Under the cluster of the Application that lists it, where the pipeline looks.
    let cluster = app.map(|a| rt.target(a).key()).unwrap_or_default();
    let target = ResourceRef { group: group.into(), kind: kind.into(), namespace: namespace.into(), name: name.into() };
    let key = crate::drift::attribution::live_key(&cluster, &target);
    let rules = app.map(crate::drift::ignore::IgnoreRules::of).unwrap_or_default();
    let meta = |k: &str| app.and_then(|a| a.pointer(&format!("/metadata/{k}"))).and_then(Value::as_str).unwrap_or_default().to_string();
    let wanted = Wanted {
        object: target,
        version: version.into(),
        class: class.into(),
        cluster: String::new(),
        app_namespace: meta("namespace"),
        app_name: meta("name"),
        ignore: rules.for_resource(group, kind, namespace, name),
        notes: rules.notes.clone(),
    };
    let settings =
        ReadSettings { read_secrets: true, ignore_managers: rt.attribution.ignore_managers.clone(), diff: rt.diff.clone(), argocd: None };
    // A file is no reading of the cluster in sync: its security values are Git's only
    // by what a trusted desired state says, and a file has none.
    (key, analyse(object, &settings, &wanted, None, None))
}

/// The attribution of a live object and, with `diff.enabled`, its summarized diff
/// (CPU work: on a blocking thread). `in_sync`: the security values driftwatch read
/// from the object while Argo CD reported it Synced, when it did.
pub fn analyse(
    object: &Value,
    settings: &ReadSettings,
    w: &Wanted,
    argocd: Option<Result<Option<Value>, String>>,
    in_sync: Option<&diff::InSync>,
) -> Attribution {
    let mut a = crate::drift::attribution::attribute(object, &w.class, &settings.ignore_managers);
    if !settings.diff.enabled {
        return a;
    }
    let mut notes = w.notes.clone();
    let desired = match argocd {
        Some(Ok(Some(target))) => Some((target, DesiredSource::Argocd)),
        other => {
            if let Some(Err(e)) = other {
                notes.push(e);
            }
            match diff::desired_from_last_applied(object) {
                Ok(d) => d.map(|d| (d, DesiredSource::LastApplied)),
                Err(e) => {
                    notes.push(e.0);
                    None
                }
            }
        }
    };
    let d = diff::compute(diff::Input {
        live: object,
        desired,
        kind_class: &w.class,
        secret: crate::drift::classes::NOT_READ_BY_DEFAULT.contains(&(w.object.group.as_str(), w.object.kind.as_str())),
        ignore: &w.ignore,
        ignore_managers: &settings.ignore_managers,
        limits: settings.diff.limits,
        mask: &settings.diff.mask,
        notes,
        in_sync,
    });
    METRICS.diffs.inc(d.source.as_str());
    // What ignoreDifferences ignores is not drift for the attribution either.
    if !d.ignored.is_empty() || !w.ignore.managers.is_empty() {
        for m in &mut a.managers {
            m.fields.retain(|f| !d.ignored.contains(f));
            m.security_fields.retain(|f| !d.ignored.contains(f));
        }
        a.managers.retain(|m| !m.fields.is_empty() && !w.ignore.managers.contains(&m.manager));
        a.security = a.managers.iter().any(|m| !m.security_fields.is_empty());
    }
    // A security field the live object has and Git does not makes it a security drift,
    // whoever owns it (a manager's name proves nothing); so does a security value that
    // grants something with no trusted desired state to call it Git's, and the manager
    // that owns it is named, Argo CD's names too.
    a.security |=
        d.changes.iter().any(|c| c.security && c.desired == diff::NOT_SET && !matches!(c.live.as_str(), "false" | "{}" | "[]" | "null"));
    if d.security {
        crate::drift::attribution::name_unverified(&mut a, object, &d.changes);
    }
    a.diff = Some(d);
    a
}
