//! Hostile input: property tests (proptest, a bounded number of cases per run) and a
//! checked-in corpus (`tests/corpus/`) for what comes from outside — Applications from
//! the cluster, audit events, subscription annotations, configuration files, durations —
//! and for
//! the encoders that put it on the wire (CEF, syslog structured data, Slack mrkdwn,
//! JSON). Nothing may panic; bad input gets a clear error; what is escaped comes back
//! unchanged when unescaped.

mod common;

use std::path::{Path, PathBuf};
use std::sync::{Arc, LazyLock};

use chrono::{TimeZone, Utc};
use driftwatch::config::{self, Runtime};
use driftwatch::model::App;
use driftwatch::pipeline::Pipeline;
use driftwatch::state::Store;
use proptest::prelude::*;
use serde_json::{Value, json};

/// Cases per property: enough to find shallow bugs in every CI run, bounded in time.
const CASES: u32 = 256;

static RUNTIME: LazyLock<Arc<Runtime>> = LazyLock::new(|| Arc::new(config::load(None).expect("the built-in catalog loads")));

/// JSON whose keys are mostly those an Application has, so the generator reaches the
/// code that reads them, with any values (wrong types included).
fn arb_json() -> impl Strategy<Value = Value> {
    const KEYS: &[&str] = &[
        "metadata",
        "status",
        "spec",
        "sync",
        "health",
        "resources",
        "operationState",
        "phase",
        "annotations",
        "labels",
        "name",
        "namespace",
        "uid",
        "revision",
        "revisions",
        "history",
        "finishedAt",
        "reconciledAt",
        "kind",
        "group",
        "version",
        "project",
        "destination",
        "deletionTimestamp",
    ];
    let key = prop_oneof![prop::sample::select(KEYS).prop_map(String::from), "[a-zA-Z.]{0,6}"];
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::from),
        any::<i64>().prop_map(Value::from),
        any::<f64>().prop_filter("finite", |f| f.is_finite()).prop_map(Value::from),
        prop_oneof![
            Just("OutOfSync".to_string()),
            Just("Synced".to_string()),
            Just("Degraded".to_string()),
            Just("Failed".to_string()),
            Just("2026-03-01T12:00:00Z".to_string()),
            Just("not a time".to_string()),
            ".{0,20}",
        ]
        .prop_map(Value::from),
    ];
    leaf.prop_recursive(6, 96, 8, move |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..6).prop_map(Value::from),
            prop::collection::btree_map(key.clone(), inner, 0..8).prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
}

/// An Application shell around arbitrary parts, so decoding gets past `kind`.
fn arb_app() -> impl Strategy<Value = Value> {
    (arb_json(), arb_json(), arb_json(), prop::collection::btree_map("[a-z./-]{1,40}", ".{0,60}", 0..4)).prop_map(
        |(metadata, spec, status, annotations)| {
            let mut v =
                json!({"apiVersion": "argoproj.io/v1alpha1", "kind": "Application", "metadata": metadata, "spec": spec, "status": status});
            if let Some(m) = v["metadata"].as_object_mut() {
                m.insert("annotations".into(), json!(annotations));
            }
            v
        },
    )
}

/// Decodes and, when it is an Application, evaluates it with every catalog trigger
/// subscribed; must not panic.
fn evaluate(v: Value) {
    let Ok(mut app) = App::from_value(v) else { return };
    let keys: Vec<String> = RUNTIME.triggers.keys().map(|t| format!("notifications.argoproj.io/subscribe.{t}.console")).collect();
    if let Some(m) = app.object.pointer_mut("/metadata/annotations").and_then(Value::as_object_mut) {
        for k in keys {
            m.entry(k).or_insert(json!(""));
        }
    }
    let state = Store::in_memory().unwrap();
    let pipeline = Pipeline::new(RUNTIME.clone());
    let now = Utc.with_ymd_and_hms(2026, 3, 1, 12, 0, 0).unwrap();
    let _ = pipeline.evaluate(&driftwatch::pipeline::Inputs::default(), &app, &state.pass(), now);
}

