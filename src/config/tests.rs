//! Loading configurations: layering, cross-references, and errors with file, line and column.

use super::*;

struct Fixture {
    dir: tempfile::TempDir,
}

impl Fixture {
    fn new() -> Self {
        Fixture { dir: tempfile::tempdir().unwrap() }
    }
    fn file(&self, rel: &str, text: &str) -> &Self {
        let p = self.dir.path().join(rel);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, text).unwrap();
        self
    }
    fn load(&self) -> Result<Runtime, Vec<ConfigError>> {
        load(Some(&self.dir.path().join("driftwatch.yaml")))
    }
    fn errors(&self) -> Vec<String> {
        match self.load() {
            Ok(_) => panic!("expected errors"),
            Err(e) => e.iter().map(|e| e.to_string().replace(&self.dir.path().display().to_string(), "D")).collect(),
        }
    }
}

#[test]
fn builtin_catalog_alone() {
    let rt = load(None).unwrap();
    assert!(rt.triggers.contains_key("on-sync-failed"));
    assert!(rt.templates.contains("app-sync-failed"));
    assert!(rt.warnings.is_empty(), "{:?}", rt.warnings);
}

#[test]
fn a_full_configuration_loads() {
    let f = Fixture::new();
    f.file(
        "driftwatch.yaml",
        r#"
context:
  argocdUrl: https://argocd.example.com
services:
  slack:
    token: $slack-token
  oncall:
    type: pagerduty
    routingKeys:
      platform: $pd-key
  hook:
    type: webhook
    url: https://hooks.example.com/x
    bearerToken: $hook-token
subscriptions:
  - recipients: [slack:prod-alerts]
    triggers: [on-sync-failed]
    selector: env=prod
defaultTriggers: [on-sync-status-unknown]
defaultTriggers.slack: [on-sync-failed, on-health-degraded]
state:
  path: state/driftwatch.redb
  maxKeysPerApp: 64
secretsFile: secrets.yaml
"#,
    )
    .file("secrets.yaml", "slack-token: xoxb-1\npd-key: abc123\n")
    .file("triggers/on-custom.yaml", "- when: app.status.sync.status == \"OutOfSync\"\n  send: [custom]\n")
    .file("templates/custom.yaml", "message: custom {{app.metadata.name}}\n")
    .file("templates/app-sync-failed.yaml", "message: overridden\n");
    let rt = f.load().unwrap_or_else(|e| panic!("{e:#?}"));
    assert_eq!(rt.context["argocdUrl"], "https://argocd.example.com");
    assert_eq!(rt.service_kind("oncall"), Some(DestinationKind::Pagerduty));
    assert_eq!(rt.service_kind("slack"), Some(DestinationKind::Slack));
    assert_eq!(rt.service_kind("email"), Some(DestinationKind::Email), "an unconfigured kind name");
    assert_eq!(rt.service_kind("nope"), None);
    assert!(rt.triggers.contains_key("on-custom") && rt.triggers.contains_key("on-deployed"));
    assert_eq!(rt.router.default_triggers_by_service["slack"], ["on-sync-failed", "on-health-degraded"]);
    assert_eq!(rt.state.max_keys_per_app, Some(64));
    assert!(rt.state.path.unwrap().ends_with("state/driftwatch.redb"));
    let warnings: Vec<&str> = rt.warnings.iter().map(|w| w.message.as_str()).collect();
    // Says where it was looked for: the configured secrets file, then the environment.
    let file = f.dir.path().join("secrets.yaml");
    let missing = format!(
        "services.hook: secret $hook-token is not set: no key \"hook-token\" in the secrets file {}, and no environment variable DRIFTWATCH_SECRET_HOOK_TOKEN",
        file.display()
    );
    assert_eq!(warnings, [format!("{missing} (driftwatch run will not start without it)")]);
    assert_eq!(rt.missing_secrets, [missing]);
}

#[test]
fn unknown_keys_are_errors_with_position() {
    let f = Fixture::new();
    f.file("driftwatch.yaml", "context:\n  argocdUrl: x\ndefaultTrigger: [on-sync-failed]\n");
    let e = f.errors();
    assert_eq!(e.len(), 1, "{e:?}");
    assert!(e[0].starts_with("D/driftwatch.yaml:3:1: the configuration: "), "{e:?}");
    assert!(e[0].contains("defaultTrigger"), "{e:?}");

    let f = Fixture::new();
    f.file("driftwatch.yaml", "services:\n  slack:\n    tokn: $x\n");
    let e = f.errors();
    assert!(e[0].starts_with("D/driftwatch.yaml:3:") && e[0].contains("services.slack") && e[0].contains("tokn"), "{e:?}");

    let f = Fixture::new();
    f.file("driftwatch.yaml", "triggersDir: t\n").file("t/on-x.yaml", "- when: true\n  send: [app-created]\n  sendd: []\n");
    let e = f.errors();
    assert!(e[0].starts_with("D/t/on-x.yaml:3:3: trigger on-x: ") && e[0].contains("sendd"), "{e:?}");

    let f = Fixture::new();
    f.file("driftwatch.yaml", "").file("templates/t.yaml", "message: x\nslack:\n  attachment: \"[]\"\n");
    let e = f.errors();
    assert!(e[0].starts_with("D/templates/t.yaml:3:3: template t: ") && e[0].contains("attachment"), "{e:?}");
}

