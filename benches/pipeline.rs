//! Evaluation-path benchmark: `cargo bench --bench pipeline`.
//!
//! Measures, on a realistic Application (60 resources, conditions, annotations):
//! converting it to rhai values, one condition evaluation, rendering one template, and
//! a whole `Pipeline::evaluate` for an Application subscribed to every catalog trigger;
//! then the drift-intelligence path: attribution from managedFields, route matching,
//! and a pass under the production route policy with the episode read and stored.
//! Prints the median of several rounds; results go to BENCHMARKS.md.

use std::hint::black_box;
use std::sync::Arc;
use std::time::Instant;

use chrono::Utc;
use driftwatch::config;
use driftwatch::drift::Drift;
use driftwatch::model::{App, DestinationKind};
use driftwatch::pipeline::Pipeline;
use driftwatch::state::Store;
use driftwatch::template::{RenderContext, Target};
use driftwatch::trigger::convert::to_dynamic;
use serde_json::{Value, json};

fn app(i: usize) -> Value {
    let resources: Vec<Value> = (0..60)
        .map(|r| {
            json!({"group": "apps", "version": "v1", "kind": if r % 3 == 0 { "Deployment" } else { "Service" },
                   "namespace": "shop", "name": format!("res-{r}"), "status": if r == 7 { "OutOfSync" } else { "Synced" },
                   "health": {"status": "Healthy"}})
        })
        .collect();
    let mut annotations = serde_json::Map::new();
    for t in [
        "on-created",
        "on-deleted",
        "on-deployed",
        "on-health-degraded",
        "on-out-of-sync",
        "on-sync-failed",
        "on-sync-running",
        "on-sync-status-unknown",
        "on-sync-succeeded",
    ] {
        annotations.insert(format!("notifications.argoproj.io/subscribe.{t}.slack"), json!("ops"));
    }
    json!({
        "apiVersion": "argoproj.io/v1alpha1", "kind": "Application",
        "metadata": {"name": format!("app-{i}"), "namespace": "argocd", "uid": format!("uid-{i}"),
                     "labels": {"env": "prod", "team": "shop"}, "annotations": annotations},
        "spec": {"project": "default", "source": {"repoURL": "https://git.example.com/shop.git", "path": "deploy", "targetRevision": "main"},
                 "destination": {"server": "https://kubernetes.default.svc", "namespace": "shop"},
                 "syncPolicy": {"automated": {"prune": true, "selfHeal": true}}},
        "status": {
            "sync": {"status": "OutOfSync", "revision": "a1b2c3d4e5f60718293a4b5c6d7e8f9012345678"},
            "health": {"status": "Healthy", "lastTransitionTime": "2026-03-01T09:00:40Z"},
            "reconciledAt": "2026-03-01T09:01:00Z", "observedAt": "2026-03-01T09:01:00Z",
            "conditions": [{"type": "SyncError", "message": "one or more objects failed to apply"}],
            "resources": resources,
            "operationState": {"phase": "Succeeded", "message": "ok", "startedAt": "2026-03-01T09:00:00Z",
                               "finishedAt": "2026-03-01T09:00:30Z", "syncResult": {"revision": "a1b2c3d4e5f60718293a4b5c6d7e8f9012345678"}}
        }
    })
}

/// Runs `f` `iters` times per round, 7 rounds; returns the median ns per call.
/// Queues `notifications` and settles them as delivered, as the workers would: their
/// keys recorded the only way they are (a settle).
fn delivered(state: &Store, notifications: &[driftwatch::model::Notification]) {
    let report = state.pass().write_pass_due(&driftwatch::state::PassWrite::default(), notifications, 0, None, &[]).expect("queues");
    assert_eq!(report.queued, notifications.len(), "{report:?}");
    let settled: Vec<_> =
        state.outbox().entries(None).expect("outbox").into_iter().map(|e| (e, driftwatch::state::Settle::Delivered)).collect();
    state.outbox().settle(&settled, 0).expect("settles");
}

fn measure(name: &str, iters: u32, mut f: impl FnMut()) -> f64 {
    for _ in 0..iters.min(100) {
        f();
    }
    let mut rounds: Vec<f64> = (0..7)
        .map(|_| {
            let start = Instant::now();
            for _ in 0..iters {
                f();
            }
            start.elapsed().as_nanos() as f64 / f64::from(iters)
        })
        .collect();
    rounds.sort_by(f64::total_cmp);
    let median = rounds[3];
    println!("{name:<58} {:>12.0} ns/op  ({:.0} ops/s)", median, 1e9 / median);
    median
}