/// The real audit batch of `tests/data/k8s-audit` (kube-apiserver v1.36) with one more
/// event: alice's patch aimed at the Application itself (where break-glass writes are
/// read), and an index that manages what the batch touches.
static AUDIT: LazyLock<(Value, driftwatch::audit::index::ManagedIndex)> = LazyLock::new(|| {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/k8s-audit/eventlist-changes-1.json");
    let mut list: Value = serde_json::from_slice(&std::fs::read(path).expect("the audit batch")).expect("JSON");
    let items = list["items"].as_array_mut().expect("items");
    let mut on_app = items.iter().find(|e| e["user"]["username"] == "alice").cloned().expect("alice's patch");
    on_app["objectRef"] = json!({"resource": "applications", "apiGroup": "argoproj.io", "namespace": "argocd", "name": "payments-api"});
    items.push(on_app);
    let mut index = driftwatch::audit::index::ManagedIndex::default();
    index.update(
        &App::from_value(json!({"apiVersion": "argoproj.io/v1alpha1", "kind": "Application",
            "metadata": {"name": "payments-api", "namespace": "argocd", "uid": "u1"},
            "spec": {"project": "default", "destination": {"namespace": "payments"}},
            "status": {"resources": [{"group": "apps", "kind": "Deployment", "namespace": "payments", "name": "api"}]}}))
        .expect("an Application"),
        &driftwatch::project::Scope::unrestricted(),
    );
    (list, index)
});

/// Parses an audit `EventList` as the webhook does and each of its events as a log line;
/// must not panic. The people whose attempts the batch holds.
fn consider_audit(list: &Value) -> Result<Vec<String>, String> {
    let ids = config::ArgoIdentities { controllers: vec![config::ARGOCD_CONTROLLER_IDENTITY.to_string()], ..Default::default() };
    let f = driftwatch::audit::event::Filter {
        argocd_identities: &ids,
        index: &AUDIT.1,
        now: Utc::now(),
        mask: &driftwatch::drift::mask::Masker::default(),
        times: None,
        cluster: "",
    };
    let body = serde_json::to_vec(list).map_err(|e| e.to_string())?;
    let batch = driftwatch::audit::event::parse_list(&body, &f).map_err(|e| e.to_string());
    for e in list["items"].as_array().into_iter().flatten() {
        let mut out = driftwatch::audit::event::Batch::default();
        let _ = driftwatch::audit::event::parse_line(&serde_json::to_vec(e).map_err(|e| e.to_string())?, &f, &mut out);
    }
    batch.map(|b| b.attempts.iter().map(|a| a.actor.username.clone()).collect())
}