#[test]
fn every_error_is_reported_not_just_the_first() {
    let f = Fixture::new();
    f.file(
        "driftwatch.yaml",
        "subscriptions:\n  - recipients: [nowhere:x]\n    triggers: [on-missing]\n    selector: \"a in b\"\ndefaultTriggers: [on-gone]\n",
    )
    .file("triggers/bad-rhai.yaml", "- when: |\n    app.status.sync.status ==\n  send: [app-created]\n")
    .file("triggers/bad-send.yaml", "- when: true\n  send: [no-such-template]\n")
    .file("templates/bad-hbs.yaml", "message: |\n  line one\n  {{#if app.x}}unclosed\n")
    .file("templates/bad-yaml.yaml", "message: [unclosed\n");
    let e = f.errors();
    let has = |needle: &str| assert!(e.iter().any(|m| m.contains(needle)), "no {needle:?} in {e:#?}");
    has("D/triggers/bad-rhai.yaml:2:");
    has("trigger bad-rhai[0].when: invalid rhai");
    has("trigger bad-send[0].send: template \"no-such-template\" does not exist");
    has("D/templates/bad-hbs.yaml:");
    has("template bad-hbs.message: invalid handlebars");
    has("D/templates/bad-yaml.yaml:");
    has("subscriptions[0].selector");
    has("subscriptions[0].triggers: trigger \"on-missing\" does not exist");
    has("subscriptions[0].recipients: service \"nowhere\" is not configured");
    has("defaultTriggers: trigger \"on-gone\" does not exist");
    has("D/templates/bad-yaml.yaml:1:10: template bad-yaml");
    has("D/driftwatch.yaml:2:5: subscriptions[0].triggers");
    has("D/driftwatch.yaml:5:18: defaultTriggers: trigger \"on-gone\"");
    assert_eq!(e.len(), 8, "{e:#?}");
}

/// A subscription's engine and kind are refused, at the subscription's line, unless
/// an engine and a unit kind driftwatch knows.
#[test]
fn a_subscriptions_engine_and_kind_are_checked() {
    let f = Fixture::new();
    f.file(
        "driftwatch.yaml",
        "services:\n  slack: {type: slack, webhookUrl: http://127.0.0.1:9}\nsubscriptions:\n  - recipients: [slack:x]\n    engine: jenkins\n    kind: [Kustomization, GitRepository]\n",
    );
    let e = f.errors();
    assert_eq!(e.len(), 2, "{e:#?}");
    assert!(e[0].contains("driftwatch.yaml:4:5: subscriptions[0].engine: \"jenkins\" is not one of argocd, flux, fleet"), "{e:#?}");
    assert!(
        e[1].contains("subscriptions[0].kind: \"GitRepository\" is not one of Application, Kustomization, HelmRelease, BundleDeployment"),
        "{e:#?}"
    );
}

#[test]
fn handlebars_errors_point_at_the_line_in_the_file() {
    let f = Fixture::new();
    f.file("driftwatch.yaml", "")
        .file("templates/t.yaml", "# c\nmessage: |\n  ok\n  still ok {{app.metadata.name}}\n  bad {{#each app.x}}\n");
    let e = f.errors();
    assert!(e[0].starts_with("D/templates/t.yaml:"), "{e:?}");
    let line: u64 = e[0].split(':').nth(1).unwrap().parse().unwrap();
    assert!((4..=6).contains(&line), "{e:?}");
}

#[test]
fn schema_warnings_for_paths_that_cannot_exist() {
    let f = Fixture::new();
    f.file("driftwatch.yaml", "").file("templates/t.yaml", "message: |\n  {{app.status.sync.statuss}} {{app.metadata.name}}\n");
    let rt = f.load().unwrap();
    assert_eq!(rt.warnings.len(), 1, "{:?}", rt.warnings);
    let w = &rt.warnings[0];
    assert!(w.message.contains("app.status.sync.statuss does not exist"), "{w:?}");
    let pos = w.pos.as_ref().unwrap();
    assert_eq!((pos.line, pos.col), (2, 5));
}

#[test]
fn inline_triggers_and_templates() {
    let f = Fixture::new();
    f.file("driftwatch.yaml", "triggers:\n  on-x:\n    - when: app.x == 1\n      send: [x]\ntemplates:\n  x:\n    message: hi\n");
    let rt = f.load().unwrap();
    assert!(rt.triggers.contains_key("on-x") && rt.templates.contains("x"));
    let f = Fixture::new();
    f.file("driftwatch.yaml", "triggers:\n  on-x:\n    - when: app.x ==\n      send: [x]\n");
    let e = f.errors();
    assert!(e[0].starts_with("D/driftwatch.yaml:3:"), "{e:?}");
}

