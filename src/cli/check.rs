//! `driftwatch check`: compile every trigger and template, render each template for
//! synthetic drift, episode and group samples, print every error and warning.

use anyhow::Context;

use super::{
    App, CHECK_SAMPLES, DestinationKind, Drift, Episode, FAILED, OK, Path, RenderContext, Runtime, Target, Utc, Value, Write, json, load,
};

/// A group of three Applications (one resolved, or all when `resolved`) for `check`.
fn check_group_sample(app: &App, resolved: bool) -> serde_json::Value {
    let mut g = None;
    let names = [app.qualified_name(), format!("{}/sample-b", app.namespace), format!("{}/sample-c", app.namespace)];
    for name in &names {
        g = crate::state::Group::after(g.as_ref(), None, "check", name, true, "check.0", 0).map(|(g, _)| g).or(g);
    }
    let leaving = if resolved { &names[..] } else { &names[..1] };
    for name in leaving {
        let member = crate::state::Member { instance: "check.0".into(), firing: true };
        g = crate::state::Group::after(g.as_ref(), Some(&member), "check", name, false, "check.0", 0).map(|(g, _)| g).or(g);
    }
    let labels = std::collections::BTreeMap::from([("revision".to_string(), "0123456789abcdef0123456789abcdef01234567".to_string())]);
    g.map_or(serde_json::Value::Null, |g| g.view(&labels))
}

/// `driftwatch check`: compiles everything, renders every template for every kind
/// against sample Applications, prints every error and warning.
pub fn check(config: Option<&Path>, out: &mut dyn Write, err: &mut dyn Write) -> anyhow::Result<i32> {
    let Some(rt) = load(config, err)? else { return Ok(FAILED) };
    let mut errors = 0;
    for w in &rt.warnings {
        match &w.pos {
            Some(p) => writeln!(err, "warning: {p}: {}", w.message)?,
            None => writeln!(err, "warning: {}", w.message)?,
        }
    }
    let kinds: Vec<(DestinationKind, String)> = DestinationKind::ALL
        .iter()
        .filter(|k| **k != DestinationKind::Webhook)
        .map(|k| (*k, k.as_str().to_string()))
        .chain(
            rt.services
                .values()
                .filter(|s| s.spec.config.kind() == DestinationKind::Webhook)
                .map(|s| (DestinationKind::Webhook, s.name.clone())),
        )
        .collect();
    let mut seen = std::collections::BTreeSet::new();
    for sample in CHECK_SAMPLES {
        let app = App::from_value(serde_json::from_str(sample).context("built-in check sample")?).context("built-in check sample")?;
        for (drift, episode, at, resolved) in check_drift_samples(&rt, &app) {
            let mut ctx = RenderContext::new(&app, &rt.context).with_pass(&drift, episode.as_ref(), at);
            // What a grouped route's message sees (other templates ignore it).
            ctx.set("group", check_group_sample(&app, resolved));
            for name in rt.templates.names() {
                for (kind, service) in &kinds {
                    let target = Target { trigger: "check", kind: *kind, service, recipient: "check", resolved };
                    match crate::pipeline::wiring::render(&rt, name, &mut ctx, &target, &app) {
                        Ok(_)
                        | Err(crate::template::RenderError::NoWebhookField { .. } | crate::template::RenderError::NoKindFields { .. }) => {}
                        Err(e) => {
                            if seen.insert(e.to_string()) {
                                writeln!(err, "error: {e} (rendering a sample Application for {kind})")?;
                                errors += 1;
                            }
                        }
                    }
                }
            }
        }
    }
    if errors > 0 {
        writeln!(err, "{errors} configuration error(s)")?;
        return Ok(FAILED);
    }
    writeln!(
        out,
        "ok: {} triggers, {} templates, {} services, {} warning(s)",
        rt.triggers.len(),
        rt.templates.names().count(),
        rt.services.len(),
        rt.warnings.len()
    )?;
    Ok(OK)
}

/// `drift` and `episode` values `check` renders every template with: none (a synced
/// Application), an open security episode with attribution, and its resolution.
fn check_drift_samples(rt: &Runtime, app: &App) -> Vec<(Drift, Option<Episode>, chrono::DateTime<Utc>, bool)> {
    let t0 = chrono::DateTime::<Utc>::from_timestamp(1_772_420_000, 0).unwrap_or_default();
    let none =
        Drift::of(&app.object, &rt.classes, &crate::drift::attribution::LiveIndex::new(), "", &crate::project::Scope::unrestricted());
    let mut drifted = app.clone();
    // The samples are being deleted (for on-deleted); a drifting one is not.
    if let Some(meta) = drifted.object.get_mut("metadata").and_then(Value::as_object_mut) {
        meta.remove("deletionTimestamp");
    }
    drifted.object["status"]["sync"]["status"] = json!("OutOfSync");
    drifted.object["status"]["resources"] = json!([
        {"group": "apps", "version": "v1", "kind": "Deployment", "namespace": "ns", "name": "web", "status": "OutOfSync"},
        {"group": "rbac.authorization.k8s.io", "version": "v1", "kind": "Role", "namespace": "ns", "name": "reader", "status": "OutOfSync"}
    ]);
    let live_object = json!({"metadata": {"managedFields": [{"manager": "kubectl-edit", "operation": "Update", "time": "2026-03-02T03:12:00Z",
        "fieldsV1": {"f:spec": {"f:template": {"f:spec": {"f:containers": {"k:{\"name\":\"web\"}": {"f:securityContext": {"f:privileged": {}}}}}}}}}]}});
    let mut live = crate::drift::attribution::LiveIndex::new();
    let mut attribution = crate::drift::attribution::attribute(&live_object, "workload", &[]);
    let change = |path: &str, desired: &str, live: &str, security: bool| crate::drift::diff::FieldChange {
        path: path.into(),
        desired: desired.into(),
        live: live.into(),
        manager: "kubectl-edit".into(),
        user: "alice@example.com".into(),
        time: "2026-03-02T03:12:00Z".into(),
        security,
    };
    attribution.diff = Some(crate::drift::diff::ResourceDiff {
        source: crate::drift::diff::DesiredSource::LastApplied,
        changes: vec![
            change("spec.template.spec.containers[web].securityContext.privileged", crate::drift::diff::NOT_SET, "true", true),
            change("spec.replicas", "2", "5", false),
        ],
        more: 3,
        ..Default::default()
    });
    live.insert(
        crate::drift::attribution::resource_key(&crate::model::ResourceRef {
            group: "apps".into(),
            kind: "Deployment".into(),
            namespace: "ns".into(),
            name: "web".into(),
        }),
        attribution,
    );
    let drift = Drift::of(&drifted.object, &rt.classes, &live, "", &crate::project::Scope::unrestricted());
    let open = crate::drift::episode::observe(None, &drifted, &drift, t0).episode;
    debug_assert!(open.is_some(), "the drifted sample opens an episode");
    let resolved = crate::drift::episode::observe(open.clone(), app, &none, t0 + chrono::Duration::minutes(14)).episode;
    vec![(none.clone(), None, t0, false), (drift, open, t0, false), (none, resolved, t0 + chrono::Duration::minutes(14), true)]
}
