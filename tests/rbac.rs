//! Least privilege of the RBAC the project ships, as plain manifests (`deploy/`) and as
//! the Helm chart renders it (`tests/helm/`): no rule reads Secrets or wildcard
//! resources apart from the one marked opt-in, every kind the classifier knows is
//! covered by the attribution rules (or deliberately not read), and the service account
//! holds what the daemon needs: the watch, attribution, the Lease.

mod common;

use common::rbac::{CHART_RENDERS, Install, Role, Rule, roles, rules_of, service_account_rules, shipped_roles};
use driftwatch::cluster::live::AGGREGATE_LABEL;
use driftwatch::drift::classes::{KNOWN_KINDS, NOT_READ_BY_DEFAULT};

const READ_VERBS: &[&str] = &["get", "list", "watch", "*"];

fn reads(rule: &Rule) -> bool {
    rule.verbs.iter().any(|v| READ_VERBS.contains(&v.as_str()))
}

/// What is wrong with a set of roles, one line per offending rule (empty: nothing).
fn violations(roles: &[Role]) -> Vec<String> {
    let mut out = Vec::new();
    for role in roles {
        let at = format!("{} ({} {})", role.file.display(), role.kind, role.name);
        for (i, r) in role.rules.iter().enumerate() {
            if r.verbs.iter().any(|v| v == "*") {
                out.push(format!("{at} rule {i}: verbs: [\"*\"]"));
            }
            if reads(r) && r.resources.iter().any(|res| res.contains('*')) {
                out.push(format!("{at} rule {i}: reads wildcard resources {:?} in {:?}", r.resources, r.groups));
            }
            let core = r.groups.iter().any(|g| g.is_empty() || g == "*");
            let secrets = r.resources.iter().any(|res| res == "secrets" || res.starts_with("secrets/") || res == "*");
            if reads(r) && core && secrets && !role.opt_in {
                out.push(format!("{at} rule {i}: reads secrets without being the marked opt-in"));
            }
        }
        if role.opt_in {
            let only_secret_get =
                role.rules.iter().all(|r| r.groups == [""] && r.resources == ["secrets"] && r.verbs == ["get"]) && !role.rules.is_empty();
            if !only_secret_get {
                out.push(format!("{at}: the opt-in grants more than get on secrets"));
            }
        }
    }
    out
}

#[test]
fn no_shipped_rule_reads_secrets_or_wildcard_resources() {
    let roles = shipped_roles();
    assert!(roles.len() >= 4, "the shipped roles were not found: {roles:?}");
    let bad = violations(&roles);
    assert!(bad.is_empty(), "{bad:#?}");
    assert_eq!(
        roles
            .iter()
            .filter(|r| r.opt_in)
            .map(|r| r.name.as_str())
            .collect::<std::collections::BTreeSet<_>>()
            .into_iter()
            .collect::<Vec<_>>(),
        ["driftwatch-argocd-cluster-secrets", "driftwatch-attribution-secrets"],
        "the opt-in roles: attribution-secrets.yaml and argocd-cluster-secrets.yaml"
    );

    // As applied: the service account cannot read a Secret unless the opt-in is too.
    let default = service_account_rules(false);
    for verb in ["get", "list", "watch"] {
        assert!(!default.iter().any(|r| r.allows("", "secrets", verb, Some("payments"))), "{verb} secrets: {default:#?}");
        assert!(!default.iter().any(|r| r.allows("", "secrets", verb, None)), "{verb} secrets cluster-wide");
    }
    let opted_in = service_account_rules(true);
    assert!(opted_in.iter().any(|r| r.allows("", "secrets", "get", Some("payments"))), "the opt-in allows get on secrets");
    assert!(!opted_in.iter().any(|r| r.allows("", "secrets", "list", Some("payments"))), "but never list");
}