#[test]
fn resource_class_rules_are_validated() {
    let f = Fixture::new();
    f.file("driftwatch.yaml", "resourceClasses:\n  - {group: example.com, kind: Widget, class: dangerous}\n");
    let e = f.errors();
    assert!(e[0].starts_with("D/driftwatch.yaml:2:") && e[0].contains("resourceClasses") && e[0].contains("dangerous"), "{e:?}");
}

#[test]
fn drift_settings_routes_history_attribution() {
    let f = Fixture::new();
    f.file(
        "driftwatch.yaml",
        "routes:\n  - match: {class: rbac}\n    triggers: [on-security-drift]\n    recipients: [pagerduty:platform]\nhistory: {maxEpisodes: 5, maxAge: 7d}\nattribution: {ttl: 30s, concurrency: 2, ignoreManagers: [my-operator], destinations: [prod-eu-1]}\n",
    );
    let rt = f.load().unwrap();
    assert_eq!(rt.routes.routes.len(), 1);
    assert_eq!(rt.retention, Retention { max_episodes: 5, max_age: chrono::Duration::days(7) });
    assert_eq!((rt.attribution.ttl.as_secs(), rt.attribution.concurrency), (30, 2));
    let app =
        |dest: serde_json::Value| serde_json::json!({"kind": "Application", "metadata": {"name": "a"}, "spec": {"destination": dest}});
    let local = |rt: &Runtime, dest| rt.target(&app(dest)) == clusters::Target::Local;
    assert!(local(&rt, serde_json::json!({"name": "prod-eu-1"})));
    assert!(!local(&rt, serde_json::json!({"server": "https://kubernetes.default.svc"})), "replaced by the list");
    let defaults = f.file("driftwatch.yaml", "{}\n").load().unwrap();
    assert!(local(&defaults, serde_json::json!({"server": "https://kubernetes.default.svc"})));
    assert!(!local(&defaults, serde_json::json!({"server": "https://remote.example.com"})), "a remote cluster");
    // Argo CD refuses a destination with both name and server: no cluster is read.
    let both = serde_json::json!({"name": "in-cluster", "server": "https://kubernetes.default.svc"});
    assert!(matches!(defaults.target(&app(both)), clusters::Target::Elsewhere(d) if d.contains("both")));
    assert_eq!(defaults.attribution.argocd_namespace, "argocd");
    let named = f.file("driftwatch.yaml", "attribution: {argocdNamespace: gitops}\n").load().unwrap();
    assert_eq!(named.attribution.argocd_namespace, "gitops");
    let errors = f.file("driftwatch.yaml", "attribution:\n  argocdNamespace: Argo_CD\n").errors().join("\n");
    assert!(errors.contains("driftwatch.yaml:2:20: attribution.argocdNamespace: \"Argo_CD\" is not a namespace name"), "{errors}");

    // Bad values name the key and the position; all route errors are reported.
    f.file("driftwatch.yaml", "routes:\n  - match: {class: loud}\n    triggers: [on-nothing]\n    recipients: [slack:x]\n");
    let errors = f.errors();
    assert_eq!(errors.len(), 2, "{errors:#?}");
    assert!(errors[0].starts_with("D/driftwatch.yaml:2:") && errors[0].contains("routes[0].match.class"), "{errors:#?}");
    assert!(errors[1].contains("routes[0].triggers: trigger \"on-nothing\" does not exist"), "{errors:#?}");
    // A duration is typed: a bad one fails the parse at its position, as in services.
    f.file("driftwatch.yaml", "history: {maxAge: forever}\n");
    assert_eq!(f.errors(), ["D/driftwatch.yaml:1:19: the configuration: invalid duration \"forever\""]);
}

/// `repeat: 100000000d` once passed `check` and then panicked the evaluation (a time
/// past chrono's range): every duration is bounded when it loads, with its position.
#[test]
fn durations_past_ten_years_are_refused_with_their_position() {
    let f = Fixture::new();
    f.file(
        "driftwatch.yaml",
        "triggers:\n  on-x:\n    - when: app.x == 1\n      repeat: 100000000d\n      send: [x]\ntemplates:\n  x:\n    message: hi\n",
    );
    let e = f.errors();
    assert_eq!(e.len(), 1, "{e:?}");
    assert!(e[0].starts_with("D/driftwatch.yaml:4:") && e[0].contains("longer than the maximum"), "{e:?}");
    f.file("driftwatch.yaml", "history: {maxAge: 100000000d}\n");
    let e = f.errors();
    assert!(e[0].starts_with("D/driftwatch.yaml:1:") && e[0].contains("100000000d"), "{e:?}");
    f.file("driftwatch.yaml", "triggers:\n  on-x:\n    - when: app.x == 1\n      for: 99999999999999999999d\n      send: [x]\n");
    assert!(f.errors()[0].starts_with("D/driftwatch.yaml:4:"), "{:?}", f.errors());
    // Ten years is allowed.
    f.file("driftwatch.yaml", "history: {maxAge: 3650d}\nattribution: {ttl: 1h}\n");
    assert!(f.load().is_ok());
}

