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
        in_sync: None,
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

/// Credentials inside text (issue 52 item 6, review N9): the shapes a person puts in an
/// env file, a script, a connection string or a tool's configuration held in a
/// ConfigMap or a command line, each holding the secret `s` (a random base62 token for
/// the high-entropy shape is passed as `s` itself).
fn text_shapes(s: &str) -> Vec<String> {
    [
        "DB_PASS={s}",
        "export API_TOKEN=\"{s}\"",
        "set PGPASSWORD={s}",
        "$env:DB_PASSWORD = \"{s}\"",
        "curl -fsS -u deploy:{s} https://deploy.example.com/hook",
        "curl --user=deploy:{s} https://deploy.example.com/hook",
        "curl -H \"Authorization: Bearer {s}\" https://api.example.com",
        "Authorization: Basic {s}",
        "psql \"postgres://app:{s}@db:5432/shop\"",
        "MONGO_URL=mongodb+srv://admin:{s}@cluster0.example.net/db",
        "redis://:{s}@cache:6379/0",
        "git clone https://x-access-token:{s}@github.com/org/repo.git",
        "Server=db;Database=shop;User Id=sa;Password={s};",
        "DefaultEndpointsProtocol=https;AccountName=x;AccountKey={s};EndpointSuffix=core.windows.net",
        "jdbc:mysql://db:3306/shop?user=app&password={s}",
        "{\"auths\":{\"registry.example.com\":{\"auth\":\"{s}\"}}}",
        "//registry.npmjs.org/:_authToken={s}",
        "password = {s}",
        "machine api.example.com login deploy password {s}",
        "aws_secret_access_key: {s}",
        "client-key-data: {s}",
        "GITHUB_TOKEN: \"{s}\"",
        "password: |\n  {s}\n  {s}",
        "-----BEGIN OPENSSH PRIVATE KEY-----\nb3Blbn{s}\n{s}\n-----END OPENSSH PRIVATE KEY-----",
        "\"private_key\": \"-----BEGIN PRIVATE KEY-----\\nMIIE{s}\\n-----END PRIVATE KEY-----\\n\"",
        "wget --password {s} https://x.example.com",
        "app serve --client-secret={s} --verbose",
        "mysql -uroot -p{s} shop",
        "redis-cli -a {s} ping",
        "sshpass -p {s} ssh deploy@host",
        "GH=ghp_{s}{s}",
        "SLACK=xoxb-{s}",
        "JWT=eyJhbGciOiJIUzI1NiJ9.eyJ{s}.{s}",
        "STRIPE=sk_live_{s}",
        "<server><id>registry</id><password>{s}</password></server>",
        "<add key=\"ClearTextPassword\" value=\"{s}\" />",
        "curl https://b.s3.amazonaws.com/k?X-Amz-Signature={s}",
        "x {s} y",
    ]
    .iter()
    .map(|t| t.replace("{s}", s))
    .collect()
}

/// The index of the shape that holds a bare random token (checked with one).
const RANDOM_SHAPE: usize = 37;

/// Harmless lines: kept exactly as they are wherever the masker outputs them.
const HARMLESS: &[&str] = &[
    "LOG_LEVEL=debug",
    "server.port=8080",
    "set -euo pipefail",
    "echo \"starting $APP\"",
    "curl -fsS https://example.com/healthz",
    "image: registry.example.com/team/app:1.2.3",
    "digest: sha256:4b825dc642cb6eb9a060e54bf8d69288fbee4904a2b1c7d8e9f00112233445566",
    "commit=1a2b3c4d5e6f7a8b9c0d1e2f3a4b5c6d7e8f9a0b",
    "DB_HOST=db.internal",
    "DB_USER=app",
    "username = deploy",
    "replicas: 3",
    "timeout: 30s",
    "key: app.kubernetes.io/name",
    "secretName: tls-cert",
    "path=/var/lib/app/data",
    "[section]",
    "# deploy script",
    "FEATURE_FLAGS=a,b,c",
    "DB_PASS=${DB_PASS}",
    "podName=payments-api-7d9f8c6b5-x2k4q",
];

/// A harmless line: one of [`HARMLESS`], or a random `KEY=value` whose key names no
/// credential.
fn arb_harmless() -> impl Strategy<Value = String> {
    prop_oneof![
        proptest::sample::select(HARMLESS).prop_map(str::to_string),
        ("[A-Z][A-Z_]{2,11}", "[a-z0-9.\\-]{1,16}")
            .prop_filter("a key that names no credential", |(k, _)| !BUILT_IN.name(k))
            .prop_map(|(k, v)| format!("{k}={v}")),
    ]
}

