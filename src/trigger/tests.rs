//! Compiling and evaluating triggers with Argo CD's semantics.

use super::*;
use chrono::TimeZone;
use serde_json::json;

fn compile(engine: &TriggerEngine, yaml: &str) -> Result<Trigger, Vec<ConfigError>> {
    let file = SourceFile::new("t.yaml", yaml.to_string());
    let def: TriggerDef = file.parse("trigger t").map_err(|e| vec![e])?;
    engine.compile("t", &def, &file)
}

fn run(engine: &TriggerEngine, yaml: &str, app: serde_json::Value) -> Vec<ConditionResult> {
    let t = compile(engine, yaml).unwrap_or_else(|e| panic!("{e:?}"));
    let mut scope = engine.prepare(&app);
    let now = chrono::Utc.with_ymd_and_hms(2026, 3, 1, 12, 0, 0).unwrap();
    crate::clock::with_now(now, || engine.run(&t, &mut scope))
}

fn one(yaml_when: &str, app: serde_json::Value) -> ConditionResult {
    let engine = TriggerEngine::new();
    let yaml = format!("- when: {}\n  send: [x]\n", serde_json::to_string(yaml_when).unwrap());
    run(&engine, &yaml, app).remove(0)
}

#[test]
fn sync_is_usable_as_a_field_name_as_argo_cd_users_write_it() {
    let app = json!({"status": {"sync": {"status": "OutOfSync"}}});
    let r = one("app.status.sync.status == \"OutOfSync\"", app.clone());
    assert!(r.result, "{r:?}");
    assert!(one("app.status?.sync?.status == \"OutOfSync\"", app.clone()).result);
    assert!(one("app[\"status\"][\"sync\"].status == \"OutOfSync\"", app).result);
}

#[test]
fn nil_and_unit_both_mean_missing() {
    let app = json!({"status": {}});
    assert!(one("app.status.operationState == ()", app.clone()).result);
    assert!(one("app.status.operationState == nil", app.clone()).result);
    assert!(!one("app.status != nil", json!({})).result);
    assert!(one("app.status != nil", app).result);
}

#[test]
fn only_boolean_true_counts() {
    let app = json!({"metadata": {"name": "a"}});
    for (when, want) in [("app.metadata.name", false), ("1", false), ("\"true\"", false), ("true", true), ("()", false)] {
        let r = one(when, app.clone());
        assert_eq!(r.result, want, "{when}");
        assert!(r.error.is_none(), "{when}: {:?}", r.error);
    }
}

#[test]
fn runtime_errors_are_false_and_reported_once() {
    let engine = TriggerEngine::new();
    let yaml = "- when: app.status.operationState.phase == \"Failed\"\n  send: [x]\n";
    for _ in 0..3 {
        let r = run(&engine, yaml, json!({"status": {}})).remove(0);
        assert!(!r.result);
        assert!(r.error.as_deref().unwrap_or_default().contains("phase"), "{r:?}");
    }
    assert_eq!(engine.runtime_errors.load(Ordering::Relaxed), 3);
    assert_eq!(engine.distinct_errors_reported(), 1);
}

#[test]
fn once_per_is_only_evaluated_when_the_condition_holds() {
    let engine = TriggerEngine::new();
    let yaml = "- when: app.fire\n  oncePer: app.missing.deeper\n  send: [x]\n";
    let r = run(&engine, yaml, json!({"fire": false})).remove(0);
    assert_eq!((r.result, r.once_per.clone(), r.error.clone()), (false, None, None));
    assert_eq!(engine.runtime_errors.load(Ordering::Relaxed), 0);
    let yaml = "- when: app.fire\n  oncePer: app.rev\n  send: [x]\n";
    assert_eq!(run(&engine, yaml, json!({"fire": true, "rev": "abc"}))[0].once_per.as_deref(), Some("abc"));
    assert_eq!(run(&engine, yaml, json!({"fire": true}))[0].once_per.as_deref(), Some("<nil>"));
    assert_eq!(run(&engine, yaml, json!({"fire": true, "rev": 42}))[0].once_per.as_deref(), Some("42"));
}