proptest! {
    // Failures found before are replayed first from the regressions file (cargo runs
    // tests from the package root); proptest cannot find it by itself in tests/.
    #![proptest_config(ProptestConfig {
        cases: CASES,
        failure_persistence: Some(Box::new(proptest::test_runner::FileFailurePersistence::Direct("tests/hostile.proptest-regressions"))),
        ..ProptestConfig::default()
    })]

    #[test]
    fn any_application_decodes_or_is_refused_and_evaluates_without_panic(v in arb_app()) {
        evaluate(v);
    }

    #[test]
    fn any_json_is_refused_or_decoded_without_panic(v in arb_json()) {
        let _ = App::from_value(v.clone());
        evaluate(v);
    }

    /// The `subscriptions` annotation is YAML written by hand: anything goes in.
    #[test]
    fn any_subscription_annotation_is_parsed_or_reported(value in ".{0,200}", key in "[a-z.-]{0,30}") {
        let app = common::AppBuilder::new("a")
            .sync("OutOfSync", common::REV1)
            .annotate("notifications.argoproj.io/subscriptions", &value)
            .annotate(&format!("notifications.argoproj.io/subscribe.{key}"), &value)
            .build();
        evaluate(app);
    }

    /// `driftwatch import` reads conditions and templates written by hand: any text is
    /// translated or refused with a reason, and what is translated compiles.
    #[test]
    fn any_expr_condition_is_translated_or_refused(
        tokens in prop::collection::vec(prop::sample::select(vec![
            "app", ".", "status", "sync", "?.", "==", "!=", "'x'", "\"y\"", "nil", "and", "or", "not", "!", "(", ")", "[", "]",
            "in", "1", "2.5", ",", "len", "matches", "#", "{", "}", "any", "all", "time.Now()", "time.Parse", "-", "*",
            "time.Minute", "?", ":", "??", "contains", "startsWith", ".Add", ".Before", "|", "upper", "'", "..", "type",
        ]), 0..24),
        glue in prop::collection::vec(prop::bool::ANY, 24),
    ) {
        let s: String = tokens.iter().zip(glue.iter()).map(|(t, g)| if *g { format!("{t} ") } else { t.to_string() }).collect();
        if let Ok(rhai) = driftwatch::import::expr::to_rhai(&s) {
            prop_assert!(driftwatch::trigger::compiles(&rhai).is_ok(), "{} -> {}", s, rhai);
        }
    }

    #[test]
    fn any_go_template_is_translated_or_refused(
        tokens in prop::collection::vec(prop::sample::select(vec![
            "{{", "{{- ", "}}", " -}}", ".app", ".x", ".", "$", "$v", ":=", "=", "if ", "range ", "with ", "end", "else", "else if ",
            "$i, $v := ", "eq", "\"s\"", "1", "(", ")", "|", "trunc 7", "printf \"%s\"", "call .repo.GetCommitMetadata", "text ",
            "\\", "\n", "index", "not", "and", "default \"d\"", "/* c */", "template", "toJson", "$.app",
        ]), 0..30),
    ) {
        let s: String = tokens.concat();
        if let Ok(t) = driftwatch::import::gotmpl::to_handlebars(&s) {
            prop_assert!(driftwatch::template::compiles(&t.text).is_ok(), "{} -> {}", s, t.text);
        }
        if let Ok(t) = driftwatch::import::gotmpl::to_handlebars_in_json(&s) {
            prop_assert!(driftwatch::template::compiles(&t.text).is_ok(), "{} -> {}", s, t.text);
        }
    }

    /// Request and response bodies and annotations are whatever the client sent: any
    /// JSON there is read or skipped, never a panic, and never costs the batch.
    #[test]
    fn any_audit_body_is_read_or_skipped_without_panic(
        target in 0usize..11,
        request in arb_json(),
        response in arb_json(),
        break_glass in ".{0,80}",
        annotation in ".{0,40}",
    ) {
        let mut list = AUDIT.0.clone();
        let n = list["items"].as_array().map_or(0, Vec::len);
        let e = &mut list["items"][target % n];
        e["requestObject"] = request;
        e["responseObject"] = response;
        e["annotations"] = json!({"authorization.k8s.io/reason": annotation});
        let mut with_break_glass = list.clone();
        with_break_glass["items"][target % n]["requestObject"] =
            json!({"metadata": {"annotations": {"driftwatch.io/break-glass": break_glass}}});
        prop_assert!(consider_audit(&list).is_ok());
        prop_assert!(consider_audit(&with_break_glass).is_ok());
    }

    /// Any field of any event replaced by anything: that event is read or dropped, never
    /// a panic, and the batch's other events are still read (alice's and mallory's
    /// attempts survive a change to any other event).
    #[test]
    fn any_audit_event_is_read_or_dropped_alone(target in 0usize..11, path in prop::sample::select(vec![
        "/verb", "/stage", "/user", "/user/username", "/user/groups", "/impersonatedUser", "/objectRef", "/objectRef/name",
        "/objectRef/namespace", "/objectRef/apiGroup", "/objectRef/subresource", "/responseStatus", "/responseStatus/code",
        "/requestReceivedTimestamp", "/sourceIPs", "/userAgent", "/annotations", "/auditID",
    ]), value in arb_json()) {
        let mut list = AUDIT.0.clone();
        let n = list["items"].as_array().map_or(0, Vec::len);
        let e = &mut list["items"][target % n];
        if let Some(slot) = e.pointer_mut(path) {
            *slot = value;
        } else if let Some((parent, key)) = path.rsplit_once('/')
            && let Some(obj) = e.pointer_mut(parent).and_then(Value::as_object_mut)
        {
            obj.insert(key.to_string(), value);
        }
        let who = consider_audit(&list);
        prop_assert!(who.is_ok(), "{:?}", who);
        let who = who.unwrap_or_default();
        let user = |i: usize| AUDIT.0["items"][i]["user"]["username"].as_str().unwrap_or_default().to_string();
        for i in (0..n).filter(|i| *i != target % n && ["alice", "mallory"].contains(&user(*i).as_str())) {
            prop_assert!(who.contains(&user(i)), "{} lost by a change to event {}: {:?}", user(i), target % n, who);
        }
    }

    #[test]
    fn any_duration_text_parses_or_is_refused(s in ".{0,24}") {
        let _ = driftwatch::duration::parse(&s);
        let _ = driftwatch::duration::parse_window(("since", Some(&s)), ("until", Some(&s)), Utc::now());
    }

    #[test]
    fn durations_add_up(d in 0i64..1000, h in 0i64..1000, m in 0i64..1000, sec in 0i64..1000, ms in 0i64..1000) {
        let text = format!("{d}d{h}h{m}m{sec}s{ms}ms");
        let parsed = driftwatch::duration::parse(&text).unwrap();
        let want = ((((d * 24 + h) * 60 + m) * 60 + sec) * 1000) + ms;
        prop_assert_eq!(parsed.num_milliseconds(), want);
    }

    /// A configuration file of any text: loaded or refused with errors that name the file.
    #[test]
    fn any_configuration_text_loads_or_is_refused_with_its_file(text in ".{0,300}") {
        check_config_text(&text);
    }

    /// The reference configuration with lines dropped, repeated or cut: still no panic,
    /// and errors name the file and a line.
    #[test]
    fn mangled_reference_configurations_are_refused_with_positions(
        ops in prop::collection::vec((0usize..200, 0u8..3, 0usize..80), 1..6)
    ) {
        let mut lines: Vec<String> = REFERENCE.lines().map(String::from).collect();
        for (at, op, cut) in ops {
            let i = at % lines.len().max(1);
            match op {
                0 => { lines.remove(i); }
                1 => { let l = lines[i].clone(); lines.insert(i, l); }
                _ => { let l: String = lines[i].chars().take(cut).collect(); lines[i] = l; }
            }
            if lines.is_empty() { lines.push(String::new()); }
        }
        check_config_text(&lines.join("\n"));
    }

    /// CEF: whatever the names and the message, the header has its seven separators and
    /// every extension value reads back as it was.
    #[test]
    fn cef_escapes_separators_and_reads_back(trigger in ".{0,30}", message in ".{0,80}", app in ".{0,30}") {
        let n = notification(&trigger, &message, &app);
        let record = driftwatch::deliver::ecs::record(&n, &Default::default(), Utc::now());
        let line = driftwatch::deliver::kinds::syslog::cef(&n, &record);
        prop_assert!(!line.contains('\n') && !line.contains('\r'), "{}", line);
        let fields = split_unescaped(&line, '|');
        prop_assert_eq!(fields.len(), 8, "{}", line);
        let ext = parse_cef_extension(&fields[7]);
        prop_assert_eq!(ext.get("msg").map(String::as_str), Some(message.as_str()));
        prop_assert_eq!(ext.get("act").map(String::as_str), Some(trigger.as_str()));
        prop_assert_eq!(ext.get("cs1").map(String::as_str), Some(app.as_str()));
    }

    /// RFC 5424: the structured data element reads back whatever the names, and the
    /// header fields are single tokens (no space, no control character).
    #[test]
    fn syslog_structured_data_reads_back(trigger in ".{0,30}", app in ".{0,30}", message in ".{0,40}") {
        let n = notification(&trigger, &message, &app);
        let h = driftwatch::deliver::kinds::syslog::Header { facility: 10, hostname: "h o\nst".into(), app_name: "driftwatch".into(), procid: "1".into() };
        let line = driftwatch::deliver::kinds::syslog::rfc5424(&h, &n, &message, Utc::now());
        let head: Vec<&str> = line.splitn(7, ' ').collect();
        prop_assert_eq!(head.len(), 7);
        prop_assert!(head[..6].iter().all(|t| !t.is_empty() && t.chars().all(|c| c.is_ascii_graphic())), "{}", line);
        let sd = &line[line.find('[').unwrap()..];
        prop_assert_eq!(sd_param(sd, "app"), Some(app.clone()));
        prop_assert_eq!(sd_param(sd, "trigger"), Some(trigger.clone()));
    }

    /// The ECS record is JSON that carries the strings unchanged.
    #[test]
    fn ecs_records_carry_any_string(trigger in ".{0,30}", message in ".{0,80}", app in ".{0,30}") {
        let n = notification(&trigger, &message, &app);
        let record = driftwatch::deliver::ecs::record(&n, &Default::default(), Utc::now());
        let text = serde_json::to_string(&record).unwrap();
        let back: Value = serde_json::from_str(&text).unwrap();
        prop_assert_eq!(back, record);
    }

    /// Slack mrkdwn: `&`, `<` and `>` never reach Slack raw, and unescape gives the text back.
    #[test]
    fn slack_escaping_reads_back(s in ".{0,80}") {
        let e = driftwatch::template::helpers::slack_escape(&s);
        prop_assert!(!e.contains('<') && !e.contains('>'));
        prop_assert_eq!(e.replace("&lt;", "<").replace("&gt;", ">").replace("&amp;", "&"), s);
    }

    /// `json_escape` makes any text a valid JSON string body.
    #[test]
    fn json_escaping_reads_back(s in ".{0,80}") {
        let e = driftwatch::template::helpers::json_escape(&s);
        let back: String = serde_json::from_str(&format!("\"{e}\"")).unwrap();
        prop_assert_eq!(back, s);
    }
}