/// Every place the masker writes text that a person wrote: the text itself, a
/// ConfigMap's data key in the diff (both sides), what a merge patch and a JSON patch
/// set as data, a script in `args` and an env value, and a value shown.
fn everywhere(text: &str, harmless: &str) -> Vec<String> {
    let mut out = vec![BUILT_IN.text(text).into_owned(), BUILT_IN.show(&json!(text), false, 100_000)];
    let mut git = config_map();
    git["data"]["app.env"] = json!(harmless);
    let mut live = git.clone();
    live["data"]["app.env"] = json!(text);
    for (g, l) in [(&git, &live), (&live, &git)] {
        let d = diff_of(Some(g), l.clone(), "data", "app.env", 100_000, &BUILT_IN);
        out.push(serde_json::to_string(&d).unwrap_or_default());
    }
    let (set, _) = driftwatch::drift::audit::set_fields(&json!({"data": {"app.env": text}}), &BUILT_IN);
    out.extend(set.into_iter().map(|f| f.value));
    let ops = [json!({"op": "replace", "path": "/data/app.env", "value": text})];
    let (set, _) = driftwatch::drift::audit::json_patch_fields(&ops, Some(&live), &BUILT_IN);
    out.extend(set.into_iter().map(|f| f.value));
    let container = json!({"spec": {"template": {"spec": {"containers": [{"name": "app",
        "args": ["sh", "-c", text], "env": [{"name": "SCRIPT", "value": text}]}]}}}});
    let (set, _) = driftwatch::drift::audit::set_fields(&container, &BUILT_IN);
    out.extend(set.into_iter().map(|f| f.value));
    out
}

proptest! {
    #![proptest_config(ProptestConfig { cases: CASES, failure_persistence: None, ..ProptestConfig::default() })]

    /// Credential shapes planted at random places among harmless lines: no secret
    /// survives anywhere the masker outputs, and every harmless line is shown exactly as
    /// it was (in the text and in the diff, where nothing is cut).
    #[test]
    fn credentials_inside_text_never_survive_and_harmless_lines_are_kept(
        harmless in proptest::collection::vec(arb_harmless(), 0..12),
        planted in proptest::collection::vec((0usize..RANDOM_SHAPE + 1, any::<proptest::sample::Index>(), arb_secret()), 1..5),
        random in "[A-Za-z0-9]{40}",
        crlf in any::<bool>(),
    ) {
        prop_assert_eq!(text_shapes("x").len(), RANDOM_SHAPE + 1);
        prop_assert!(text_shapes("x")[RANDOM_SHAPE] == "x x y");
        let mut lines: Vec<String> = harmless.clone();
        let mut secrets = Vec::new();
        for (shape, at, secret) in &planted {
            let s = if *shape == RANDOM_SHAPE { random.clone() } else { secret.clone() };
            let line = text_shapes(&s).swap_remove(*shape);
            lines.insert(at.index(lines.len() + 1), line);
            secrets.push(s);
        }
        let eol = if crlf { "\r\n" } else { "\n" };
        let text = lines.join(eol) + eol;
        for shown in everywhere(&text, &harmless.join(eol)) {
            for s in &secrets {
                prop_assert!(!shown.contains(s.as_str()), "{s} survived in {shown:?}\nfrom {text:?}");
            }
        }
        let masked = BUILT_IN.text(&text);
        for h in &harmless {
            prop_assert!(masked.lines().any(|l| l == h), "{h:?} changed: {masked:?}");
        }
    }
}

/// The review's two confirmed leaks and their neighbours, line by line: the changed
/// lines show with their values masked, the harmless change beside them as it is.
#[test]
fn an_env_file_and_a_script_show_their_lines_with_only_the_values_masked() {
    let env = "LOG_LEVEL=debug\nDB_HOST=db\nDB_PASS=hunter2-c0ffee\n";
    assert_eq!(BUILT_IN.text(env), "LOG_LEVEL=debug\nDB_HOST=db\nDB_PASS=(masked)\n");
    let script = "#!/bin/sh\ncurl -u deploy:hunter2-c0ffee https://ci/hook\npsql postgres://app:hunter2-c0ffee@db/shop -c 'select 1'\n";
    assert_eq!(
        BUILT_IN.text(script),
        "#!/bin/sh\ncurl -u deploy:(masked) https://ci/hook\npsql postgres://app:(masked)@db/shop -c 'select 1'\n"
    );
}