/// `operations.token` must reference a secret; it is resolved from the secrets file,
/// redacted like every secret, and a missing one keeps `run` from starting.
#[test]
fn the_operations_token_is_a_secret_reference() {
    let f = Fixture::new();
    f.file("driftwatch.yaml", "operations:\n  token: plain-text-token\n");
    let e = f.errors();
    assert!(e.iter().any(|e| e.contains("D/driftwatch.yaml:2:10") && e.contains("must reference a secret")), "{e:?}");
    f.file("driftwatch.yaml", "secretsFile: secrets.yaml\noperations:\n  token: $ops-token\n")
        .file("secrets.yaml", "ops-token: abc-123-xyz\n");
    let rt = f.load().unwrap();
    assert_eq!(rt.operations_token.as_ref().map(|t| t.expose()), Some("abc-123-xyz"));
    assert_eq!(rt.redactor.redact("token abc-123-xyz"), "token ***");
    f.file("driftwatch.yaml", "secretsFile: secrets.yaml\noperations:\n  token: $other\n");
    let rt = f.load().unwrap();
    assert!(rt.operations_token.is_none());
    assert!(rt.missing_secrets.iter().any(|m| m.starts_with("operations.token:")), "{:?}", rt.missing_secrets);
}

/// Two templates whose partials include each other are refused at load, at the field
/// that starts the circle (rendering them overflowed the stack).
#[test]
fn templates_whose_partials_include_each_other_are_refused() {
    let f = Fixture::new();
    f.file("driftwatch.yaml", "templates:\n  a:\n    message: \"{{> b/message}}\"\n  b:\n    message: \"x {{> a/message}}\"\n");
    let e = f.errors();
    assert!(
        e.iter().any(|e| e.contains("D/driftwatch.yaml:3:")
            && e.contains("template a.message")
            && e.contains("a/message -> b/message -> a/message")),
        "{e:?}"
    );
    f.file("driftwatch.yaml", "templates:\n  a:\n    message: \"{{> b/message}}!\"\n  b:\n    message: \"x\"\n");
    assert!(f.load().is_ok(), "a partial of another template's field is fine");
}

/// `audit:` under the names the issue gives; what would let an unauthenticated caller
/// in, or is out of range, is refused with its position.
#[test]
fn the_audit_section_loads_and_refuses_what_is_unsafe() {
    let f = Fixture::new();
    f.file("secrets.yaml", "audit-token: t0k3n-audit-0123456789\n").file(
        "driftwatch.yaml",
        "secretsFile: secrets.yaml\naudit:\n  listen: 0.0.0.0:9443\n  tls: {certFile: /tls/tls.crt, keyFile: /tls/tls.key, clientCAFile: /tls/client-ca.crt}\n  token: $audit-token\n  file: /var/log/kubernetes/audit.log\n  argocdIdentities: [system:serviceaccount:argocd:argocd-application-controller, system:serviceaccount:argocd:argocd-applicationset-controller]\n",
    );
    let rt = f.load().unwrap();
    let a = &rt.audit;
    assert_eq!(a.listen, Some("0.0.0.0:9443".parse().unwrap()));
    assert_eq!(a.tls.as_ref().and_then(|t| t.client_ca.clone()), Some(PathBuf::from("/tls/client-ca.crt")));
    assert_eq!(a.token.as_ref().map(|t| t.expose().to_string()), Some("t0k3n-audit-0123456789".to_string()));
    assert_eq!(a.argocd_identities.controllers.len(), 2);
    assert_eq!((a.window, a.queue, a.max_body_bytes), (chrono::Duration::minutes(10), 10_000, 16 << 20));
    assert_eq!(AuditSettings::default().argocd_identities.controllers, [ARGOCD_CONTROLLER_IDENTITY]);
    assert!(AuditSettings::default().argocd_identities.api.is_empty());

    let f = Fixture::new();
    f.file("driftwatch.yaml", "audit:\n  listen: 0.0.0.0:9443\n  token: literal-token\n  window: 30s\n  queue: 5\n  maxBodyBytes: 10\n");
    let errors = f.errors().join("\n");
    for want in [
        "driftwatch.yaml:2:11: audit.listen: needs audit.tls unless it listens on loopback",
        "driftwatch.yaml:3:10: audit.token: must reference a secret",
        "driftwatch.yaml:4:11: audit.window: is out of range (1m to 24h)",
        "driftwatch.yaml:5:10: audit.queue: 5 is out of range (100 to 1000000)",
        "driftwatch.yaml:6:17: audit.maxBodyBytes: 10 is out of range (1024 to 268435456)",
    ] {
        assert!(errors.contains(want), "missing {want:?} in:\n{errors}");
    }
    let f = Fixture::new();
    f.file("driftwatch.yaml", "audit:\n  listen: 127.0.0.1:9443\n");
    assert!(f.errors().join("\n").contains("needs audit.token or audit.tls.clientCAFile"), "{:?}", f.errors());
    // Review M4: a client CA alone lets in whatever it signed; names pin the API server.
    let f = Fixture::new();
    f.file(
        "driftwatch.yaml",
        "audit:\n  listen: 127.0.0.1:9443\n  tls: {certFile: c, keyFile: k, clientCAFile: ca}\n  maxEventAge: 2m\n  maxEventAhead: 2h\n",
    );
    let errors = f.errors().join("\n");
    for want in [
        "driftwatch.yaml:2:11: audit.listen: needs audit.token or audit.tls.clientNames besides audit.tls.clientCAFile",
        "driftwatch.yaml:4:16: audit.maxEventAge: is out of range (5m to 24h)",
        "driftwatch.yaml:5:18: audit.maxEventAhead: is out of range (1s to 1h)",
    ] {
        assert!(errors.contains(want), "missing {want:?} in:\n{errors}");
    }
    let f = Fixture::new();
    f.file("driftwatch.yaml", "audit:\n  listen: 127.0.0.1:9443\n  tls: {certFile: c, keyFile: k, clientNames: [\"not a name\"]}\n");
    let errors = f.errors().join("\n");
    assert!(errors.contains("audit.tls.clientNames: needs audit.tls.clientCAFile"), "{errors}");
    assert!(errors.contains("\"not a name\" is not a DNS name or an IP address"), "{errors}");
    let f = Fixture::new();
    f.file(
        "driftwatch.yaml",
        "audit:\n  listen: 127.0.0.1:9443\n  tls: {certFile: c, keyFile: k, clientCAFile: ca, clientNames: [kube-apiserver]}\n",
    );
    let rt = f.load().unwrap();
    assert_eq!(rt.audit.tls.map(|t| t.client_names), Some(vec!["kube-apiserver".to_string()]));
    assert_eq!(rt.audit.times.max_age, chrono::Duration::hours(1));
    let f = Fixture::new();
    f.file("driftwatch.yaml", "audit:\n  listen: nowhere\n  token: $x\n");
    assert!(f.errors().join("\n").contains("\"nowhere\" is not an address:port"), "{:?}", f.errors());
}