const REFERENCE: &str = include_str!("../deploy/driftwatch.yaml");

/// Loads `text` as a configuration file; errors must name it (and, for YAML, a line).
fn check_config_text(text: &str) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("driftwatch.yaml");
    std::fs::write(&path, text).unwrap();
    if let Err(errors) = config::load(Some(&path)) {
        assert!(!errors.is_empty());
        for e in errors {
            let shown = e.to_string();
            assert!(!shown.is_empty());
            if let Some(pos) = &e.pos {
                assert!(pos.line >= 1, "{shown}");
            }
        }
    }
}

fn notification(trigger: &str, message: &str, app: &str) -> driftwatch::model::Notification {
    use driftwatch::model::*;
    Notification {
        received_ms: None,
        app: app.into(),
        meta: AppMeta { name: app.into(), namespace: "ns".into(), uid: "u".into(), project: "p".into(), ..Default::default() },
        trigger: trigger.into(),
        condition: 0,
        condition_key: "[0].x".into(),
        template: "t".into(),
        destination: Destination::new("siem", ""),
        kind: DestinationKind::Syslog,
        action: Action::Fire,
        severity: Severity::Warning,
        payload: json!({"message": message}),
        record: None,
        episode: None,
        operation: None,
        idempotency_key: None,
        group: None,
    }
}