/// The checker above catches what the first release shipped (`get` on `*/*`) and a
/// Secret read smuggled into an ordinary role.
#[test]
fn the_checker_catches_wildcards_and_secret_reads() {
    let role = |rules: Vec<Rule>, opt_in: bool| Role {
        file: "x.yaml".into(),
        kind: "ClusterRole".into(),
        name: "r".into(),
        namespace: None,
        labels: Default::default(),
        opt_in,
        rules,
        aggregates: Vec::new(),
    };
    let rule =
        |g: &str, r: &str, v: &str| Rule { groups: vec![g.into()], resources: vec![r.into()], verbs: vec![v.into()], namespace: None };
    assert_eq!(violations(&[role(vec![rule("*", "*", "get")], false)]).len(), 2, "wildcard resources that include secrets");
    assert_eq!(violations(&[role(vec![rule("", "secrets", "list")], false)]).len(), 1);
    assert_eq!(violations(&[role(vec![rule("", "secrets", "get")], true)]).len(), 0, "the marked opt-in");
    assert_eq!(violations(&[role(vec![rule("", "secrets", "get"), rule("", "configmaps", "get")], true)]).len(), 1);
    assert_eq!(violations(&[role(vec![rule("apps", "deployments", "*")], false)]).len(), 1);
    assert!(violations(&[role(vec![rule("apps", "deployments", "get")], false)]).is_empty());
}

/// Every install the tests check: the plain manifests and each chart render.
fn installs() -> Vec<Install> {
    std::iter::once(Install::Manifests).chain(CHART_RENDERS.iter().map(|n| Install::Chart(n))).collect()
}

#[test]
fn the_chart_grants_no_more_than_the_manifests() {
    for install in installs() {
        let roles = roles(install);
        assert!(roles.len() >= 3, "{install:?}: the roles were not found: {roles:?}");
        let bad = violations(&roles);
        assert!(bad.is_empty(), "{install:?}: {bad:#?}");
        let default = rules_of(install, false);
        assert!(!default.iter().any(|r| r.allows("", "secrets", "get", Some("payments"))), "{install:?}: get secrets");
    }
    // Every permission a render grants (without the opt-in) the manifests grant too.
    let manifests = rules_of(Install::Manifests, false);
    for name in CHART_RENDERS {
        for r in rules_of(Install::Chart(name), false) {
            for g in &r.groups {
                for res in &r.resources {
                    for v in &r.verbs {
                        assert!(
                            manifests.iter().any(|m| m.allows(g, res, v, r.namespace.as_deref())),
                            "the {name} render grants {v} on {res}.{g} in {:?}, the manifests do not",
                            r.namespace
                        );
                    }
                }
            }
        }
    }
    // The default render has no opt-in; the `ha` render turns it on, as a marked role.
    assert_eq!(roles(Install::Chart("default")).iter().filter(|r| r.opt_in).count(), 0);
    assert_eq!(roles(Install::Chart("ha")).iter().filter(|r| r.opt_in).count(), 1);
    assert!(rules_of(Install::Chart("ha"), true).iter().any(|r| r.allows("", "secrets", "get", Some("payments"))));
}

#[test]
fn every_classified_kind_is_covered_or_deliberately_not_read() {
    for install in installs() {
        classified_kinds_covered(install);
    }
}

fn classified_kinds_covered(install: Install) {
    let rules = rules_of(install, false);
    let mut missing = Vec::new();
    for (group, kind, resource, _class) in KNOWN_KINDS {
        let allowed = rules.iter().any(|r| r.allows(group, resource, "get", Some("any-namespace")))
            && rules.iter().any(|r| r.allows(group, resource, "get", None));
        let not_read = NOT_READ_BY_DEFAULT.contains(&(*group, *kind));
        match (allowed, not_read) {
            (true, true) => missing.push(format!("{kind} ({resource}.{group}) is readable but listed as not read by default")),
            (false, false) => missing.push(format!("{kind} ({resource}.{group}) is classified but the attribution rules do not allow get")),
            _ => {}
        }
        // Attribution asks for one object by name; nothing needs list or watch on them.
        if !not_read {
            assert!(!rules.iter().any(|r| r.allows(group, resource, "list", None)), "list {resource}.{group} is more than needed");
        }
    }
    assert!(missing.is_empty(), "{install:?}: {missing:#?}");
}

