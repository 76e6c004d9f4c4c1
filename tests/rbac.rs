//! Least privilege of the RBAC the project ships (`deploy/`): no rule reads Secrets or
//! wildcard resources apart from the one marked opt-in, every kind the classifier
//! knows is covered by the attribution rules (or deliberately not read), and the
//! service account holds what the daemon needs: the watch, attribution, the Lease.

mod common;

use common::rbac::{Role, Rule, service_account_rules, shipped_roles};
use driftwatch::live::AGGREGATE_LABEL;
use driftwatch::route::classes::{KNOWN_KINDS, NOT_READ_BY_DEFAULT};

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
    assert_eq!(roles.iter().filter(|r| r.opt_in).count(), 1, "exactly one opt-in role (attribution-secrets.yaml)");

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

#[test]
fn every_classified_kind_is_covered_or_deliberately_not_read() {
    let rules = service_account_rules(false);
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
    assert!(missing.is_empty(), "{missing:#?}");
}

#[test]
fn the_service_account_holds_what_the_daemon_needs() {
    let rules = service_account_rules(false);
    for resource in ["applications", "appprojects"] {
        for verb in ["list", "watch"] {
            assert!(rules.iter().any(|r| r.allows("argoproj.io", resource, verb, None)), "{verb} {resource} in all namespaces");
        }
    }
    for verb in ["get", "create", "update"] {
        assert!(rules.iter().any(|r| r.allows("coordination.k8s.io", "leases", verb, Some("argocd"))), "{verb} leases in argocd");
    }
    assert!(!rules.iter().any(|r| r.allows("coordination.k8s.io", "leases", "update", Some("kube-system"))), "the Lease only in argocd");
    // The attribution role is aggregated by the label driftwatch documents and logs.
    let roles = shipped_roles();
    let aggregated = roles.iter().find(|r| r.name == "driftwatch-attribution").expect("driftwatch-attribution");
    assert!(aggregated.aggregates.iter().any(|sel| sel.get(AGGREGATE_LABEL).and_then(|v| v.as_str()) == Some("true")), "{aggregated:?}");
}