/// `clusters:`, `argocd:` and `diff:` under the names the issue gives; what would send
/// a token in clear, hold it literally, or point at nothing is refused with positions.
#[test]
fn spoke_clusters_argocd_and_diff_load_and_refuse_what_is_unsafe() {
    let f = Fixture::new();
    f.file("secrets.yaml", "spoke-2-token: tok-spoke-2\nargocd-token: tok-argocd\n")
        .file("spoke-1.kubeconfig", "apiVersion: v1\nkind: Config\n")
        .file("ca.crt", "-----BEGIN CERTIFICATE-----\n")
        .file(
            "driftwatch.yaml",
            "secretsFile: secrets.yaml\nclusters:\n  - name: spoke-1\n    server: https://spoke-1.example.com:6443\n    kubeconfig: spoke-1.kubeconfig\n  - server: https://spoke-2.example.com:6443\n    token: $spoke-2-token\n    caFile: ca.crt\nargocd: {server: https://argocd.example.com/, token: $argocd-token}\ndiff: {maxFields: 5, maxValueChars: 40}\n",
        );
    let rt = f.load().unwrap();
    let labels: Vec<&str> = rt.clusters.iter().map(|c| c.label.as_str()).collect();
    assert_eq!(labels, ["spoke-1", "https://spoke-2.example.com:6443"]);
    assert!(matches!(&rt.clusters[1].auth, clusters::ClusterAuth::Token { token, ca_file: Some(_) } if token.expose() == "tok-spoke-2"));
    assert_eq!(rt.argocd.as_ref().map(|a| a.server.as_str()), Some("https://argocd.example.com"));
    assert_eq!((rt.diff.limits.max_fields, rt.diff.limits.max_value_chars, rt.diff.enabled), (5, 40, true));
    let app = |dest: serde_json::Value| serde_json::json!({"spec": {"destination": dest}});
    assert_eq!(rt.target(&app(serde_json::json!({"name": "spoke-1"}))), clusters::Target::Spoke("spoke-1".into()));
    assert_eq!(
        rt.target(&app(serde_json::json!({"server": "https://spoke-2.example.com:6443"}))),
        clusters::Target::Spoke("https://spoke-2.example.com:6443".into())
    );
    assert_eq!(rt.target(&app(serde_json::json!({"server": "https://kubernetes.default.svc"}))), clusters::Target::Local);
    assert_eq!(rt.target(&app(serde_json::json!({"name": "elsewhere"}))), clusters::Target::Elsewhere("elsewhere".into()));

    let f = Fixture::new();
    f.file(
        "driftwatch.yaml",
        "clusters:\n  - name: a\n    server: http://a.example.com:6443\n    token: literal\n  - name: b\n    kubeconfig: missing.kubeconfig\n  - name: c\n  - name: in-cluster\n    kubeconfig: x\n    token: $t\nargocd: {server: http://argocd.example.com, token: plain}\ndiff: {maxFields: 0, maxValueChars: 100000}\n",
    );
    let errors = f.errors().join("\n");
    for want in [
        "driftwatch.yaml:2:5: clusters[0]: \"http://a.example.com:6443\" must be https://",
        "driftwatch.yaml:2:5: clusters[0].token: must reference a secret",
        "driftwatch.yaml:5:5: clusters[1].kubeconfig: D/missing.kubeconfig does not exist",
        "driftwatch.yaml:7:5: clusters[2]: needs exactly one of kubeconfig, token or argocdSecret",
        "clusters[3]: \"in-cluster\" is the cluster driftwatch runs in",
        "argocd.server: \"http://argocd.example.com\" must be https://",
        "argocd.token: must reference a secret",
        "driftwatch.yaml:12:19: diff.maxFields: 0 is out of range (1 to 1000)",
        "diff.maxValueChars: 100000 is out of range (8 to 10000)",
    ] {
        assert!(errors.contains(want), "missing {want:?} in:\n{errors}");
    }
}

