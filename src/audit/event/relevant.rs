//! Which units an audit event is about: its object in the managed index (what each
//! unit lists or reads), a Flux or Fleet unit not indexed yet, an object carrying Argo
//! CD's tracking label; or why it is dropped (a read, a controller's own write, a
//! status, a dry run, an unmanaged object).

use std::borrow::Cow;
use std::collections::BTreeMap;

use chrono::{DateTime, Utc};
use serde::Deserialize;

use super::{Dropped, Event, Filter, MUTATING, body_is_secret};

/// Whether a request was a dry run: a `dryRun` query parameter of `All`, the one value
/// the API server accepts (it refuses any other). Text elsewhere in the URI that
/// merely looks like one (`?x=dryRun=1`, `nodryRun=1`) is not.
fn dry_run(uri: &str) -> bool {
    uri.split_once('?').is_some_and(|(_, q)| form_urlencoded::parse(q.as_bytes()).any(|(k, v)| k == "dryRun" && v == "All"))
}

/// An Application the object belongs to: (state key, kind, the Application itself).
pub(super) type Hit = (String, String, bool);

/// Whether an event could concern a unit whatever the index holds: a completed,
/// mutating, in-time request naming an object, not a dry run. What the receiving
/// replica keeps for the shards (`audit::inbox`); everything [`relevant`] keeps passes
/// it, since `relevant` begins with it.
pub(super) fn admitted(e: &Event, times: Option<super::TimeBounds>, now: DateTime<Utc>) -> Result<(), Dropped> {
    if e.stage != "ResponseComplete" && e.stage != "Panic" {
        return Err(Dropped::Stage);
    }
    if !MUTATING.contains(&&*e.verb) {
        return Err(Dropped::Read);
    }
    if let Some(bounds) = times {
        // An event without a readable time is taken as received now.
        let t = DateTime::parse_from_rfc3339(&e.request_received_timestamp).map(|t| t.with_timezone(&Utc)).unwrap_or(now);
        if !bounds.admit(t, now) {
            return Err(Dropped::OutOfTime);
        }
    }
    if e.object_ref.is_none() || dry_run(&e.request_uri) {
        return Err(Dropped::NotAChange);
    }
    Ok(())
}

pub(super) fn relevant(e: &Event, f: &Filter) -> Result<Vec<Hit>, Dropped> {
    admitted(e, f.times, f.now)?;
    let Some(o) = &e.object_ref else { return Err(Dropped::NotAChange) };
    // A `deletecollection` names no object: the Applications listing one of the
    // collection's (`kubectl delete networkpolicies --all`).
    let targets: Cow<[crate::audit::index::Target]> = match (e.verb.as_ref(), o.name.is_empty()) {
        ("deletecollection", true) => Cow::Owned(f.index.collection_in(f.cluster, &o.api_group, &o.resource, &o.namespace)),
        _ => Cow::Borrowed(f.index.lookup_in(f.cluster, &o.api_group, &o.resource, &o.namespace, &o.name)),
    };
    let (user, status) = (&*e.user.username, o.subresource == "status");
    // Each engine's controller writes what its units list or read (Argo CD's too: never
    // another engine's objects), and a status is its controller's record: a status
    // write is a change only on what a Flux or Fleet unit is or reads (the unit's
    // inventory; a source's artifact), whose status is a subresource. Fleet's agent
    // writes a BundleDeployment's status on the manager with its registration account,
    // in the BundleDeployment's own namespace.
    let fleet_agent = |t: &crate::audit::index::Target| {
        status
            && t.engine == crate::unit::Engine::Fleet
            && !t.input
            && !o.namespace.is_empty()
            && user.strip_prefix("system:serviceaccount:").and_then(|r| r.split_once(':')).is_some_and(|(ns, _)| ns == o.namespace)
    };
    let by_others = |t: &&crate::audit::index::Target| {
        !f.argocd_identities.engine_controller(t.engine, user)
            && !fleet_agent(t)
            && (!status || (t.app_spec && t.engine != crate::unit::Engine::ArgoCd))
    };
    let hits: Vec<Hit> = targets.iter().filter(by_others).map(|t| (t.app_key.to_string(), t.kind.to_string(), t.app_spec)).collect();
    if !hits.is_empty() {
        return Ok(hits);
    }
    if !targets.is_empty() {
        return Err(if status { Dropped::NotAChange } else { Dropped::ArgoCd });
    }
    if status {
        return Err(Dropped::NotAChange);
    }
    // A spoke holds no unit (units are the hub's objects): what its index does not
    // list, or carry one of its Applications' tracking label, is not managed.
    if !f.cluster.is_empty() {
        // Argo CD's cluster account there creates what a sync adds, labelled.
        if f.argocd_identities.controller(user) {
            return Err(Dropped::ArgoCd);
        }
        return tracked(e, f).ok_or(Dropped::Unmanaged);
    }
    // Argo CD's controller writes what no unit lists yet (it creates what it deploys):
    // Argo CD's, except a Flux or Fleet unit it would create (steering another engine).
    let unit = unit_engine(&o.api_group, &o.resource);
    if unit.is_none() && f.argocd_identities.controller(user) {
        return Err(Dropped::ArgoCd);
    }
    // A Flux or Fleet unit the index does not have yet (just created, or not yet seen
    // by the watch) written by anyone but its engine's controller: an attempt on the
    // unit it is (by its key, with the uid the API server answered), which the unit's
    // first pass takes. (A person creating a Kustomization steers kustomize-controller,
    // whose writes are Flux's from then on.)
    if let Some(engine) = unit
        && !f.argocd_identities.engine_controller(engine, user)
    {
        let uid = e.response_object.or(e.request_object).and_then(|b| serde_json::from_str::<Meta>(b.get()).ok()).map(|m| m.metadata.uid);
        let mut key = crate::unit::qualified(engine, &o.namespace, &o.name);
        if let Some(uid) = uid.filter(|u| !u.is_empty()) {
            key = format!("{key}@{uid}");
        }
        return Ok(vec![(key, engine.kind().to_string(), true)]);
    }
    tracked(e, f).ok_or(Dropped::Unmanaged)
}

