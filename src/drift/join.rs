//! Joining what the audit input saw to an Application's drift: each attempt classified
//! (its class and security fields, for a resource or for the Application itself), and
//! the person behind each drifted field named by the fields their request set.

use std::collections::BTreeSet;

use super::audit::{self, Attempt, Decision};
use super::classes::{ClassMap, MAX_ATTRIBUTION_ENTRIES, SECURITY_CLASSES};
use super::{AttributedChange, Drift, is_security_field};
use crate::model::Severity;

impl Drift {
    /// Adds what the audit input saw of this Application (`attempts`, newest first):
    /// each attempt classified; a drifted resource's attribution gains the person
    /// behind the write (or an entry of its own when the live read has not shown the
    /// manager, or self-heal erased it); a security field set by an allowed request
    /// makes the drift a security drift at once, before any live read.
    pub fn with_attempts(mut self, attempts: &[Attempt], classes: &ClassMap) -> Drift {
        if attempts.is_empty() {
            return self;
        }
        let mut attributed_security = false;
        // Changes and attribution entries whose person this function named (and may
        // name another beside: "alice or mallory").
        let mut named: BTreeSet<(usize, usize)> = BTreeSet::new();
        let mut named_entries: BTreeSet<usize> = BTreeSet::new();
        for a in attempts {
            let mut a = a.clone();
            classify(&mut a, classes);
            let at = self.resources.iter().position(|r| a.is_on(&r.object));
            if a.decision == Decision::Allowed
                && let Some(ri) = at
            {
                let r = &mut self.resources[ri];
                if !a.security_fields.is_empty() {
                    attributed_security = true;
                    if !matches!(r.kind_class.as_str(), "rbac" | "network-policy" | "admission") {
                        r.class = "security-context".into();
                    }
                }
                // The person behind each changed field this request wrote: by the fields
                // it set, not by the field manager alone (two people's `kubectl edit`
                // share one manager); both named when both wrote it.
                let who = &a.actor.username;
                for (ci, c) in r.changes.iter_mut().enumerate() {
                    if !wrote(&a, std::slice::from_ref(&c.path), &c.manager) {
                        continue;
                    }
                    if c.user.is_empty() {
                        c.user = who.clone();
                        named.insert((ri, ci));
                    } else if named.contains(&(ri, ci))
                        && !c.user.split(" or ").any(|u| u == who)
                        && c.user.matches(" or ").count() < MAX_NAMED - 1
                    {
                        c.user = format!("{} or {who}", c.user);
                    }
                }
                let resource = format!("{} {}/{}", r.object.kind, r.object.namespace, r.object.name);
                let mut matched = false;
                for (i, c) in self.attribution.iter_mut().enumerate().filter(|(_, c)| c.resource == resource) {
                    if !wrote(&a, &c.fields, &c.manager) {
                        continue;
                    }
                    matched = true;
                    match &c.actor {
                        None => {
                            c.actor = Some(a.actor.clone());
                            c.audit_id = a.audit_id.clone();
                            named_entries.insert(i);
                        }
                        Some(first)
                            if named_entries.contains(&i)
                                && first.username != *who
                                && !c.also.contains(who)
                                && c.also.len() < MAX_NAMED - 1 =>
                        {
                            c.also.push(who.clone())
                        }
                        Some(_) => {}
                    }
                }
                if !matched && self.attribution.len() < MAX_ATTRIBUTION_ENTRIES {
                    self.attribution.push(AttributedChange::from_attempt(&a));
                }
            }
            self.attempts.push(a);
        }
        // A sync written directly by a person (not through Argo CD's API, whose server
        // identity is one of `audit.argocdIdentities`): that person started it, whatever
        // its `initiatedBy` says. The newest such write not after the operation began.
        if let Some(op) = self.operation.as_mut() {
            let wrote_operation = |a: &&Attempt| {
                a.app_spec && a.decision == Decision::Allowed && a.fields.iter().any(|f| f == "operation" || f.starts_with("operation."))
            };
            if let Some(a) = self.attempts.iter().filter(wrote_operation).find(|a| op.began_after(a.time)) {
                op.written_by(&a.actor.display());
            }
        }
        if attributed_security {
            self.classes = self.resources.iter().map(|r| r.class.clone()).collect::<BTreeSet<_>>().into_iter().collect();
            self.security = true;
            if self.severity.is_some() {
                self.severity = Some(Severity::Critical);
            }
        }
        AttributedChange::sort(&mut self.attribution);
        self
    }
}