#[test]
fn the_service_account_holds_what_the_daemon_needs() {
    for install in [Install::Manifests, Install::Chart("ha")] {
        let rules = rules_of(install, false);
        for resource in ["applications", "appprojects"] {
            for verb in ["list", "watch"] {
                assert!(rules.iter().any(|r| r.allows("argoproj.io", resource, verb, None)), "{install:?}: {verb} {resource}");
            }
        }
        // Flux's and Fleet's units (watched where their CRDs are served).
        for (group, resource) in [
            ("kustomize.toolkit.fluxcd.io", "kustomizations"),
            ("helm.toolkit.fluxcd.io", "helmreleases"),
            ("fleet.cattle.io", "bundledeployments"),
        ] {
            for verb in ["list", "watch"] {
                assert!(rules.iter().any(|r| r.allows(group, resource, verb, None)), "{install:?}: {verb} {resource}.{group}");
            }
        }
        for verb in ["get", "list", "create", "update", "delete"] {
            assert!(rules.iter().any(|r| r.allows("coordination.k8s.io", "leases", verb, Some("argocd"))), "{install:?}: {verb} leases");
        }
        assert!(!rules.iter().any(|r| r.allows("coordination.k8s.io", "leases", "update", Some("kube-system"))), "{install:?}");
    }
    // One replica needs no Lease.
    let single = rules_of(Install::Chart("default"), false);
    assert!(!single.iter().any(|r| r.allows("coordination.k8s.io", "leases", "update", Some("argocd"))), "no Lease for one replica");
    let rules = service_account_rules(false);
    for resource in ["applications", "appprojects"] {
        for verb in ["list", "watch"] {
            assert!(rules.iter().any(|r| r.allows("argoproj.io", resource, verb, None)), "{verb} {resource} in all namespaces");
        }
    }
    for verb in ["get", "list", "create", "update", "delete"] {
        assert!(rules.iter().any(|r| r.allows("coordination.k8s.io", "leases", verb, Some("argocd"))), "{verb} leases in argocd");
    }
    assert!(!rules.iter().any(|r| r.allows("coordination.k8s.io", "leases", "update", Some("kube-system"))), "the Lease only in argocd");
    // The attribution role is aggregated by the label driftwatch documents and logs.
    let roles = shipped_roles();
    let aggregated = roles.iter().find(|r| r.name == "driftwatch-attribution").expect("driftwatch-attribution");
    assert!(aggregated.aggregates.iter().any(|sel| sel.get(AGGREGATE_LABEL).and_then(|v| v.as_str()) == Some("true")), "{aggregated:?}");
}

/// The configuration each chart render mounts is one driftwatch loads: the settings the
/// chart owns (`secretsFile`, `attribution`) land where driftwatch reads them.
#[test]
fn the_charts_configuration_loads() {
    for name in CHART_RENDERS {
        let objects = common::rbac::objects(Install::Chart(name));
        let cm = objects.iter().find(|(_, o)| o["kind"] == "ConfigMap").map(|(_, o)| o.clone()).expect("a ConfigMap");
        let text = cm["data"]["driftwatch.yaml"].as_str().expect("driftwatch.yaml");
        let dir = tempfile::tempdir().unwrap();
        // The Secret the chart mounts at /etc/driftwatch/secrets, here a directory.
        let secrets = dir.path().join("secrets");
        std::fs::create_dir(&secrets).unwrap();
        std::fs::write(secrets.join("slack-token"), "xoxb-test").unwrap();
        // The token the chart generates into a Secret of its own (projected beside).
        std::fs::write(secrets.join("operations-token"), "generated-operations-token-0123456789").unwrap();
        // A ConfigMap of trigger files mounted with extraVolumes (the `ha` render).
        let triggers = dir.path().join("mounted-triggers");
        std::fs::create_dir(&triggers).unwrap();
        std::fs::write(
            triggers.join("on-anything.yaml"),
            "- when: app.status.sync.status == \"Unknown\"\n  send: [app-sync-status-unknown]\n",
        )
        .unwrap();
        let path = dir.path().join("driftwatch.yaml");
        let text = text
            .replace("/etc/driftwatch/secrets", &secrets.display().to_string())
            .replace("/etc/driftwatch/triggers", &triggers.display().to_string());
        std::fs::write(&path, &text).unwrap();
        let rt = driftwatch::config::load(Some(&path)).unwrap_or_else(|e| panic!("{name}: {e:?}\n{text}"));
        assert_eq!(rt.triggers.contains_key("on-anything"), *name == "ha", "{name}: the mounted trigger files are read");
        let v: serde_json::Value = serde_saphyr::from_str(&text).unwrap();
        assert_eq!(v["attribution"]["readSecrets"], *name == "ha", "{name}: {text}");
        let mounted = v["secretsFile"].as_str().map(|p| p.ends_with("/secrets"));
        assert_eq!(mounted, Some(true), "{name}: {text}");
        // Review M5: the history is closed to whoever lacks the generated token.
        assert_eq!(
            rt.operations_token.as_ref().map(|t| t.expose().to_string()).as_deref(),
            Some("generated-operations-token-0123456789"),
            "{name}: {text}"
        );
        assert!(!rt.operations_open, "{name}");
    }
}