/// `breakGlass:` loads; an out-of-range maximum is refused with its position; the
/// audit input being on makes approvals checked against it.
#[test]
fn the_break_glass_section_loads_and_refuses_out_of_range() {
    let f = Fixture::new();
    f.file(
        "driftwatch.yaml",
        "breakGlass:\n  maxFor: 12h\n  requireVerified: true\n  approvers: {groups: [incident-commanders], serviceAccounts: true}\naudit:\n  file: /var/log/audit.log\n",
    );
    let b = f.load().unwrap().break_glass;
    assert_eq!((b.max_for, b.require_verified, b.audited), (chrono::Duration::hours(12), true, true));
    assert_eq!((b.approver_groups, b.service_account_approvers), (vec!["incident-commanders".to_string()], true));
    let f = Fixture::new();
    f.file("driftwatch.yaml", "breakGlass:\n  maxFor: 90d\n");
    let errors = f.errors().join("\n");
    assert!(errors.contains("driftwatch.yaml:2:11: breakGlass.maxFor: 2160h is out of range (1m to 30d)"), "{errors}");
    let f = Fixture::new();
    f.file("driftwatch.yaml", "breakGlass:\n  maxfor: 1h\n");
    assert!(f.errors().join("\n").contains("unknown field `maxfor`"), "{:?}", f.errors());
    let b = crate::drift::break_glass::Settings::default();
    assert_eq!((b.max_for, b.require_verified, b.audited), (chrono::Duration::hours(72), false, false));
    assert!(b.approver_groups.is_empty() && !b.service_account_approvers);
}

/// Review N11: break-glass routes without `breakGlass.approvers.groups` are refused
/// with the file, the setting and the route; a group everyone (or only machines) is in
/// is no approvers' group; the machine lists load.
#[test]
fn break_glass_routes_require_approver_groups() {
    let routes = "routes:\n  - name: chat\n    triggers: [on-live-drift]\n    recipients: [slack:ops]\n    routes:\n      - name: incident\n        match: {breakGlass: true}\n        recipients: [slack:incident]\n";
    let f = Fixture::new();
    f.file("driftwatch.yaml", routes);
    let errors = f.errors().join("\n");
    assert!(
        errors.contains(
            "driftwatch.yaml:6:9: breakGlass.approvers.groups: is empty, but routes[0].routes[0] (incident) matches breakGlass: true"
        ),
        "{errors}"
    );
    let f = Fixture::new();
    f.file("driftwatch.yaml", &format!("{routes}breakGlass:\n  approvers: {{groups: [system:authenticated]}}\n"));
    let errors = f.errors().join("\n");
    assert!(errors.contains("driftwatch.yaml:1:1: breakGlass.approvers.groups: system:authenticated is not a group of people"), "{errors}");
    let f = Fixture::new();
    f.file(
        "driftwatch.yaml",
        &format!("{routes}breakGlass:\n  approvers: {{groups: [incident-commanders], refuseGroups: [robots], refuseUsers: ['*@robots.example']}}\n"),
    );
    let b = f.load().unwrap().break_glass;
    assert_eq!(
        (b.approver_groups, b.machine_groups, b.machine_users),
        (vec!["incident-commanders".to_string()], vec!["robots".to_string()], vec!["*@robots.example".to_string()])
    );
}