/// The value of `name="..."` in an RFC 5424 SD-ELEMENT, unescaped (`\"`, `\\`, `\]`).
fn sd_param(sd: &str, name: &str) -> Option<String> {
    let start = sd.find(&format!(" {name}=\""))? + name.len() + 3;
    let mut out = String::new();
    let mut chars = sd[start..].chars();
    while let Some(c) = chars.next() {
        match c {
            '\\' => out.push(chars.next()?),
            '"' => return Some(out),
            c => out.push(c),
        }
    }
    None
}

/// Splits at `sep` where it is not escaped with a backslash.
fn split_unescaped(s: &str, sep: char) -> Vec<String> {
    let mut out = vec![String::new()];
    let mut chars = s.chars();
    while let Some(c) = chars.next() {
        match c {
            '\\' => {
                out.last_mut().unwrap().push(c);
                if let Some(n) = chars.next() {
                    out.last_mut().unwrap().push(n);
                }
            }
            c if c == sep && out.len() < 8 => out.push(String::new()),
            c => out.last_mut().unwrap().push(c),
        }
    }
    out
}

/// CEF extension `key=value key2=value2` with values unescaped (`\\`, `\=`, `\n`, `\r`).
fn parse_cef_extension(ext: &str) -> std::collections::BTreeMap<String, String> {
    // A key starts after a space (or at the start) and ends at an unescaped `=`.
    let chars: Vec<char> = ext.chars().collect();
    let mut starts = Vec::new();
    let mut i = 0;
    while i < chars.len() {
        if chars[i] == '\\' {
            i += 2;
            continue;
        }
        if chars[i] == '=' {
            let mut k = i;
            while k > 0 && (chars[k - 1].is_ascii_alphanumeric() || chars[k - 1] == '.') {
                k -= 1;
            }
            if k < i && (k == 0 || chars[k - 1] == ' ') {
                starts.push((k, i));
            }
        }
        i += 1;
    }
    let mut out = std::collections::BTreeMap::new();
    for (n, (k, eq)) in starts.iter().enumerate() {
        let end = starts.get(n + 1).map_or(chars.len(), |(next, _)| next - 1);
        let key: String = chars[*k..*eq].iter().collect();
        let raw: String = chars[eq + 1..end.max(eq + 1)].iter().collect();
        let mut value = String::new();
        let mut it = raw.chars();
        while let Some(c) = it.next() {
            if c == '\\' {
                match it.next() {
                    Some('n') => value.push('\n'),
                    Some('r') => value.push('\r'),
                    Some(o) => value.push(o),
                    None => {}
                }
            } else {
                value.push(c);
            }
        }
        out.insert(key, value);
    }
    out
}