#[test]
fn conditions_are_independent_and_do_not_share_variables() {
    let engine = TriggerEngine::new();
    let yaml = "- when: let x = 1; x == 1\n  send: [a]\n- when: x == 1\n  send: [b]\n- when: app.status.boom.x\n  send: [c]\n- when: true\n  send: [d]\n";
    let r = run(&engine, yaml, json!({"status": {}}));
    assert_eq!(r.iter().map(|c| c.result).collect::<Vec<_>>(), [true, false, false, true]);
    assert!(r[1].error.as_deref().unwrap_or_default().contains("x"), "{:?}", r[1]);
    assert_ne!(r[0].key, r[1].key);
    assert!(r[0].key.starts_with("[0]."));
}

#[test]
fn the_sandbox_stops_endless_loops_and_runaway_values() {
    let r = one("loop {} ; true", json!({}));
    assert!(!r.result);
    assert!(r.error.as_deref().unwrap_or_default().contains("Too many operations"), "{r:?}");
    let r = one("let s = \"x\"; loop { s += s; }", json!({}));
    assert!(!r.result);
    assert!(r.error.is_some());
    let r = one("fn f(n) { f(n + 1) } f(0)", json!({}));
    assert!(!r.result, "{r:?}");
    assert!(r.error.as_deref().unwrap_or_default().contains("Stack overflow"), "a clear error: {r:?}");
    // A 10 MB string from the cluster cannot be grown further, and reading it is fine.
    let big = json!({"status": {"operationState": {"message": "x".repeat(10 << 20)}}});
    let r = one("let m = app.status.operationState.message; m += m; true", big.clone());
    assert!(!r.result && r.error.as_deref().unwrap_or_default().contains("Length of string"), "{r:?}");
    assert!(one("app.status.operationState.message.len() > 0", big).result);
    let r = one("app.metadata.name = \"changed\"; true", json!({"metadata": {"name": "a"}}));
    assert!(!r.result, "app is read-only: {r:?}");
    // An empty pattern replaced by a long text, on a long string from the cluster:
    // refused before the gigabytes are built (rhai checks sizes after a call returns).
    let long = json!({"status": {"operationState": {"message": "x".repeat(1 << 19)}}});
    let r = one("replace_all(app.status.operationState.message, \"\", \"0123456789abcdef\").len() > 0", long.clone());
    assert!(!r.result && r.error.as_deref().unwrap_or_default().contains("longer than the string limit"), "{r:?}");
    let r = one("split_all(app.status.operationState.message, \"\").len() > 0", long);
    assert!(!r.result && r.error.as_deref().unwrap_or_default().contains("parts"), "{r:?}");
    assert!(one("replace_all(\"a-b-c\", \"-\", \"_\") == \"a_b_c\" && split_all(\"a,b\", \",\").len() == 2", json!({})).result);
}

#[test]
fn module_loading_and_eval_are_not_available() {
    let engine = TriggerEngine::new();
    assert!(compile(&engine, "- when: import \"x\" as y; true\n  send: [x]\n").is_err());
    let errors = compile(&engine, "- when: eval(\"true\")\n  send: [x]\n").unwrap_err();
    assert!(errors[0].message.contains("eval"), "{errors:?}");
}

#[test]
fn time_helpers() {
    let app = json!({"a": "2026-03-01T11:59:00Z", "b": "2026-03-01T12:00:30+00:00"});
    for when in [
        "parse_time(app.a).before(parse_time(app.b))",
        "parse_time(app.b).after(parse_time(app.a))",
        "parse_time(app.a).add(minutes(1)) == now()",
        "parse_time(app.a) + duration(\"90s\") == parse_time(app.b)",
        "now() - parse_time(app.a) == seconds(60)",
        "(now() - parse_time(app.a)).seconds() == 60",
        "parse_time(app.a) < now() && now() <= now()",
        "parse_time(app.a).format(\"%H:%M\") == \"11:59\"",
        "has_prefix(\"OutOfSync\", \"Out\") && \"OutOfSync\".contains(\"Of\") && lower(\"AB\") == \"ab\"",
        "len(app.missing) == 0 && string(app.missing) == \"<nil>\"",
        "parse_time(app.a).unix() == 1772366340",
        "\"Sync\" in \"OutOfSync\" && \"a\" in app && !(\"zz\" in app) && 2 in [1, 2]",
        "len(\"abc\") == 3 && len([1]) == 1 && len(app) == 2",
    ] {
        let r = one(when, app.clone());
        assert!(r.result, "{when}: {r:?}");
    }
    let r = one("parse_time(app.missing).before(now())", app.clone());
    assert!(!r.result && r.error.as_deref().unwrap_or_default().contains("missing"), "{r:?}");
    let r = one("parse_time(\"yesterday\").before(now())", app);
    assert!(!r.result && r.error.as_deref().unwrap_or_default().contains("RFC 3339"), "{r:?}");
}