/// Sizes that bound the state file and the live reads are refused out of range, with
/// their position, rather than clamped or taken as they are.
#[test]
fn retention_and_read_limits_out_of_range_are_refused() {
    let f = Fixture::new();
    f.file(
        "driftwatch.yaml",
        "history:\n  maxEpisodes: 0\nstate:\n  maxKeysPerApp: 18446744073709551615\nattribution:\n  concurrency: 65\n",
    );
    let errors = f.errors().join("\n");
    for want in [
        "driftwatch.yaml:2:16: history.maxEpisodes: 0 is out of range (1 to 10000000)",
        "driftwatch.yaml:4:18: state.maxKeysPerApp: 18446744073709551615 is out of range (1 to 100000)",
        "driftwatch.yaml:6:16: attribution.concurrency: 65 is out of range (1 to 64)",
    ] {
        assert!(errors.contains(want), "missing {want:?} in:\n{errors}");
    }
    let f = Fixture::new();
    f.file("driftwatch.yaml", "history: {maxEpisodes: 10000000}\nstate: {maxKeysPerApp: 1}\nattribution: {concurrency: 64}\n");
    let rt = f.load().unwrap();
    assert_eq!((rt.retention.max_episodes, rt.state.max_keys_per_app, rt.attribution.concurrency), (10_000_000, Some(1), 64));
}

/// `state.postgres`: the URL a secret reference (redacted like every secret), the
/// schema a plain identifier, the bounds in range, and not together with `path`; each
/// refusal at its line and column.
#[test]
fn state_in_postgres_is_validated_at_load() {
    let f = Fixture::new();
    f.file("driftwatch.yaml", "state:\n  postgres:\n    url: postgres://dw:pw@db/state\n");
    let e = f.errors();
    assert!(
        e.iter().any(|e| e.contains("D/driftwatch.yaml:3:10") && e.contains("state.postgres.url") && e.contains("must reference a secret")),
        "{e:?}"
    );
    f.file(
        "driftwatch.yaml",
        "secretsFile: secrets.yaml\nstate:\n  path: s.redb\n  postgres:\n    url: $pg\n    schema: Drift-Watch\n    maxConnections: 0\n    connectTimeout: 1h\n",
    )
    .file("secrets.yaml", "pg: postgres://dw:pw@db.internal/state\n");
    let e = f.errors();
    for (at, what) in [
        ("D/driftwatch.yaml:5:5", "state.path both set"),
        ("D/driftwatch.yaml:6:13", "not a schema name"),
        ("D/driftwatch.yaml:7:21", "state.postgres.maxConnections"),
        ("D/driftwatch.yaml:8:21", "out of range (1s to 5m)"),
    ] {
        assert!(e.iter().any(|e| e.contains(at) && e.contains(what)), "{at} {what}: {e:?}");
    }
    f.file("driftwatch.yaml", "secretsFile: secrets.yaml\nstate:\n  postgres:\n    url: $pg\n    maxConnections: 16\n");
    let rt = f.load().unwrap();
    let pg = rt.state.postgres.as_ref().unwrap();
    assert_eq!((pg.schema.as_str(), pg.max_connections, pg.connect_timeout.as_secs()), ("driftwatch", 16, 10));
    assert_eq!(rt.redactor.redact("postgres://dw:pw@db.internal/state"), "***");
    assert!(!format!("{pg:?}").contains("pw@"), "{pg:?}");
}

#[test]
fn shards_are_refused_without_postgresql_with_an_audit_file_or_out_of_range() {
    let f = Fixture::new();
    f.file("driftwatch.yaml", "sharding:\n  shards: 4\n");
    let e = f.errors();
    assert!(e.iter().any(|e| e.contains("D/driftwatch.yaml:2:3") && e.contains("needs the state in PostgreSQL")), "{e:?}");
    f.file("driftwatch.yaml", "secretsFile: secrets.yaml\nstate:\n  postgres:\n    url: $pg\nsharding:\n  shards: 257\n")
        .file("secrets.yaml", "pg: postgres://dw:pw@db.internal/state\naudit-token: abcdefghijklmnopqrstuvwxyz0123456789\n");
    let e = f.errors();
    assert!(e.iter().any(|e| e.contains("D/driftwatch.yaml:6:11") && e.contains("sharding.shards")), "{e:?}");
    f.file(
        "driftwatch.yaml",
        "secretsFile: secrets.yaml\nstate:\n  postgres:\n    url: $pg\nsharding:\n  shards: 4\naudit:\n  listen: 127.0.0.1:0\n  token: $audit-token\n",
    );
    let rt = f.load().unwrap();
    assert_eq!((rt.shards, rt.audit.listen.is_some()), (4, true), "the listener with shards goes through the audit inbox");
    f.file(
        "driftwatch.yaml",
        "secretsFile: secrets.yaml\nstate:\n  postgres:\n    url: $pg\nsharding:\n  shards: 4\naudit:\n  file: /var/log/audit.log\n",
    );
    let e = f.errors();
    assert!(e.iter().any(|e| e.contains("D/driftwatch.yaml:6:3") && e.contains("audit.file")), "{e:?}");
    let long = "s".repeat(60);
    f.file(
        "driftwatch.yaml",
        &format!("secretsFile: secrets.yaml\nstate:\n  postgres:\n    url: $pg\n    schema: {long}\nsharding:\n  shards: 2\n"),
    );
    let e = f.errors();
    assert!(e.iter().any(|e| e.contains("too long for shards")), "{e:?}");
    f.file("driftwatch.yaml", "secretsFile: secrets.yaml\nstate:\n  postgres:\n    url: $pg\nsharding:\n  shards: 4\n");
    let rt = f.load().unwrap();
    assert_eq!(rt.shards, 4);
    let pg = rt.state.postgres.as_ref().unwrap();
    assert_eq!(pg.for_shard(3).schema, "driftwatch_shard_3");
    f.file("driftwatch.yaml", "secretsFile: secrets.yaml\nstate:\n  postgres:\n    url: $pg\n");
    assert_eq!(f.load().unwrap().shards, 1);
}