/// Both install paths ship a NetworkPolicy for the daemon's pods that opens only the
/// operations port, to named peers (not the whole cluster) — and, where the chart
/// exposes the audit webhook, its port to the peers `audit.ingressFrom` names.
#[test]
fn both_install_paths_ship_a_network_policy_opening_only_the_operations_port() {
    use common::rbac::objects;
    let installs = [Install::Manifests].into_iter().chain(CHART_RENDERS.iter().map(|n| Install::Chart(n)));
    for install in installs {
        let policies: Vec<serde_json::Value> =
            objects(install).into_iter().map(|(_, o)| o).filter(|o| o["kind"] == "NetworkPolicy").collect();
        assert_eq!(policies.len(), 1, "{install:?}: one NetworkPolicy");
        let spec = &policies[0]["spec"];
        assert_eq!(spec["podSelector"]["matchLabels"]["app.kubernetes.io/name"], "driftwatch", "{install:?}");
        assert!(spec["policyTypes"].as_array().unwrap().iter().any(|t| t == "Ingress"), "{install:?}");
        let rules = spec["ingress"].as_array().unwrap();
        assert_eq!(rules[0]["ports"], serde_json::json!([{"port": "metrics", "protocol": "TCP"}]), "{install:?}");
        assert!(!rules[0]["from"].as_array().unwrap().is_empty(), "{install:?}: named peers, not everyone");
        match rules.get(1) {
            None => assert_eq!(rules.len(), 1, "{install:?}"),
            Some(audit) => {
                assert_eq!(rules.len(), 2, "{install:?}");
                assert!(matches!(install, Install::Chart("ha")), "{install:?}: only the render with audit enabled opens its port");
                assert_eq!(audit["ports"], serde_json::json!([{"port": "audit", "protocol": "TCP"}]), "{install:?}");
                assert_eq!(
                    audit["from"],
                    serde_json::json!([{"ipBlock": {"cidr": "10.0.0.0/24"}}]),
                    "{install:?}: the API server's addresses"
                );
            }
        }
    }
}

/// A spoke cluster's identity (`deploy/spoke/`) reads what the hub's attribution reads,
/// no more: the same `get` rules, no Secrets, no list or watch, nothing of Argo CD's.
#[test]
fn a_spoke_reads_with_the_same_rules_as_the_hub() {
    let roles = shipped_roles();
    let named = |name: &str| roles.iter().find(|r| r.name == name).unwrap_or_else(|| panic!("{name} is not shipped"));
    let hub = named("driftwatch-attribution-default");
    let spoke = named("driftwatch-spoke-default");
    assert!(spoke.file.ends_with("deploy/spoke/rbac.yaml"), "{:?}", spoke.file);
    assert_eq!(format!("{:?}", spoke.rules), format!("{:?}", hub.rules), "the spoke's rules and the hub's attribution rules differ");
    assert_eq!(spoke.labels.get(AGGREGATE_LABEL).and_then(|v| v.as_str()), Some("true"));
    let reader = named("driftwatch-spoke-reader");
    assert_eq!(reader.aggregates.len(), 1, "aggregated like the hub's, so a kind is added the same way");
    assert!(spoke.rules.iter().all(|r| r.verbs == ["get"]), "get only: {:?}", spoke.rules);
    assert!(!spoke.rules.iter().any(|r| r.groups.iter().any(|g| g == "argoproj.io")));
}