/// An object not listed yet (just created) carrying Argo CD's tracking label or
/// annotation, in its Application's destination namespace (in the event's cluster).
fn tracked(e: &Event, f: &Filter) -> Option<Vec<Hit>> {
    let o = e.object_ref.as_ref()?;
    if e.verb != "create" || body_is_secret(&o.resource, &o.subresource) {
        return None;
    }
    let body = e.response_object.or(e.request_object);
    let tracking = body.and_then(|b| tracking_of(b.get()))?;
    let kind = body.and_then(|b| kind_of(b.get())).unwrap_or_default();
    let hits: Vec<Hit> =
        f.index.tracked_in(f.cluster, &tracking, &o.namespace).into_iter().map(|k| (k.to_string(), kind.clone(), false)).collect();
    (!hits.is_empty()).then_some(hits)
}

#[derive(Deserialize, Default)]
struct Meta {
    #[serde(default)]
    kind: String,
    #[serde(default)]
    metadata: MetaFields,
}

/// The engine whose units the resource `group/resource` holds (Flux's and Fleet's: an
/// Application not indexed yet is Argo CD's admission's to judge).
fn unit_engine(group: &str, resource: &str) -> Option<crate::unit::Engine> {
    crate::unit::Engine::of_resource(group, resource).filter(|e| *e != crate::unit::Engine::ArgoCd)
}

#[derive(Deserialize, Default)]
struct MetaFields {
    #[serde(default)]
    uid: String,
    #[serde(default)]
    labels: BTreeMap<String, String>,
    #[serde(default)]
    annotations: BTreeMap<String, String>,
}

/// The Application an object names: the tracking annotation's first part
/// (`app:group/Kind:ns/name`), else the instance label.
fn tracking_of(body: &str) -> Option<String> {
    let m: Meta = serde_json::from_str(body).ok()?;
    if let Some(id) = m.metadata.annotations.get("argocd.argoproj.io/tracking-id") {
        return id.split(':').next().map(str::to_string);
    }
    m.metadata.labels.get("app.kubernetes.io/instance").cloned()
}

fn kind_of(body: &str) -> Option<String> {
    serde_json::from_str::<Meta>(body).ok().map(|m| m.kind).filter(|k| !k.is_empty())
}