/// Review N9: under `data.` the name `key` is a file, not a reference to a Secret's
/// key, so its value is masked in the diff and in what a request set; a
/// `secretKeyRef`'s `key` (what the exemption is for) still shows which key it names.
#[test]
fn a_data_key_named_key_is_masked_and_a_secret_key_ref_still_shows() {
    let git = config_map();
    let mut live = git.clone();
    live["data"]["key"] = json!("hunter2-c0ffee");
    let d = diff_of(Some(&git), live, "data", "key", 120, &BUILT_IN);
    let shown = serde_json::to_string(&d).unwrap();
    assert!(d.changes.iter().any(|c| c.path == "data.key" && c.live == "(masked)"), "{shown}");
    assert!(!shown.contains("hunter2"), "{shown}");
    let (set, _) = driftwatch::drift::audit::set_fields(&json!({"data": {"key": "hunter2-c0ffee"}}), &BUILT_IN);
    assert_eq!(set[0].value, "(masked)", "{set:?}");
    let ops = [json!({"op": "add", "path": "/data/key", "value": "hunter2-c0ffee"})];
    let (set, _) = driftwatch::drift::audit::json_patch_fields(&ops, None, &BUILT_IN);
    assert_eq!((set[0].path.as_str(), set[0].value.as_str()), ("data.key", "(masked)"), "{set:?}");
    let reference = json!({"spec": {"template": {"spec": {"containers": [{"name": "app", "env": [
        {"name": "DB_USER", "valueFrom": {"secretKeyRef": {"name": "db", "key": "username"}}}]}]}}}});
    let (set, _) = driftwatch::drift::audit::set_fields(&reference, &BUILT_IN);
    let key = set.iter().find(|f| f.path.ends_with("secretKeyRef.key")).map(|f| f.value.as_str());
    assert_eq!(key, Some("username"), "{set:?}");
}

/// Review N9: a JSON patch the API server refused has a `Status` for its response
/// object, so env items are addressed by index with no object to name them: a value
/// under such an item is masked unless harmless by shape, the item's name shows, and
/// an item added whole is judged by its own name.
#[test]
fn a_refused_json_patch_masks_env_values_addressed_by_index() {
    let status = json!({"kind": "Status", "apiVersion": "v1", "status": "Failure", "reason": "Forbidden", "code": 403});
    let env = "/spec/template/spec/containers/0/env";
    let ops = [
        json!({"op": "replace", "path": format!("{env}/0/value"), "value": "hunter2-c0ffee"}),
        json!({"op": "replace", "path": format!("{env}/1/value"), "value": "debug"}),
        json!({"op": "replace", "path": format!("{env}/2/name"), "value": "DB_PASS"}),
        json!({"op": "add", "path": format!("{env}/-"), "value": {"name": "DB_PASS", "value": "hunter2-c0ffee"}}),
        json!({"op": "add", "path": format!("{env}/-"), "value": {"name": "MODE", "value": "fast"}}),
        json!({"op": "add", "path": format!("{env}/-"), "value": {"value": "hunter2-c0ffee"}}),
        json!({"op": "replace", "path": "/spec/template/spec/containers/0/args/1", "value": "hunter2-c0ffee"}),
        json!({"op": "replace", "path": "/spec/template/spec/containers/0/args/2", "value": "--verbose"}),
    ];
    for after in [Some(&status), None] {
        let (set, _) = driftwatch::drift::audit::json_patch_fields(&ops, after, &BUILT_IN);
        let got: Vec<(&str, &str)> = set.iter().map(|f| (f.path.as_str(), f.value.as_str())).collect();
        assert!(!format!("{set:?}").contains("hunter2"), "{got:?}");
        let c = "spec.template.spec.containers[0]";
        for want in [
            (format!("{c}.env[0].value"), "(masked)"),
            (format!("{c}.env[1].value"), "debug"),
            (format!("{c}.env[2].name"), "DB_PASS"),
            (format!("{c}.env[-].value"), "(masked)"),
            (format!("{c}.env[-].name"), "MODE"),
            (format!("{c}.env[-].value"), "fast"),
            (format!("{c}.args[2]"), "--verbose"),
        ] {
            assert!(got.contains(&(want.0.as_str(), want.1)), "{want:?} in {got:?}");
        }
    }
}
