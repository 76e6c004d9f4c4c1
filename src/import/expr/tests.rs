//! The translation end to end: expr text in, rhai that the real engine compiles and
//! evaluates to expr's result.

use super::to_rhai;

/// Translates and compiles with the trigger engine.
fn t(src: &str) -> String {
    let out = to_rhai(src).unwrap_or_else(|e| panic!("{src}: {e}"));
    crate::trigger::compiles(&out).unwrap_or_else(|e| panic!("{src} -> {out}: {e}"));
    out
}

#[test]
fn the_catalog_idioms() {
    assert_eq!(
        t("app.status.operationState != nil and app.status.operationState.phase in ['Running']"),
        r#"app.status.operationState != () && app.status.operationState.phase in ["Running"]"#
    );
    assert_eq!(t("app.status.operationState?.syncResult?.revision"), "app.status.operationState?.syncResult?.revision");
    assert_eq!(
        t(
            "!time.Parse(app.status.health.lastTransitionTime).Add(1 * time.Minute).Before(time.Parse(app.status.operationState.finishedAt))"
        ),
        "!parse_time(app.status.health.lastTransitionTime).add(1 * minutes(1)).before(parse_time(app.status.operationState.finishedAt))"
    );
    assert_eq!(t("app.metadata.deletionTimestamp != nil"), "app.metadata.deletionTimestamp != ()");
    assert_eq!(t("true"), "true");
}

/// Translates an expr condition and evaluates it on `app` with the real engine.
fn holds(src: &str, app: serde_json::Value) -> bool {
    let rhai = t(src);
    let engine = crate::trigger::TriggerEngine::new();
    let yaml = format!("- when: {}\n  send: [x]\n", serde_json::to_string(&rhai).unwrap());
    let file = crate::source::SourceFile::new("t.yaml", yaml);
    let def: crate::trigger::TriggerDef = file.parse("trigger t").unwrap();
    let trigger = engine.compile("t", &def, &file).unwrap_or_else(|e| panic!("{rhai}: {e:?}"));
    let r = engine.run(&trigger, &mut engine.prepare(&app)).remove(0);
    assert!(r.error.is_none(), "{src} -> {rhai}: {r:?}");
    r.result
}

/// expr's nil semantics in the operators the translation maps to functions: a
/// field that is absent neither matches, contains, starts nor ends with anything
/// (expr's VM pushes false), so the negation of each holds, as Argo CD finds.
#[test]
fn absent_fields_give_argo_cds_results() {
    let app = serde_json::json!({"status": {"operationState": {"phase": "Succeeded"}}});
    assert!(holds("not(app.status.operationState.operationInitiatedBy matches \".*image-updater.*\")", app.clone()));
    assert!(!holds("app.status.operationState.operationInitiatedBy matches \".*\"", app.clone()));
    for op in ["contains", "startsWith", "endsWith"] {
        assert!(!holds(&format!("app.status.missing {op} 'a'"), app.clone()), "{op}");
        assert!(holds(&format!("not (app.status.missing {op} 'a')"), app.clone()), "{op}");
        assert!(!holds(&format!("app.status.operationState.phase {op} app.status.missing"), app.clone()), "{op}");
    }
    assert!(holds("app.status.missing == nil", app.clone()));
    assert!(!holds("app.status.missing == 'x'", app.clone()));
    assert!(holds("app.status.operationState.phase startsWith 'Succ'", app));
}

/// What Argo CD makes of a condition: `Some(result)`, or `None` when expr's VM fails
/// on it or gives no boolean (notifications-engine counts either as false, and the
/// negation of it as false too).
fn outcome(src: &str, app: &serde_json::Value) -> Option<bool> {
    let rhai = t(src);
    let engine = crate::trigger::TriggerEngine::new();
    let yaml = format!("- when: {}\n  send: [x]\n", serde_json::to_string(&rhai).unwrap());
    let file = crate::source::SourceFile::new("t.yaml", yaml);
    let def: crate::trigger::TriggerDef = file.parse("trigger t").unwrap();
    let trigger = engine.compile("t", &def, &file).unwrap_or_else(|e| panic!("{rhai}: {e:?}"));
    let r = engine.run(&trigger, &mut engine.prepare(app)).remove(0);
    r.error.is_none().then_some(r.result)
}