/// At most this many people are named for one write ("alice or mallory or …").
const MAX_NAMED: usize = 4;

/// Whether the allowed request `a` wrote what a field manager's write shows (`paths`
/// under `manager`): a request whose body was read by the fields it set overlapping
/// those paths (and its field manager, when it named one, being that one); a request
/// whose body was not sent (or a write whose fields are not known) by the field
/// manager alone.
fn wrote(a: &Attempt, paths: &[String], manager: &str) -> bool {
    if a.fields.is_empty() || paths.is_empty() {
        // Without `?fieldManager=` the API server names the manager after the client
        // (the user agent up to its first `/`).
        let effective = if a.manager.is_empty() { a.actor.user_agent.split('/').next().unwrap_or_default() } else { &a.manager };
        return !effective.is_empty() && effective == manager;
    }
    (a.manager.is_empty() || a.manager == manager) && a.fields.iter().any(|f| paths.iter().any(|p| overlaps(f, p)))
}

/// Whether one field path is the other or holds it (`a.b` holds `a.b.c` and `a.b[x]`).
fn overlaps(a: &str, b: &str) -> bool {
    let holds = |outer: &str, inner: &str| {
        inner.strip_prefix(outer).is_some_and(|rest| rest.is_empty() || rest.starts_with('.') || rest.starts_with('['))
    };
    holds(a, b) || holds(b, a)
}

/// Whether `path` of an Application is one of [`APP_SECURITY_FIELDS`], or holds one
/// (a write of `metadata.annotations` whole, a removal of `spec`).
pub(crate) fn app_security_field(path: &str) -> bool {
    APP_SECURITY_FIELDS
        .iter()
        .any(|f| path.starts_with(f) || f.strip_prefix(path).is_some_and(|rest| rest.starts_with('.')) || f.trim_end_matches('/') == path)
}

/// Fields of a unit (an Application, a Flux or Fleet unit: the lists are kept apart
/// by their names, which the other engines' objects do not have) whose write by a
/// person weakens what its engine enforces or what driftwatch tells: self-heal and pruning, the project, where it deploys; what it
/// deploys (its sources: a repository, a revision, inline Helm values or Kustomize
/// patches written past Git's review), what Argo CD ignores of the live objects; a
/// sync operation written directly (any revision, past Argo CD's RBAC and Git's
/// review); its status (what driftwatch reads: the CRD has no status subresource);
/// where its notifications go; whether Argo CD reconciles it at all, its labels (what
/// routes select it by) and finalizers.
const APP_SECURITY_FIELDS: &[&str] = &[
    // Argo CD stops reconciling it (its status then stays as it was).
    "metadata.annotations.argocd.argoproj.io/skip-reconcile",
    // What routes and subscriptions select it by; what keeps its resources on delete.
    "metadata.labels",
    "metadata.finalizers",
    "spec.syncPolicy",
    "spec.project",
    "spec.destination",
    "spec.source",
    "spec.sources",
    "spec.sourceHydrator",
    "spec.ignoreDifferences",
    "operation",
    "status",
    "metadata.annotations.notifications.argoproj.io/",
    "metadata.annotations.driftwatch.io/",
    // A Flux unit: reconciling paused, who it applies as and where, what it prunes or
    // forces, what it applies (its source, path, patches, substitutions, a
    // HelmRelease's chart and values written past Git's review), whether
    // helm-controller looks for drift at all.
    "spec.suspend",
    "spec.serviceAccountName",
    "spec.kubeConfig",
    "spec.prune",
    "spec.force",
    "spec.sourceRef",
    "spec.path",
    "spec.patches",
    "spec.postBuild",
    "spec.targetNamespace",
    "spec.driftDetection",
    "spec.values",
    "spec.valuesFrom",
    "spec.chart",
    "spec.chartRef",
    // A Fleet BundleDeployment: paused, its options (Helm values, drift correction, the
    // account it applies as), which deployment it is.
    "spec.paused",
    "spec.options",
    "spec.stagedOptions",
    "spec.deploymentID",
    "spec.stagedDeploymentID",
];