#[test]
fn compile_errors_point_into_the_file() {
    let engine = TriggerEngine::new();
    let yaml = "# comment\n- when: |\n    app.status.health.status ==\n      == \"x\"\n  send: [x]\n- when: app.a ==\n  oncePer: app.(\n  send: []\n";
    let errors = compile(&engine, yaml).unwrap_err();
    let rendered: Vec<String> = errors.iter().map(ToString::to_string).collect();
    // (`send: []` is no error: Argo CD accepts it and sends nothing; `config` warns.)
    assert_eq!(errors.len(), 3, "{rendered:#?}");
    assert!(rendered[0].starts_with("t.yaml:4:"), "{rendered:#?}");
    assert!(rendered[0].contains("trigger t[0].when: invalid rhai"), "{rendered:#?}");
    assert!(rendered[1].starts_with("t.yaml:6:"), "{rendered:#?}");
    assert!(rendered[2].starts_with("t.yaml:7:") && rendered[2].contains("oncePer"), "{rendered:#?}");
}

#[test]
fn yaml_boolean_and_string_when_are_both_accepted() {
    let engine = TriggerEngine::new();
    let r = run(&engine, "- when: true\n  send: [x]\n- when: \"true\"\n  send: [x]\n- when: false\n  send: [x]\n", json!({}));
    assert_eq!(r.iter().map(|c| c.result).collect::<Vec<_>>(), [true, true, false]);
}

#[test]
fn hold_down_and_repeat_durations_are_parsed_and_checked() {
    let engine = TriggerEngine::new();
    let t = compile(&engine, "- when: \"true\"\n  for: 2m\n  repeat: 1h30m\n  send: [x]\n").unwrap();
    assert_eq!(t.conditions[0].hold, Some(std::time::Duration::from_secs(120)));
    assert_eq!(t.conditions[0].repeat, Some(std::time::Duration::from_secs(5400)));
    let errors = compile(&engine, "- when: \"true\"\n  for: 2 minutes\n  send: [x]\n").unwrap_err();
    let rendered = errors[0].to_string();
    assert!(rendered.starts_with("t.yaml:2:") && rendered.contains("invalid duration"), "{rendered}");
    let errors = compile(&engine, "- when: \"true\"\n  repeat: 0s\n  send: [x]\n").unwrap_err();
    let rendered = errors[0].to_string();
    assert!(rendered.starts_with("t.yaml:2:") && rendered.contains("trigger t[0].repeat: must be more than zero"), "{rendered}");
}

#[test]
fn time_arithmetic_out_of_range_is_an_error_not_a_panic() {
    let app = json!({});
    for when in [
        "days(100000000000) + days(100000000000) > days(1)",
        "days(-100000000000) - days(100000000000) < days(1)",
        "now() + days(100000000000) > now()",
        "days(1000000000000000) > days(1)",
    ] {
        let r = one(when, app.clone());
        assert!(!r.result, "{when}");
        assert!(r.error.as_deref().unwrap_or_default().contains("out of range"), "{when}: {r:?}");
    }
}

/// Time-dependence comes from the compiled script, not its text: `now ()` with a
/// space, an episode's duration (computed from now), or `now` inside `oncePer`.
#[test]
fn reading_the_clock_is_found_in_the_compiled_script() {
    let engine = TriggerEngine::new();
    let reads = |when: &str, once_per: Option<&str>| {
        let mut yaml = format!("- when: {}\n  send: [x]\n", serde_json::to_string(when).unwrap());
        if let Some(o) = once_per {
            yaml.push_str(&format!("  oncePer: {}\n", serde_json::to_string(o).unwrap()));
        }
        compile(&engine, &yaml).unwrap().conditions[0].reads_clock
    };
    assert!(reads("now() > parse_time(app.status.reconciledAt)", None));
    assert!(reads("now () > parse_time(app.status.reconciledAt)", None), "whitespace does not hide a call");
    assert!(reads("episode.durationSeconds > 300", None), "computed from now");
    assert!(reads("episode[\"duration\"] != \"\"", None));
    assert!(reads("let d = episode; d.durationSeconds > 1", None));
    assert!(reads("true", Some("now().unix() / 3600")));
    assert!(!reads("app.status.sync.status == \"OutOfSync\"", None));
    assert!(!reads("app.metadata.name == \"now()\"", None), "a string is not a call");
    assert!(!reads("duration(\"5m\") > duration(\"1m\")", None), "the duration() function is not the clock");
}