fn main() {
    let rt = Arc::new(config::load(None).expect("catalog loads"));
    let object = app(0);
    let application = App::from_value(object.clone()).expect("fixture is an Application");
    println!("driftwatch evaluation-path benchmark ({} bytes of Application JSON)\n", object.to_string().len());

    let convert = measure("convert Application to rhai values (once per pass)", 2_000, || {
        let _ = black_box(to_dynamic(black_box(&object)));
    });

    let trigger = &rt.triggers["on-sync-failed"];
    let mut scope = rt.engine.prepare(&object);
    let cond = measure("evaluate one condition (on-sync-failed)", 50_000, || {
        black_box(rt.engine.run(trigger, &mut scope));
    });
    let deployed = &rt.triggers["on-deployed"];
    measure("evaluate one condition (on-deployed, time arithmetic)", 20_000, || {
        black_box(rt.engine.run(deployed, &mut scope));
    });
    println!("{:<58} {:>12.0}x", "conversion / condition evaluation", convert / cond);

    let mut ctx = RenderContext::new(&application, &rt.context);
    let target = Target { trigger: "on-sync-failed", kind: DestinationKind::Slack, service: "slack", recipient: "ops", resolved: false };
    measure("render app-sync-failed for Slack (attachments JSON)", 5_000, || {
        black_box(driftwatch::pipeline::wiring::render(&rt, "app-sync-failed", &mut ctx, &target, &application).expect("renders"));
    });

    // A whole pass: 9 subscribed triggers, dedup lookups in the store; every firing
    // condition already delivered, as in the steady state of a watched cluster.
    let pipeline = Pipeline::new(rt.clone());
    let inputs = driftwatch::pipeline::Inputs::default();
    let state = Store::in_memory().expect("in-memory store");
    let now = Utc::now();
    let first = pipeline.evaluate(&inputs, &application, &state.pass(), now).expect("evaluates");
    delivered(&state, &first.notifications);
    let pass = measure("Pipeline::evaluate, 9 triggers, steady state (no sends)", 2_000, || {
        black_box(pipeline.evaluate(&inputs, &application, &state.pass(), now).expect("evaluates"));
    });
    println!("{:<58} {:>12.0} apps/s on one core", "=> full evaluation passes", 1e9 / pass);

    // What the daemon's pass does per changed Application (pipeline::pass::run without
    // notifications to submit): evaluate, then write what was decided (re-arms here) in
    // one transaction, on a file-backed store (durable writes).
    let dir = std::env::temp_dir().join(format!("driftwatch-bench-{}", std::process::id()));
    let file_state = Store::open(&dir.join("state.redb")).expect("file store");
    measure("evaluate + apply re-arms, file-backed store, steady state", 500, || {
        let eval = pipeline.evaluate(&inputs, &application, &file_state.pass(), now).expect("evaluates");
        write(&eval, &application, &file_state, &pipeline.runtime, now);
        black_box(eval);
    });
    let _ = std::fs::remove_dir_all(&dir);

    let fresh = Store::in_memory().expect("in-memory store");
    measure("Pipeline::evaluate, 9 triggers, first sight (renders 4)", 500, || {
        black_box(pipeline.evaluate(&inputs, &application, &fresh.pass(), now).expect("evaluates"));
    });

    // Drift intelligence.
    println!();
    let live_object = json!({"metadata": {"managedFields": [
        {"manager": "argocd-controller", "operation": "Apply", "time": "2026-03-01T10:00:00Z",
         "fieldsV1": {"f:metadata": {"f:labels": {"f:app": {}, "f:team": {}}},
                      "f:spec": {"f:replicas": {}, "f:selector": {}, "f:template": {"f:metadata": {"f:labels": {"f:app": {}}},
                      "f:spec": {"f:containers": {"k:{\"name\":\"api\"}": {".": {}, "f:image": {}, "f:name": {}, "f:ports": {"k:{\"containerPort\":8080,\"protocol\":\"TCP\"}": {".": {}, "f:containerPort": {}}}}}}}}}},
        {"manager": "kube-controller-manager", "operation": "Update", "subresource": "status", "time": "2026-03-02T03:12:05Z",
         "fieldsV1": {"f:status": {"f:replicas": {}, "f:readyReplicas": {}, "f:conditions": {}}}},
        {"manager": "kubectl-edit", "operation": "Update", "time": "2026-03-02T03:12:00Z",
         "fieldsV1": {"f:spec": {"f:template": {"f:spec": {"f:containers": {"k:{\"name\":\"api\"}": {"f:securityContext": {".": {}, "f:privileged": {}}}}}}}}}
    ]}});
    measure("attribute a Deployment's managedFields (3 managers)", 20_000, || {
        black_box(driftwatch::drift::attribution::attribute(black_box(&live_object), "workload", &[]));
    });
    let prod_path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/production/driftwatch.yaml");
    let prod = Arc::new(config::load(Some(&prod_path)).expect("production example loads"));
    let mut drifted = object.clone();
    drifted["status"]["history"] = json!([{"revision": "a1b2c3d4e5f60718293a4b5c6d7e8f9012345678"}]);
    let drifted = App::from_value(drifted).expect("fixture is an Application");
    let pipeline = Pipeline::new(prod.clone());
    let mut inputs = driftwatch::pipeline::Inputs::default();
    inputs.live_read(
        driftwatch::drift::attribution::resource_key(&driftwatch::model::ResourceRef {
            group: "apps".into(),
            kind: "Deployment".into(),
            namespace: "shop".into(),
            name: "res-7".into(),
        }),
        Some(driftwatch::drift::attribution::attribute(&live_object, "workload", &[])),
        false,
    );
    let drift = Drift::of(&drifted.object, &prod.classes, inputs.live(), "", &driftwatch::project::Scope::unrestricted());
    // Computed, then converted to what triggers see: the work the pass does per drift.
    measure("drift: classes, direction, attribution (60 resources)", 20_000, || {
        black_box(
            Drift::of(black_box(&drifted.object), &prod.classes, inputs.live(), "", &driftwatch::project::Scope::unrestricted()).view(),
        );
    });
    // The same under an AppProject's rule (what the daemon does when it reads live
    // objects): a project with two destinations and a blacklist, checked per resource.
    let project = driftwatch::project::ProjectPolicy::of(&json!({"metadata": {"name": "shop", "namespace": "argocd"}, "spec": {
        "destinations": [{"server": "https://kubernetes.default.svc", "namespace": "shop"}, {"name": "spoke-*", "namespace": "shop-*"}],
        "namespaceResourceBlacklist": [{"group": "", "kind": "ResourceQuota"}],
        "clusterResourceWhitelist": [{"group": "rbac.authorization.k8s.io", "kind": "*"}]}}));
    measure("drift under the AppProject's rule (60 resources, scope built per pass)", 20_000, || {
        let scope = driftwatch::project::Scope::of(&drifted.object, Some(&project), "argocd")
            .resolved("https://kubernetes.default.svc", "in-cluster");
        black_box(Drift::of(black_box(&drifted.object), &prod.classes, inputs.live(), "", &scope).view());
    });
    let episode = driftwatch::drift::episode::observe(None, &drifted, &drift, now).episode.expect("drifting");
    measure("route tree: match the production policy on an episode", 50_000, || {
        let input = driftwatch::route::tree::RouteInput {
            labels: &drifted.labels,
            project: &drifted.project,
            engine: "argocd",
            subject: (&episode).into(),
            break_glass: false,
        };
        black_box(prod.routes.matches(black_box(&input)));
    });
    // A SIEM record of one episode notification, in each schema (what every SIEM
    // kind does per notification before its transport).
    {
        let sight = pipeline.evaluate(&inputs, &application, &Store::in_memory().expect("store").pass(), now).expect("evaluates");
        let mut n = sight.notifications.first().cloned().expect("a notification");
        n.episode = Some(episode.view(now));
        let origin = driftwatch::deliver::ecs::Origin { cluster: "prod".into(), argocd_url: "https://argocd.example.com".into() };
        let ecs = measure("SIEM record: ECS, one episode notification", 20_000, || {
            black_box(driftwatch::deliver::siem::Schema::Ecs.records(black_box(&n), &origin, now));
        });
        let ocsf = measure("SIEM records: OCSF, the same (a Detection Finding)", 20_000, || {
            black_box(driftwatch::deliver::siem::Schema::Ocsf.records(black_box(&n), &origin, now));
        });
        println!("{:<60} {:>8.1}x", "OCSF / ECS per notification", ocsf / ecs);
    }
    // The daemon's work per changed Application under the production policy: episode
    // read, drift, routes, the drift triggers, then the episode/hold/re-arm writes, on a
    // file-backed store, in the steady state of an open episode (everything delivered).
    let dir = std::env::temp_dir().join(format!("driftwatch-bench-prod-{}", std::process::id()));
    let file_state = Store::open(&dir.join("state.redb")).expect("file store");
    let first = pipeline.evaluate(&inputs, &drifted, &file_state.pass(), now).expect("evaluates");
    write(&first, &drifted, &file_state, &prod, now);
    delivered(&file_state, &first.notifications);
    measure("production policy: evaluate only, file store, steady", 500, || {
        black_box(pipeline.evaluate(&inputs, &drifted, &file_state.pass(), now).expect("evaluates"));
    });
    let pass = measure("production policy: evaluate + apply, file store, steady", 500, || {
        let eval = pipeline.evaluate(&inputs, &drifted, &file_state.pass(), now).expect("evaluates");
        write(&eval, &drifted, &file_state, &prod, now);
        black_box(eval);
    });
    println!("{:<58} {:>12.0} apps/s on one core", "=> production policy passes", 1e9 / pass);
    let _ = std::fs::remove_dir_all(&dir);
    group_benches();
    diff_benches();
}