/// The fields of a Flux or Fleet unit (or of an input it reads) whose write by a person
/// changes nothing it applies: asking Flux for a reconcile now (`flux reconcile`).
fn unit_harmless_field(path: &str) -> bool {
    path == "metadata.annotations.reconcile.fluxcd.io/requestedAt"
}

/// An attempt's class and security, from the class map and the fields it set (done
/// when the audit input records it, so coalescing can compare classes, and again per
/// pass, with the configuration of the pass).
pub(crate) fn classify(a: &mut Attempt, classes: &ClassMap) {
    let kind_class = if a.app_spec { "application" } else { classes.class_of(&a.object.group, &a.object.kind) };
    a.security_fields = if a.app_spec && a.object.group != "argoproj.io" {
        // A Flux or Fleet unit, or an input it reads (its source, its values), by a
        // person: every field decides what is applied, so every write is one, but for
        // the few that change nothing (an allow-list, not a deny-list: a new field of
        // their CRDs fails closed). A Secret's body is never read: what it set is not
        // known, and the write is taken as one.
        // A body cut past the fields shown (padded with harmless ones) or not logged at
        // all is not known, and taken as a security write.
        match a.fields.iter().filter(|p| !unit_harmless_field(p)).cloned().collect::<Vec<_>>() {
            set if set.is_empty() && matches!(a.body.as_str(), "dropped" | "not-sent") => vec!["(what was written: not known)".to_string()],
            mut set if a.truncated => {
                set.push("(more fields than shown)".to_string());
                set
            }
            set => set,
        }
    } else if a.app_spec {
        a.fields.iter().filter(|p| app_security_field(p)).cloned().collect()
    } else {
        a.fields.iter().filter(|p| is_security_field(kind_class, p)).cloned().collect()
    };
    if a.body == audit::OVER_LIMIT {
        // What it set was left out for size (an attacker can pad a write past the
        // bound): not known, so taken as a security write.
        a.security_fields = vec!["(request over audit.maxBodyBytes)".to_string()];
    } else if a.fields.iter().any(|f| f == audit::NOT_ALL_READ) {
        // Its body was not walked to the end: the same.
        a.security_fields.push(audit::NOT_ALL_READ.to_string());
    }
    // Deleting the Application (its resources stay, unwatched, with `--cascade=orphan`).
    if a.app_spec && matches!(a.verb.as_str(), "delete" | "deletecollection") && a.security_fields.is_empty() {
        a.security_fields.push("(the Application deleted)".to_string());
    }
    a.class = match (a.app_spec, a.security_fields.is_empty()) {
        // A write to the Application that weakens what Argo CD enforces is of the
        // `application` class (a security class, which the security routes list); one
        // that does not (a label, a link) is `other`.
        (true, false) => "application".to_string(),
        (true, true) => "other".to_string(),
        (false, false) if !matches!(kind_class, "rbac" | "network-policy" | "admission") => "security-context".to_string(),
        (false, _) => kind_class.to_string(),
    };
    a.security = SECURITY_CLASSES.contains(&a.class.as_str()) || !a.security_fields.is_empty();
}