/// A spoke's audit feed: its token a `$key`, with `audit.listen`, its own (not the
/// hub's nor another spoke's), its identities defaulted to Argo CD's cluster account and
/// Fleet's agent; each refusal at its line.
#[test]
fn a_spokes_audit_token_needs_the_listener_and_a_token_of_its_own() {
    let f = Fixture::new();
    let config = |audit: &str, second: &str| {
        format!(
            "secretsFile: secrets.yaml\nclusters:\n  - name: edge-1\n    server: https://edge-1.example:6443\n    kubeconfig: k\n    auditToken: $edge-audit\n  - name: edge-2\n    server: https://edge-2.example:6443\n    kubeconfig: k\n    auditToken: {second}\n    auditIdentities: [system:serviceaccount:flux-system:remote-applier]\n{audit}"
        )
    };
    let listener = "audit:\n  listen: 127.0.0.1:0\n  token: $hub-audit\n";
    f.file("secrets.yaml", "edge-audit: tok-edge-1-0123456789\nedge2-audit: tok-edge-2-0123456789\nhub-audit: tok-hub-0123456789\n")
        .file("k", "apiVersion: v1\nkind: Config\n");
    f.file("driftwatch.yaml", &config(listener, "$edge2-audit"));
    let rt = f.load().unwrap();
    let feeds: Vec<(&str, &str, Vec<String>)> =
        rt.audit.spokes.iter().map(|s| (s.cluster.as_str(), s.token.expose(), s.identities.controllers.clone())).collect();
    assert_eq!(feeds[0].0, "edge-1");
    assert_eq!(feeds[0].2, clusters::DEFAULT_SPOKE_IDENTITIES.iter().map(|s| s.to_string()).collect::<Vec<_>>());
    assert_eq!((feeds[1].0, feeds[1].1), ("edge-2", "tok-edge-2-0123456789"));
    assert_eq!(feeds[1].2, ["system:serviceaccount:flux-system:remote-applier"]);
    f.file("driftwatch.yaml", &config("", "$edge2-audit"));
    let e = f.errors();
    assert!(e.iter().any(|e| e.contains("D/driftwatch.yaml:3:5") && e.contains("auditToken") && e.contains("audit.listen")), "{e:?}");
    f.file("driftwatch.yaml", &config(listener, "$hub-audit"));
    let e = f.errors();
    assert!(e.iter().any(|e| e.contains("D/driftwatch.yaml:7:5") && e.contains("another cluster's audit token")), "{e:?}");
    f.file("driftwatch.yaml", &config(listener, "tok-literal"));
    assert!(f.errors().iter().any(|e| e.contains("clusters[1].auditToken") && e.contains("must reference a secret")));
    // Matched by one spelling only, a destination spelled the other way would escape it.
    f.file("driftwatch.yaml", &config(listener, "$edge2-audit").replace("    server: https://edge-2.example:6443\n", ""));
    let e = f.errors();
    assert!(e.iter().any(|e| e.contains("D/driftwatch.yaml:7:5") && e.contains("both name and server")), "{e:?}");
    f.file("driftwatch.yaml", &config(listener, "$edge2-audit").replace("name: edge-2", "name: in-cluster"));
    assert!(f.errors().iter().any(|e| e.contains("may not be in-cluster")), "{:?}", f.errors());
    // One cluster's name is another's server: one label for two clusters.
    f.file(
        "driftwatch.yaml",
        &config(listener, "$edge2-audit")
            .replace("name: edge-2", "name: https://edge-1.example:6443")
            .replace("    server: https://edge-2.example:6443\n", "    server: https://edge-1b.example:6443\n")
            .replace("name: edge-1\n    server: https://edge-1.example:6443", "server: https://edge-1.example:6443"),
    );
    assert!(f.errors().iter().any(|e| e.contains("configured twice")), "{:?}", f.errors());
    // Without the hub's token a client certificate alone would say "the hub".
    f.file("driftwatch.yaml", &config("audit:\n  listen: 127.0.0.1:0\n", "$edge2-audit"));
    assert!(f.errors().iter().any(|e| e.contains("needs audit.token")), "{:?}", f.errors());
}