/// Every operator and builtin the translation converts, on present, absent and
/// nil values, with the result expr-lang gives in Argo CD. From expr's VM
/// (vm/runtime): an ordering comparison, arithmetic, `len` and a member access or
/// index on nil panic; `==` treats nil as a value and compares numbers across int
/// and float; `in` on nil is false, on a string a panic; `&&`/`||` need a boolean
/// on the left and pass the right through; `string(nil)` is "<nil>"; `matches`,
/// `contains`, `startsWith`, `endsWith` push false for nil. Each case is also run
/// negated: where expr fails, `not(...)` fails too, so a translation that gives
/// false instead of failing is caught.
#[test]
fn nil_and_absent_fields_in_every_operator_as_expr_evaluates_them() {
    let app = serde_json::json!({
        "metadata": {"name": "web-1", "labels": {"team": "a"}},
        "status": {"sync": {"status": "Synced"}, "operationState": {"phase": "Succeeded", "retryCount": 2}, "conditions": [{"type": "A"}]}
    });
    const FAILS: Option<bool> = None;
    let cases: &[(&str, Option<bool>)] = &[
        // Ordering comparisons: nil panics.
        ("app.status.operationState.retryCount > 1", Some(true)),
        ("app.status.missing > 1", FAILS),
        ("1 < app.status.missing", FAILS),
        ("app.status.missing <= 0", FAILS),
        ("app.status.missing >= app.status.missing", FAILS),
        // Equality: nil is a value.
        ("app.status.missing == nil", Some(true)),
        ("nil == nil", Some(true)),
        ("app.status.missing != 'x'", Some(true)),
        ("app.status.missing == 0", Some(false)),
        ("app.status.operationState.retryCount == 2.0", Some(true)),
        // Member access and index.
        ("app.status.missing.phase == 'x'", FAILS),
        ("app.status.missing?.phase == nil", Some(true)),
        ("app.status.missing['k'] == nil", FAILS),
        ("app.metadata.labels['absent'] == nil", Some(true)),
        ("app.status.conditions[5].type == 'A'", FAILS),
        ("app.status.conditions[-1].type == 'A'", Some(true)),
        // in
        ("app.status.sync.status in ['Synced', 'OutOfSync']", Some(true)),
        ("app.status.missing in ['x']", Some(false)),
        ("nil in [nil]", Some(true)),
        ("'a' in app.status.missing", Some(false)),
        ("'x' not in app.status.missing", Some(true)),
        ("'team' in app.metadata.labels", Some(true)),
        ("'Syn' in app.status.sync.status", FAILS),
        // len
        ("len(app.status.conditions) == 1", Some(true)),
        ("len(app.metadata.labels) == 1", Some(true)),
        ("len(app.metadata.name) == 5", Some(true)),
        ("len(app.status.missing) == 0", FAILS),
        // Logic: a boolean on the left, the right passed through.
        ("app.status.missing and true", FAILS),
        ("true and app.status.missing", FAILS),
        ("app.status.missing or true", FAILS),
        ("false or app.status.missing", FAILS),
        ("not app.status.missing", FAILS),
        ("app.status.missing ? true : false", FAILS),
        // Arithmetic.
        ("app.status.missing + 1 > 0", FAILS),
        ("app.metadata.name + app.status.missing == 'web-1'", FAILS),
        ("app.status.operationState.retryCount * 2 == 4", Some(true)),
        ("app.status.operationState.retryCount / 4 == 0.5", Some(true)),
        ("-app.status.missing < 0", FAILS),
        ("app.status.missing % 2 == 0", FAILS),
        // String operators: false for nil.
        ("app.status.missing matches 'x'", Some(false)),
        ("app.metadata.name matches '^web-[0-9]+$'", Some(true)),
        ("app.status.missing contains 'x'", Some(false)),
        ("app.metadata.name startsWith app.status.missing", Some(false)),
        // Builtins.
        ("string(app.status.missing) == '<nil>'", Some(true)),
        ("upper(app.status.missing) == ''", FAILS),
        ("abs(app.status.missing) == 0", FAILS),
        ("app.status.missing ?? 'd' == 'd'", Some(true)),
        // Predicates.
        ("any(app.status.conditions, .type == 'A')", Some(true)),
        ("count(app.status.conditions, .type == 'A') == 1", Some(true)),
        ("all(app.status.missing, .ok)", FAILS),
        ("any(app.status.conditions, .missing > 1)", FAILS),
    ];
    for (src, want) in cases {
        assert_eq!(outcome(src, &app), *want, "{src} -> {}", t(src));
        let negated = format!("not ({src})");
        assert_eq!(outcome(&negated, &app), want.map(|b| !b), "{negated} -> {}", t(&negated));
    }
}

