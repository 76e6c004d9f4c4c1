//! Credentials never leave (review H4, H5): a property test plants credential-shaped
//! values anywhere in a Deployment or a ConfigMap — env (an item only live has, `env: []`
//! or `null` in Git, names like `MYSQL_PWD`), args, command, annotations, ConfigMap data
//! (properties, YAML, JSON text, `tls.key`), nested lists — on the Git side, the live
//! side or both, and proves that none reaches the value diff (which chat, pages, SIEM
//! records, `/history`, `/ui` and the CLI print) nor what an audited request set, merge
//! patch or JSON patch; while the change itself is still listed.

use driftwatch::drift::diff::{self, DesiredSource, Input, LAST_APPLIED, Limits};
use driftwatch::drift::ignore::ForResource;
use driftwatch::drift::mask::{BUILT_IN, Masker};
use proptest::prelude::*;
use serde_json::{Value, json};

/// Cases per property (as tests/hostile.rs).
const CASES: u32 = 256;

/// Credential-shaped ways to hold the secret `s`, with whether the value is a list.
fn shapes(s: &str) -> Vec<(&'static str, Value)> {
    vec![
        ("env", json!({"name": "DB_PASSWORD", "value": s})),
        ("env", json!({"name": "MYSQL_PWD", "value": s})),
        ("env", json!({"name": "SENTRY_DSN", "value": format!("https://{s}@sentry.example/1")})),
        ("env", json!({"name": "DATABASE_URL", "value": format!("postgres://app:{s}@db:5432/shop")})),
        ("env", json!({"name": "KEY", "value": s})),
        ("env", json!({"name": "APP_OPTS", "value": format!("--token={s}")})),
        ("args", json!([format!("--api-key={s}")])),
        ("args", json!(["--db-password", s])),
        ("args", json!(["serve", format!("--client-secret={s}"), "--verbose"])),
        ("command", json!(["sh", "-c", format!("exec app --password {s}")])),
        ("annotation", json!(format!("Bearer {s}"))),
        ("annotation", json!(format!("eyJhbGciOiJIUzI1NiJ9.eyJ{s}.{s}"))),
        ("data", json!(format!("a=b\nspring.datasource.password={s}\n"))),
        ("data", json!(format!("db:\n  host: x\n  password: {s}\n"))),
        ("data", json!(format!("{{\"user\": \"a\", \"apiKey\": \"{s}\"}}"))),
        ("data", json!(format!("-----BEGIN RSA PRIVATE KEY-----\n{s}\n-----END RSA PRIVATE KEY-----\n"))),
        ("data", json!(format!("AKIA{}", s.to_ascii_uppercase().chars().filter(char::is_ascii_alphanumeric).take(16).collect::<String>()))),
        ("nested", json!([[{"name": "x", "secret": s}]])),
        ("nested", json!({"deep": [{"auth": {"password": s}}]})),
    ]
}

/// Where a shape goes into a Deployment (`env`, `args`, `command`, `annotation`,
/// `nested`) or a ConfigMap (`data`, `annotation`).
fn plant(obj: &mut Value, kind: &str, v: &Value, data_key: &str) {
    match kind {
        "env" => obj["spec"]["template"]["spec"]["containers"][0]["env"].as_array_mut().map(|e| e.push(v.clone())).unwrap_or_else(|| {
            obj["spec"]["template"]["spec"]["containers"][0]["env"] = json!([v]);
        }),
        "args" | "command" => obj["spec"]["template"]["spec"]["containers"][0][kind] = v.clone(),
        "annotation" => obj["metadata"]["annotations"]["example.com/note"] = v.clone(),
        "nested" => obj["spec"]["template"]["spec"]["containers"][0]["extra"] = v.clone(),
        _ => obj["data"][data_key] = v.clone(),
    }
}

fn deployment(env: Value) -> Value {
    json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web", "namespace": "shop", "annotations": {}},
        "spec": {"replicas": 2, "template": {"spec": {"containers": [{"name": "app", "image": "shop:1.0", "env": env}]}}}})
}

fn config_map() -> Value {
    json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "cfg", "namespace": "shop", "annotations": {}}, "data": {"mode": "a"}})
}

/// What a person's write of a `kind` shape owns in `managedFields`.
fn owned(kind: &str, data_key: &str) -> Value {
    let container = |f: &str| json!({"f:spec": {"f:template": {"f:spec": {"f:containers": {"k:{\"name\":\"app\"}": {f: {}}}}}}});
    match kind {
        "env" | "args" | "command" => container(&format!("f:{kind}")),
        "nested" => container("f:extra"),
        "annotation" => json!({"f:metadata": {"f:annotations": {"f:example.com/note": {}}}}),
        _ => json!({"f:data": {format!("f:{data_key}"): {}}}),
    }
}

/// Computes the diff of `live` against `git` (through the last-applied annotation), or
/// with Git not known; a person owns what was planted (`kind`) in `managedFields`.
fn diff_of(git: Option<&Value>, mut live: Value, kind: &str, data_key: &str, max_value_chars: usize, mask: &Masker) -> diff::ResourceDiff {
    live["metadata"]["managedFields"] =
        json!([{"manager": "kubectl-edit", "operation": "Update", "time": "2026-12-06T03:00:00Z", "fieldsV1": owned(kind, data_key)}]);
    compute(git, live, max_value_chars, mask)
}

