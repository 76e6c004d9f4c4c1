//! `driftwatch diff NAMESPACE/APP`: the summarized diff of an Application's drifted
//! resources, read from the cluster(s) as the daemon reads them — the Application from
//! the cluster driftwatch talks to, each OutOfSync resource from its destination
//! cluster (`clusters:`), desired values from Argo CD's API or the last-applied
//! annotation. Exit 0: nothing differs; 1: something does (as `argocd app diff`);
//! 2: the Application or the configuration could not be read.

use std::io::Write;

use serde_json::{Value, json};

use super::{Format, load};
use crate::cluster::live::{LiveFetcher, Wanted};
use crate::config::clusters::Target;
use crate::drift::Drift;
use crate::drift::attribution::LiveIndex;
use crate::exit::{BAD_INPUT, FAILED, OK};

pub struct DiffOptions<'a> {
    pub app: &'a str,
    pub cluster: super::ClusterOptions<'a>,
    pub output: Format,
}

pub fn diff_command(o: &DiffOptions<'_>, out: &mut dyn Write, err: &mut dyn Write) -> anyhow::Result<i32> {
    let Some(rt) = load(o.cluster.config, err)? else { return Ok(BAD_INPUT) };
    let (namespace, name) = o.app.split_once('/').unwrap_or(("argocd", o.app));
    let tokio_rt = tokio::runtime::Runtime::new()?;
    let read = tokio_rt.block_on(async {
        let client = crate::cluster::client::client(o.cluster.kubeconfig, o.cluster.context).await?;
        let Some(app) = crate::cluster::live::get_application(&client, namespace, name).await? else {
            return Err(format!("Application {namespace}/{name} does not exist"));
        };
        let target = rt.target(&app);
        // The AppProject bounds what is read, as in the daemon.
        let project_name = app.pointer("/spec/project").and_then(serde_json::Value::as_str).unwrap_or("default");
        let policy = crate::cluster::live::get_project(&client, &rt.attribution.argocd_namespace, project_name)
            .await?
            .map(|p| crate::project::ProjectPolicy::of(&p));
        let (server, dest_name) = rt.destination_of(&app);
        let scope = crate::project::Scope::of(&app, policy.as_ref(), &rt.attribution.argocd_namespace).resolved(&server, &dest_name);
        let listed = Drift::of(&app, &rt.classes, &LiveIndex::new(), &target.key(), &scope);
        let wanted = Wanted::from_drift(&listed, &target, &app, &scope);
        let (mut fetcher, mut results) = LiveFetcher::for_runtime(&rt, client).await;
        let started = fetcher.request("diff", wanted, || crate::drift::ignore::IgnoreRules::of(&app)).started;
        let mut live = LiveIndex::new();
        for _ in 0..started {
            let Some(f) = results.recv().await else { break };
            if let Some(a) = f.attribution() {
                live.insert(f.wanted.key(), a);
            }
        }
        Ok((Drift::of(&app, &rt.classes, &live, &target.key(), &scope), target))
    });
    let (drift, target) = match read {
        Ok(r) => r,
        Err(e) => {
            writeln!(err, "error: {e}")?;
            return Ok(BAD_INPUT);
        }
    };
    let differs = drift.resources.iter().any(|r| !r.changes.is_empty()) || drift.count > 0;
    match o.output {
        Format::Json => {
            let v = json!({"app": format!("{namespace}/{name}"), "cluster": cluster_name(&target), "count": drift.count, "resources": drift.resources});
            writeln!(out, "{}", serde_json::to_string_pretty(&v)?)?;
        }
        Format::Text => print_text(out, namespace, name, &target, &drift)?,
    }
    Ok(if differs { FAILED } else { OK })
}

fn cluster_name(t: &Target) -> Value {
    match t {
        Target::Local => json!(crate::cluster::live::IN_CLUSTER),
        Target::Spoke(l) => json!(l),
        Target::Elsewhere(d) => json!(d),
    }
}

fn print_text(out: &mut dyn Write, namespace: &str, name: &str, target: &Target, drift: &Drift) -> std::io::Result<()> {
    if drift.count == 0 {
        return writeln!(out, "{namespace}/{name}: no resource is OutOfSync");
    }
    writeln!(out, "{namespace}/{name}: {} resource(s) OutOfSync ({} drift)", drift.count, drift.direction)?;
    if let Target::Elsewhere(d) = target {
        writeln!(out, "  its destination {d} is not a configured cluster (clusters:): live objects not read")?;
    }
    for r in &drift.resources {
        let cluster = if r.cluster.is_empty() { crate::cluster::live::IN_CLUSTER } else { r.cluster.as_str() };
        let source = if r.desired_source.is_empty() { String::new() } else { format!(", desired from {}", r.desired_source) };
        writeln!(out, "{} {}/{} ({cluster}{source})", r.object.kind, r.object.namespace, r.object.name)?;
        if let Some(nr) = r.attribution.as_ref().and_then(|a| a.not_read.as_ref()) {
            writeln!(out, "  not read: {}", nr.message)?;
        }
        for c in &r.changes {
            let by = [c.user.as_str(), c.manager.as_str(), c.time.as_str()]
                .iter()
                .filter(|s| !s.is_empty())
                .copied()
                .collect::<Vec<_>>()
                .join(" ");
            writeln!(out, "  {}: {} → {}{}", c.path, c.desired, c.live, if by.is_empty() { String::new() } else { format!("   ({by})") })?;
        }
        if r.changes_more > 0 {
            writeln!(out, "  and {} more", r.changes_more)?;
        }
        if !r.diff_note.is_empty() {
            writeln!(out, "  note: {}", r.diff_note)?;
        }
    }
    Ok(())
}