#[test]
fn operators_and_precedence() {
    assert_eq!(t("app.b == 1 or not (app.c > 2 and app.d)"), "app.b == 1 || !(must(app.c) > 2 && must(app.d))");
    assert_eq!(t("app.x == 1 || app.y != 'z' && !app.w"), r#"app.x == 1 || (app.y != "z" && !app.w)"#);
    assert_eq!(t("any(app.xs, .ok)"), "app.xs.some(|it0| it0.ok)");
    assert_eq!(t("app.x not in ['a', \"b\"]"), r#"!(app.x in ["a", "b"])"#);
    assert_eq!(t("app.m.name matches '^web-'"), r#"matches(app.m.name, "^web-")"#);
    assert_eq!(t("app.m.name startsWith 'web'"), r#"has_prefix(app.m.name, "web")"#);
    assert_eq!(t("app.x ?? 'none'"), r#"app.x ?? "none""#);
    assert_eq!(t("app.x ? 1 : 2"), "if app.x { 1 } else { 2 }");
    assert_eq!(t("len(app.status.conditions) > 0"), "len(must(app.status.conditions)) > 0");
    assert_eq!(t("app.a.b > 1 and app.c"), "must(app.a.b) > 1 && must(app.c)");
    assert_eq!(t("app.a in app.b"), "app.a in collection(app.b)");
    assert_eq!(t("1 * time.Minute"), "1 * minutes(1)");
    assert_eq!(t("app.metadata.labels['app.kubernetes.io/name']"), r#"app.metadata.labels["app.kubernetes.io/name"]"#);
    t("app.status.sync.type == 'x'");
    assert_eq!(t("app.spec.fn"), r#"app.spec["fn"]"#);
    assert_eq!(t("2 ** 3 ** 2"), "2 ** (3 ** 2)");
}

#[test]
fn predicates_strings_and_time() {
    assert_eq!(t("any(app.status.conditions, {.type == 'SyncError'})"), r#"app.status.conditions.some(|it0| it0.type == "SyncError")"#);
    assert_eq!(t("all(app.status.resources, # .status == 'Synced')"), r#"app.status.resources.all(|it0| it0.status == "Synced")"#);
    assert_eq!(t("none(app.x, #.y)"), "!app.x.some(|it0| it0.y)");
    assert_eq!(t("count(app.x, #.y) > 1"), "app.x.filter(|it0| it0.y).len() > 1");
    assert_eq!(t("strings.ToUpper(app.x) == 'A'"), r#"upper(app.x) == "A""#);
    assert_eq!(t("time.Now().Sub(time.Parse(app.x)).Minutes() > 5"), "(now().sub(parse_time(app.x)).seconds() / 60.0) > 5");
    assert_eq!(t("app.x | lower()"), "lower(app.x)");
}

#[test]
fn refusals_say_why() {
    assert!(to_rhai("repo.GetCommitMetadata(app.status.sync.revision).Message == ''").unwrap_err().reason.contains("repo server"));
    assert!(to_rhai("foo(app)").unwrap_err().reason.contains("foo"));
    assert_eq!(to_rhai("time.Now()-'x'and'x'").unwrap_err().reason, "`and` of a string: expr refuses it too, it needs a boolean");
    assert!(to_rhai("app.ok and -1").unwrap_err().reason.contains("`and` of a number"));
    assert!(to_rhai("not 2.5").unwrap_err().reason.contains("`not` of a number"));
    assert!(to_rhai("app.ok or nil").unwrap_err().reason.contains("`or` of nil"));
    assert!(to_rhai("'x'?.in == 1").unwrap_err().reason.contains("`.in` of a string"));
    assert!(to_rhai("app.x ==").is_err());
    assert!(to_rhai("app.x[1:2]").unwrap_err().reason.contains("slices"));
    assert!(to_rhai("'unterminated").is_err());
    assert!(to_rhai("secrets.x").unwrap_err().reason.contains("unknown variable"));
    assert!(to_rhai(&"(".repeat(10_000)).unwrap_err().reason.contains("nested deeper"));
    assert!(to_rhai(&"!".repeat(10_000)).unwrap_err().reason.contains("nested deeper"));
}

#[test]
fn a_negation_of_a_negation_stays_two_operators() {
    assert_eq!(to_rhai("- -app.n == 1 and -(-1) < 2").unwrap(), "-(-app.n) == 1 && -(-1) < 2");
}