/// The diff of `live` (with its `managedFields`) against `git`, as the read computes it.
fn compute(git: Option<&Value>, mut live: Value, max_value_chars: usize, mask: &Masker) -> diff::ResourceDiff {
    if let Some(g) = git {
        live["metadata"]["annotations"][LAST_APPLIED] = g.to_string().into();
    }
    let desired = git.map(|g| (g.clone(), DesiredSource::LastApplied));
    let none = ForResource::default();
    diff::compute(Input {
        live: &live,
        desired,
        kind_class: "workload",
        secret: false,
        ignore: &none,
        ignore_managers: &[],
        limits: Limits { max_fields: 50, max_value_chars },
        mask,
        notes: Vec::new(),
    })
}

/// A marker no shape or field name contains by chance.
fn arb_secret() -> impl Strategy<Value = String> {
    "[a-z0-9]{14}".prop_map(|s| format!("Qz{s}"))
}

proptest! {
    #![proptest_config(ProptestConfig { cases: CASES, failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn no_planted_credential_reaches_the_diff_or_the_audit_input(
        secret in arb_secret(),
        shape in 0usize..19,
        side in 0u8..4,
        git_env in prop_oneof![Just(json!([])), Just(Value::Null), Just(json!([{"name": "MODE", "value": "a"}]))],
        data_key in prop_oneof![Just("application.properties"), Just("tls.key"), Just("config.json"), Just("application.yml")],
        max_value_chars in prop_oneof![Just(8usize), Just(40), Just(120), Just(10_000)],
        known in any::<bool>(),
    ) {
        let (kind, value) = shapes(&secret).swap_remove(shape);
        let base = if kind == "data" { config_map() } else { deployment(git_env) };
        let (mut git, mut live) = (base.clone(), base.clone());
        let other = shapes("Wx0000000000000000")[shape].1.clone();
        match side {
            0 => plant(&mut live, kind, &value, data_key),
            1 => plant(&mut git, kind, &value, data_key),
            2 => { plant(&mut git, kind, &other, data_key); plant(&mut live, kind, &value, data_key) }
            _ => { plant(&mut git, kind, &value, data_key); plant(&mut live, kind, &other, data_key) }
        }
        for mask in [&BUILT_IN, &Masker::with_patterns(&["never-matches-[0-9]{40}".into()]).unwrap()] {
            let d = diff_of(known.then_some(&git), live.clone(), kind, data_key, max_value_chars, mask);
            let shown = serde_json::to_string(&d).unwrap();
            prop_assert!(!shown.contains(&secret), "{shown}");
            // The change itself is still listed (Git not known lists the person's fields).
            if side != 1 || known {
                prop_assert!(!d.changes.is_empty() || d.more > 0, "nothing listed: {shown}");
            }
        }
        // What an audited request set: the object as a merge patch, and the shape as a
        // JSON patch's value.
        let (set, _) = driftwatch::drift::audit::set_fields(&live, &BUILT_IN);
        let set_text = format!("{set:?}");
        prop_assert!(!set_text.contains(&secret), "{set_text}");
        let path = match kind {
            "env" => "/spec/template/spec/containers/0/env/-".to_string(),
            "args" | "command" => format!("/spec/template/spec/containers/0/{kind}"),
            "annotation" => "/metadata/annotations/example.com~1note".into(),
            "nested" => "/spec/template/spec/containers/0/extra".into(),
            _ => format!("/data/{data_key}"),
        };
        let ops = [json!({"op": "add", "path": path, "value": value})];
        let (set, _) = driftwatch::drift::audit::json_patch_fields(&ops, Some(&live), &BUILT_IN);
        let set_text = format!("{set:?}");
        prop_assert!(!set_text.contains(&secret), "{set_text}");
    }
}

/// The review's reproduction: `kubectl set env DB_PASSWORD=…` and a `--db-password=…`
/// argument on a Deployment whose Git has `env: [MODE]`; the change shows, the value
/// never does.
#[test]
fn the_reviews_env_and_args_reproduction_shows_the_change_not_the_value() {
    let git = deployment(json!([{"name": "MODE", "value": "a"}]));
    let mut live = git.clone();
    plant(&mut live, "env", &json!({"name": "DB_PASSWORD", "value": "hunter2"}), "");
    plant(&mut live, "args", &json!(["--db-password=hunter2"]), "");
    live["metadata"]["managedFields"] = json!([
        {"manager": "kubectl-set", "operation": "Update", "time": "2026-12-06T03:00:00Z", "fieldsV1": owned("env", "")},
        {"manager": "kubectl-patch", "operation": "Update", "time": "2026-12-06T03:01:00Z", "fieldsV1": owned("args", "")}]);
    let d = compute(Some(&git), live, 120, &BUILT_IN);
    let shown: Vec<(&str, &str)> = d.changes.iter().map(|c| (c.path.as_str(), c.live.as_str())).collect();
    assert!(shown.contains(&("spec.template.spec.containers[app].env[DB_PASSWORD]", "(masked: an object with name, value)")), "{shown:?}");
    assert!(shown.contains(&("spec.template.spec.containers[app].args", "(masked: a list of 1)")), "{shown:?}");
    assert!(!serde_json::to_string(&d).unwrap().contains("hunter2"));
}