/// expr's nil semantics for the string operators `driftwatch import` translates, as
/// expr's VM implements them (`OpMatches`, `OpContains`, `OpStartsWith`, `OpEndsWith`
/// push false when either side is nil): an absent field neither matches nor contains,
/// so its negation holds. Comparing nil with `==` is false, and an absent field is
/// `nil`.
#[test]
fn absent_fields_follow_expr_nil_semantics_in_string_operators() {
    let app = json!({"status": {"operationState": {"message": "synced by argocd-image-updater"}}});
    for (when, want) in [
        ("!matches(app.status.operationState.operationInitiatedBy, \".*image-updater.*\")", true),
        ("matches(app.status.operationState.operationInitiatedBy, \".*\")", false),
        ("matches(app.status.operationState.message, \".*image-updater.*\")", true),
        ("matches(app.status.operationState.message, app.missing)", false),
        ("str_contains(app.missing, \"x\") || str_contains(\"x\", app.missing)", false),
        ("!str_contains(app.missing, \"x\")", true),
        ("has_prefix(app.missing, \"a\") || has_suffix(app.missing, \"a\")", false),
        ("!has_prefix(app.missing, \"a\") && !has_suffix(app.missing, app.missing)", true),
        ("has_prefix(app.status.operationState.message, \"synced\")", true),
        ("app.missing == nil && !(app.missing == \"x\")", true),
    ] {
        let r = one(when, app.clone());
        assert_eq!(r.result, want, "{when}: {r:?}");
        assert!(r.error.is_none(), "{when}: no error, a value: {r:?}");
    }
}

#[test]
fn a_pass_converting_only_what_its_scripts_read_decides_as_with_all_of_it() {
    let engine = TriggerEngine::new();
    let app = json!({"metadata": {"name": "a", "labels": {"team": "x", "env": "prod"}, "annotations": {"len": "7"}},
                     "spec": {"project": "p", "destination": {"namespace": "shop"}},
                     "status": {"sync": {"status": "OutOfSync", "revision": "r2"}, "health": {"status": "Degraded"},
                                "resources": [{"kind": "Role", "status": "OutOfSync"}, {"kind": "ConfigMap", "status": "Synced"}],
                                "operationState": {"phase": "Failed", "syncResult": {"revision": "r1"}}}});
    let now = chrono::Utc.with_ymd_and_hms(2026, 3, 1, 12, 0, 0).unwrap();
    let drift = Drift::default();
    for when in [
        "app.status.sync.status == \"OutOfSync\" && app.status.health.status == \"Degraded\"",
        // A map's `len` is its key (absent: `()`), not its size: pruned maps read the same.
        "app.metadata.labels.len == () && app.metadata.annotations.len == \"7\"",
        "app.metadata.labels.len() == 2",
        "app.status.resources.filter(|r| r.status == \"OutOfSync\").len() == 1",
        "app.status.resources[0].kind == \"Role\" && app.spec.destination.namespace == \"shop\"",
        "app[\"status\"][\"sync\"].status == \"OutOfSync\"",
        "let a = app; a.keys().len() == 3",
        "app.status.operationState.syncResult.revision != app.status.sync.revision",
        "app.status.missing == () && app.spec?.nothing?.deeper == ()",
    ] {
        let yaml = format!("- when: {}\n  oncePer: app.status.sync.revision\n  send: [x]\n", serde_json::to_string(when).unwrap());
        let t = compile(&engine, &yaml).unwrap_or_else(|e| panic!("{e:?}"));
        let full = crate::clock::with_now(now, || engine.run(&t, &mut engine.prepare(&app)));
        assert!(full[0].result, "{when}: {full:?}");
        let mut pruned = engine.prepare_pass(&app, &crate::unit::Unit::default(), &drift, None, now, &t.reads());
        assert_eq!(crate::clock::with_now(now, || engine.run(&t, &mut pruned)), full, "{when}");
    }
}