/// A grouped route's cost per member: a pass that joins a group of 10,000 members
/// (evaluate, render the group's message, write the join: the group's row, the
/// member's row, its waiting record), against the same pass on the route without
/// `group:` (evaluate, render, queue one entry), both on a file-backed store; and the
/// size of the group's row (its message lists 25 and counts the rest).
fn group_benches() {
    println!();
    let route = "routes:\n  - triggers: [on-out-of-sync]\n    recipients: [slack:drift]\n";
    let dir = std::env::temp_dir().join(format!("driftwatch-bench-group-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("bench dir");
    let load = |name: &str, yaml: &str| {
        let p = dir.join(name);
        std::fs::write(&p, yaml).expect("writes the bench config");
        Pipeline::new(Arc::new(config::load(Some(&p)).expect("bench config loads")))
    };
    let grouped = load("grouped.yaml", &format!("{route}    group: {{by: [revision], wait: 1h, interval: 1h}}\n"));
    let plain = load("plain.yaml", route);
    let inputs = driftwatch::pipeline::Inputs::default();
    let now = Utc::now();
    let members = |i: usize| {
        let mut o = app(i);
        o["metadata"]["annotations"] = json!({});
        App::from_value(o).expect("fixture is an Application")
    };
    let pass = |p: &Pipeline, state: &Store, a: &App| {
        let eval = p.evaluate(&inputs, a, &state.pass(), now).expect("evaluates");
        let key = a.state_key();
        let pw = driftwatch::pipeline::pass_write(&eval, &key, &p.runtime, false, now);
        let r = state.pass().write_pass(&pw, &eval.notifications, driftwatch::state::to_millis(now)).expect("writes the pass");
        black_box((eval, r));
    };
    let group_state = Store::open(&dir.join("grouped.redb")).expect("file store");
    group_state.defer_durability(true);
    for i in 0..10_000 {
        pass(&grouped, &group_state, &members(i));
    }
    group_state.defer_durability(false);
    let mut next = 10_000;
    measure("grouped route: a pass joining a group of 10,000, file store", 300, || {
        pass(&grouped, &group_state, &members(next));
        next += 1;
    });
    let g = group_state.outbox().groups().expect("reads groups").remove(0);
    let row = serde_json::to_string(&g).expect("serialises").len();
    println!("{:<58} {:>12} members, row {row} bytes, {} listed", "the group after the run", g.firing, g.listed.len());
    let plain_state = Store::open(&dir.join("plain.redb")).expect("file store");
    let mut next = 0;
    measure("the same route without group: a pass queueing one entry", 300, || {
        pass(&plain, &plain_state, &members(next));
        next += 1;
    });
    // The same two in memory: the CPU the grouping adds, without the disk.
    let (group_mem, plain_mem) = (Store::in_memory().expect("store"), Store::in_memory().expect("store"));
    group_mem.defer_durability(true);
    for i in 0..10_000 {
        pass(&grouped, &group_mem, &members(i));
    }
    let mut next = 10_000;
    measure("grouped route: the same pass, in-memory store", 1_000, || {
        pass(&grouped, &group_mem, &members(next));
        next += 1;
    });
    let mut next = 0;
    measure("the same route without group, in-memory store", 1_000, || {
        pass(&plain, &plain_mem, &members(next));
        next += 1;
    });
    let _ = std::fs::remove_dir_all(&dir);
}

/// The diff of one drifted resource, as the read's task computes it (off the
/// evaluation path): a realistic Deployment, the same with ignoreDifferences, and a
/// 1 MB ConfigMap with 10,000 changed keys. An Application with no drift reads and
/// diffs nothing: it never gets here.
fn diff_benches() {
    use driftwatch::cluster::live::{ReadSettings, Wanted, analyse};
    println!();
    let applied = json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web", "namespace": "shop", "labels": {"app": "web"}},
        "spec": {"replicas": 2, "selector": {"matchLabels": {"app": "web"}}, "template": {"metadata": {"labels": {"app": "web"}}, "spec": {
            "containers": (0..3).map(|i| json!({"name": format!("c{i}"), "image": "shop:1.0", "ports": [{"containerPort": 8080 + i}],
                "env": (0..10).map(|e| json!({"name": format!("VAR_{e}"), "value": "x"})).collect::<Vec<_>>(),
                "resources": {"limits": {"cpu": "1", "memory": "1Gi"}}})).collect::<Vec<_>>()}}}});
    let mut live = applied.clone();
    live["metadata"]["annotations"] = json!({"kubectl.kubernetes.io/last-applied-configuration": applied.to_string()});
    live["spec"]["replicas"] = json!(5);
    live["spec"]["template"]["spec"]["containers"][0]["securityContext"] = json!({"privileged": true});
    live["metadata"]["managedFields"] = json!([{"manager": "kubectl-patch", "operation": "Update", "time": "2026-12-03T10:00:00Z",
        "fieldsV1": {"f:spec": {"f:replicas": {}, "f:template": {"f:spec": {"f:containers": {"k:{\"name\":\"c0\"}": {"f:securityContext": {"f:privileged": {}}}}}}}}}]);
    let settings = ReadSettings { read_secrets: false, ignore_managers: Vec::new(), diff: Default::default(), argocd: None };
    let wanted = |kind: &str, class: &str, app: &Value| {
        let rules = driftwatch::drift::ignore::IgnoreRules::of(app);
        Wanted {
            object: driftwatch::model::ResourceRef {
                group: if kind == "Deployment" { "apps".into() } else { String::new() },
                kind: kind.into(),
                namespace: "shop".into(),
                name: "web".into(),
            },
            version: "v1".into(),
            class: class.into(),
            cluster: String::new(),
            app_namespace: "argocd".into(),
            app_name: "shop".into(),
            ignore: rules.for_resource(if kind == "Deployment" { "apps" } else { "" }, kind, "shop", "web"),
            notes: rules.notes.clone(),
        }
    };
    println!("diff input: a Deployment of {} bytes", live.to_string().len());
    let plain = wanted("Deployment", "workload", &json!({}));
    let d = analyse(&live, &settings, &plain, None, None).diff.expect("diffed");
    assert_eq!(d.changes.len(), 2, "{:?}", d.changes);
    measure("diff: one drifted Deployment (attribution + diff)", 20_000, || {
        black_box(analyse(black_box(&live), &settings, &plain, None, None));
    });
    let ignoring = wanted(
        "Deployment",
        "workload",
        &json!({"spec": {"ignoreDifferences": [{"group": "apps", "kind": "Deployment", "jsonPointers": ["/spec/replicas"],
            "jqPathExpressions": [".spec.template.spec.containers[] | select(.name | startswith(\"c1\")) | .env"]}]}}),
    );
    measure("diff: the same with ignoreDifferences (pointer + jq)", 20_000, || {
        black_box(analyse(black_box(&live), &settings, &ignoring, None, None));
    });
    let desired: serde_json::Map<String, Value> = (0..10_000).map(|i| (format!("key-{i}"), json!("a".repeat(40)))).collect();
    let data: serde_json::Map<String, Value> = (0..10_000).map(|i| (format!("key-{i}"), json!("b".repeat(40)))).collect();
    let big = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "web", "namespace": "shop",
        "annotations": {"kubectl.kubernetes.io/last-applied-configuration": json!({"data": desired}).to_string()}}, "data": data});
    println!("diff input: a ConfigMap of {} bytes, 10,000 changed keys", big.to_string().len());
    let cm = wanted("ConfigMap", "config", &json!({}));
    measure("diff: 1 MB ConfigMap, 10,000 changed fields (20 kept)", 50, || {
        black_box(analyse(black_box(&big), &settings, &cm, None, None));
    });
}

/// The writes of a pass without notifications, as `pipeline::pass::run` makes them.
fn write(
    eval: &driftwatch::pipeline::Evaluation,
    app: &App,
    state: &Store,
    rt: &driftwatch::config::Runtime,
    now: chrono::DateTime<chrono::Utc>,
) {
    let key = app.state_key();
    let pass = driftwatch::pipeline::pass_write(eval, &key, rt, false, now);
    state.pass().write_pass(&pass, &[], driftwatch::state::to_millis(now)).expect("writes the pass");
}