/// Every file of the checked-in corpus: configurations are refused or loaded without a
/// panic, with their file named; Applications are decoded or refused, then evaluated.
#[test]
fn the_hostile_corpus_is_refused_cleanly() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/corpus");
    let files = |sub: &str| -> Vec<PathBuf> {
        let mut v: Vec<PathBuf> = std::fs::read_dir(root.join(sub)).unwrap().map(|e| e.unwrap().path()).collect();
        v.sort();
        v
    };
    let configs = files("config");
    assert!(configs.len() >= 5, "{configs:?}");
    for f in configs {
        let text = std::fs::read_to_string(&f).unwrap();
        let started = std::time::Instant::now();
        let result = config::load(Some(&f));
        let first_line = text.lines().next().unwrap_or_default();
        // The first line of each corpus file says what it must do: `# refused: <text>`
        // (an error mentioning the text) or `# loads`.
        match (first_line.strip_prefix("# refused: "), result) {
            (Some(want), Err(errors)) => {
                let all: Vec<String> = errors.iter().map(ToString::to_string).collect();
                assert!(all.iter().any(|e| e.contains(want)), "{}: {all:?}", f.display());
                let name = f.file_name().unwrap().to_string_lossy().to_string();
                assert!(all.iter().any(|e| e.contains(&name)), "{}: the file is named: {all:?}", f.display());
            }
            (Some(_), Ok(_)) => panic!("{}: loaded, expected refused", f.display()),
            (None, Err(errors)) => panic!("{}: refused: {errors:?}", f.display()),
            (None, Ok(_)) => {}
        }
        assert!(started.elapsed() < std::time::Duration::from_secs(20), "{}: too slow", f.display());
    }
    // Too big to check in: a 2 MB operation message, 20,000 drifted resources.
    let mut big = common::AppBuilder::new("big")
        .sync("OutOfSync", common::REV1)
        .field("/status/operationState", json!({"phase": "Failed", "message": "x".repeat(2 << 20)}))
        .build();
    evaluate(big.clone());
    let resources: Vec<Value> = (0..20_000)
        .map(|i| json!({"group": "apps", "version": "v1", "kind": "Deployment", "namespace": "n", "name": format!("d{i}"), "status": "OutOfSync"}))
        .collect();
    big["status"]["resources"] = json!(resources);
    evaluate(big);
    for f in files("application") {
        let text = std::fs::read_to_string(&f).unwrap();
        match serde_json::from_str::<Value>(&text) {
            Ok(v) => evaluate(v),
            Err(_) => {
                let docs: Result<Vec<Value>, _> = serde_saphyr::from_multiple(&text);
                if let Ok(docs) = docs {
                    docs.into_iter().for_each(evaluate);
                }
            }
        }
    }
}

/// The audit properties reach the code they mean to: the fixture yields attempts, and a
/// break-glass annotation written on the Application is read as a break-glass write.
#[test]
fn the_audit_fixture_reaches_attempts_and_break_glass_writes() {
    let ids = config::ArgoIdentities { controllers: vec![config::ARGOCD_CONTROLLER_IDENTITY.to_string()], ..Default::default() };
    let f = driftwatch::audit::event::Filter {
        argocd_identities: &ids,
        index: &AUDIT.1,
        now: Utc::now(),
        mask: &driftwatch::drift::mask::Masker::default(),
        times: None,
        cluster: "",
    };
    let mut list = AUDIT.0.clone();
    let last = list["items"].as_array().map_or(0, Vec::len) - 1;
    list["items"][last]["requestObject"] = json!({"metadata": {"annotations": {"driftwatch.io/break-glass": "{}"}}});
    list["items"][last].as_object_mut().unwrap().remove("responseObject");
    let batch = driftwatch::audit::event::parse_list(&serde_json::to_vec(&list).unwrap(), &f).unwrap();
    let who: Vec<&str> = batch.attempts.iter().map(|a| a.actor.username.as_str()).collect();
    assert!(who.contains(&"alice") && who.contains(&"mallory"), "{who:?}");
    assert_eq!(batch.break_glass.len(), 1, "the write on the Application");
}
