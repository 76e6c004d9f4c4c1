//! Fluent fixtures for Applications (`App::test().out_of_sync().healthy()...`) shared by
//! the integration tests.
#![allow(dead_code)]

pub mod apiserver;
pub mod audited;
pub mod control_plane;
pub mod daemon;
pub mod elasticsearch;
pub mod ocsf;
pub mod rbac;
pub mod receiver;
pub mod tls;

use serde_json::{Value, json};

/// The `drift` template (a message, and a webhook body with the Application's name and
/// revision) and the `on-drift` trigger (OutOfSync, once per revision) that the
/// acceptance tests and the live benchmark append to their services.
pub const DRIFT_TRIGGER: &str = r#"templates:
  drift:
    message: "{{app.metadata.name}} drifted"
    webhook:
      hook:
        body: '{"app": "{{app.metadata.name}}", "rev": "{{app.status.sync.revision}}"}'
triggers:
  on-drift:
    - when: app.status.sync.status == "OutOfSync"
      oncePer: app.status.sync.revision
      send: [drift]
"#;

/// A signed-webhook SIEM service on the receiver at `PORT` and the route that pages
/// security drift to it (`siem:page`); a test appends its own routes and settings.
pub const SIEM_AND_SECURITY_PAGE: &str = r#"services:
  siem:
    type: signed-webhook
    url: http://127.0.0.1:PORT
    secret: test-hmac-key
    retry: {initialBackoff: 100ms, maxBackoff: 500ms}
routes:
  - name: security-page
    match: {class: [rbac, network-policy, security-context, admission]}
    triggers: [on-security-drift]
    recipients: [siem:page]
    continue: true
"#;

/// The `hook` webhook service on the receiver at `PORT`, and the `on-attempt` trigger
/// routed to it: each audited change or refused attempt (`drift.attempts[0]`) as one
/// JSON body with who, what and how it was decided. A test appends its `secretsFile`
/// and `audit:` settings.
pub const ATTEMPT_ALERT: &str = r#"services:
  hook:
    type: webhook
    url: http://127.0.0.1:PORT
templates:
  attempt:
    message: attempt
    webhook:
      hook:
        body: '{"who": {{json drift.attempts.[0].actor.username}}, "groups": {{json drift.attempts.[0].actor.groups}}, "decision": {{json drift.attempts.[0].decision}}, "code": {{json drift.attempts.[0].code}}, "class": {{json drift.attempts.[0].class}}, "security": {{json drift.attempts.[0].security}}, "reason": {{json drift.attempts.[0].reason}}, "set": {{json drift.attempts.[0].set}}, "resource": {{json drift.attempts.[0].resource}}, "app": {{json app.metadata.name}}, "argocdManager": {{json drift.attempts.[0].argocdManager}}, "episode": {{json episode.resolution}}, "severity": {{json episode.severity}}}'
triggers:
  on-attempt:
    - when: drift.attempts.len() > 0
      oncePer: drift.attempts[0].id
      send: [attempt]
routes:
  - name: attempts
    triggers: [on-attempt]
    recipients: [hook]
"#;

/// PagerDuty (`oncall`, at `pd`) and a Slack incident channel (`incident`, at
/// `incident`), and the routes of a break-glass policy: security drift under a verified
/// exception to the incident channel, other security drift paged, an overdue exception
/// paged; the people of group `sre` may approve. A test appends its `secretsFile` and
/// `audit:` settings.
pub fn break_glass_routes(pd: u16, incident: u16) -> String {
    format!(
        r#"services:
  oncall:
    type: pagerduty
    apiUrl: http://127.0.0.1:{pd}
    routingKeys: {{platform: R0UTINGKEY}}
    retry: {{initialBackoff: 100ms, maxBackoff: 300ms}}
  incident:
    type: slack
    webhookUrl: http://127.0.0.1:{incident}
    retry: {{initialBackoff: 100ms, maxBackoff: 300ms}}
routes:
  - name: break-glass
    match: {{breakGlass: true}}
    triggers: [on-security-drift]
    recipients: [incident]
    continue: true
  - name: security-page
    match: {{class: [rbac, network-policy, security-context, admission]}}
    triggers: [on-security-drift]
    recipients: [oncall:platform]
    continue: true
  - name: overdue
    triggers: [on-break-glass-overdue]
    recipients: [oncall:platform]
breakGlass:
  approvers:
    groups: [sre]
"#
    )
}

/// The template of the catalog's `on-reconcile-failed` made to say, on the `hook`
/// webhook, which unit failed, the controller's reason and message and the revision
/// attempted (`rev`): an entry for a configuration's `templates:` (the built-in one has no
/// webhook body).
pub const RECONCILE_FAILED_TEMPLATE: &str = r#"  unit-reconcile-failed:
    message: "{{unit.kind}} {{unit.namespace}}/{{unit.name}} failed to reconcile: {{unit.reconcile.reason}}"
    webhook:
      hook:
        body: '{"unit": {{json unit.name}}, "kind": {{json unit.kind}}, "reason": {{json unit.reconcile.reason}}, "message": {{json unit.reconcile.message}}, "rev": {{json unit.revision.desired}}, "resolved": {{#if resolved}}true{{else}}false{{/if}}}'
"#;

/// The catalog's `on-reconcile-failed` sent to `hook` for every Flux unit: a
/// configuration-level subscription.
pub const FLUX_SUBSCRIPTION: &str = "subscriptions:\n  - recipients: [hook]\n    triggers: [on-reconcile-failed]\n    engine: flux\n";

/// A Flux Kustomization in `flux-system` as kustomize-controller leaves it after applying
/// `revision`: its spec, `managedFields` (the client's apply, the controller's status),
/// `Ready=True`, and an inventory of `inventory` objects.
pub fn kustomization(name: &str, revision: &str, inventory: usize) -> Value {
    let entries: Vec<Value> = (0..inventory)
        .map(|i| match i % 4 {
            0 => json!({"id": format!("{name}_{name}-{i}_apps_Deployment"), "v": "v1"}),
            1 => json!({"id": format!("{name}_{name}-{i}__Service"), "v": "v1"}),
            2 => json!({"id": format!("{name}_{name}-{i}__ConfigMap"), "v": "v1"}),
            _ => json!({"id": format!("{name}_{name}-{i}_networking.k8s.io_NetworkPolicy"), "v": "v1"}),
        })
        .collect();
    json!({
        "apiVersion": "kustomize.toolkit.fluxcd.io/v1", "kind": "Kustomization",
        "metadata": {"name": name, "namespace": "flux-system", "uid": format!("uid-ks-{name}"), "generation": 1,
            "labels": {"kustomize.toolkit.fluxcd.io/name": "flux-system", "kustomize.toolkit.fluxcd.io/namespace": "flux-system"},
            "finalizers": ["finalizers.fluxcd.io"],
            "managedFields": [
                {"manager": "kustomize-controller", "operation": "Apply", "apiVersion": "kustomize.toolkit.fluxcd.io/v1",
                 "time": "2026-12-07T09:00:00Z", "fieldsType": "FieldsV1",
                 "fieldsV1": {"f:metadata": {"f:labels": {"f:kustomize.toolkit.fluxcd.io/name": {}, "f:kustomize.toolkit.fluxcd.io/namespace": {}}},
                              "f:spec": {"f:interval": {}, "f:path": {}, "f:prune": {}, "f:sourceRef": {"f:kind": {}, "f:name": {}}, "f:targetNamespace": {}}}},
                {"manager": "kustomize-controller", "operation": "Update", "apiVersion": "kustomize.toolkit.fluxcd.io/v1",
                 "time": "2026-12-07T09:00:30Z", "fieldsType": "FieldsV1", "subresource": "status",
                 "fieldsV1": {"f:status": {"f:conditions": {}, "f:inventory": {"f:entries": {}}, "f:lastAppliedRevision": {},
                              "f:lastAttemptedRevision": {}, "f:observedGeneration": {}}}}
            ]},
        "spec": {"interval": "10m", "path": format!("./apps/{name}"), "prune": true, "wait": true, "timeout": "5m",
                 "targetNamespace": name, "sourceRef": {"kind": "GitRepository", "name": "flux-system"}},
        "status": {
            "observedGeneration": 1, "lastAppliedRevision": revision, "lastAttemptedRevision": revision,
            "lastHandledReconcileAt": "2026-12-07T09:00:00Z",
            "conditions": [{"type": "Ready", "status": "True", "reason": "ReconciliationSucceeded",
                            "message": format!("Applied revision: {revision}"), "lastTransitionTime": "2026-12-07T09:00:30Z",
                            "observedGeneration": 1}],
            "inventory": {"entries": entries}
        }
    })
}

/// `k` after a reconcile of `attempted` failed: `Ready=False` with kustomize-controller's
/// `reason` and `message`; the revision applied stays.
pub fn reconcile_failed(mut k: Value, reason: &str, message: &str, attempted: &str) -> Value {
    k["status"]["lastAttemptedRevision"] = json!(attempted);
    k["status"]["conditions"] = json!([{"type": "Ready", "status": "False", "reason": reason, "message": message,
        "lastTransitionTime": "2026-12-07T10:00:00Z", "observedGeneration": 1}]);
    k
}

pub const REV1: &str = "a1b2c3d4e5f60718293a4b5c6d7e8f9012345678";
pub const REV2: &str = "ffeeddccbbaa99887766554433221100ffeeddcc";

/// Builds an Application object step by step.
#[derive(Clone)]
pub struct AppBuilder {
    pub v: Value,
}

impl AppBuilder {
    pub fn new(name: &str) -> Self {
        AppBuilder {
            v: json!({
                "apiVersion": "argoproj.io/v1alpha1",
                "kind": "Application",
                "metadata": {"name": name, "namespace": "argocd", "uid": format!("uid-{name}"), "annotations": {}, "labels": {}},
                "spec": {
                    "project": "default",
                    "source": {"repoURL": "https://git.example.com/apps.git", "path": name, "targetRevision": "HEAD"},
                    "destination": {"server": "https://kubernetes.default.svc", "namespace": name}
                },
                "status": {
                    "reconciledAt": "2026-03-01T12:00:00Z",
                    "observedAt": "2026-03-01T12:00:00Z"
                }
            }),
        }
    }

    fn set(mut self, pointer: &str, value: Value) -> Self {
        let mut parts: Vec<&str> = pointer.trim_start_matches('/').split('/').collect();
        let last = parts.pop().expect("non-empty pointer");
        let mut node = &mut self.v;
        for p in parts {
            if node.get(p).is_none() {
                node[p] = json!({});
            }
            node = &mut node[p];
        }
        node[last] = value;
        self
    }

    pub fn remove(mut self, pointer: &str) -> Self {
        let (parent, last) = pointer.rsplit_once('/').expect("pointer with a parent");
        if let Some(obj) = self.v.pointer_mut(parent).and_then(Value::as_object_mut) {
            obj.remove(last);
        }
        self
    }

    pub fn sync(self, status: &str, revision: &str) -> Self {
        self.set("/status/sync", json!({"status": status, "revision": revision}))
    }
    pub fn synced(self) -> Self {
        self.sync("Synced", REV1)
    }
    pub fn out_of_sync(self) -> Self {
        self.sync("OutOfSync", REV1)
    }
    pub fn health(self, status: &str, last_transition: &str) -> Self {
        self.set("/status/health", json!({"status": status, "lastTransitionTime": last_transition}))
    }
    pub fn healthy(self) -> Self {
        self.health("Healthy", "2026-03-01T11:58:30Z")
    }
    pub fn degraded(self) -> Self {
        self.health("Degraded", "2026-03-01T11:58:30Z")
    }
    /// An operation in `phase` at `revision`, started and finished at the given times.
    pub fn operation(self, phase: &str, revision: &str, started: &str, finished: Option<&str>) -> Self {
        let mut op = json!({"phase": phase, "message": format!("operation {phase}"), "startedAt": started,
                            "syncResult": {"revision": revision}});
        if let Some(f) = finished {
            op["finishedAt"] = json!(f);
        }
        self.set("/status/operationState", op)
    }
    pub fn reconciled_at(self, t: &str) -> Self {
        self.set("/status/reconciledAt", json!(t)).set("/status/observedAt", json!(t))
    }
    pub fn multi_source(self) -> Self {
        self.remove("/spec/source").set(
            "/spec/sources",
            json!([{"repoURL": "https://git.example.com/a.git", "path": "a"}, {"repoURL": "https://charts.example.com", "chart": "b"}]),
        )
    }
    pub fn annotate(mut self, key: &str, value: &str) -> Self {
        self.v["metadata"]["annotations"][key] = json!(value);
        self
    }
    pub fn label(mut self, key: &str, value: &str) -> Self {
        self.v["metadata"]["labels"][key] = json!(value);
        self
    }
    pub fn deleting(self) -> Self {
        self.set("/metadata/deletionTimestamp", json!("2026-03-01T12:01:00Z"))
    }
    pub fn field(self, pointer: &str, value: Value) -> Self {
        self.set(pointer, value)
    }
    pub fn build(self) -> Value {
        self.v
    }
    pub fn app(self) -> driftwatch::model::App {
        driftwatch::model::App::from_value(self.v).expect("fixture is an Application")
    }
}

/// Shifts the request and stage times of an audit `EventList`'s items so that the
/// latest was received at `at`, keeping their distances: driftwatch refuses events
/// older than `audit.maxEventAge` (an hour) as replays, and the recorded batches are
/// older.
pub fn received_at(list: &mut serde_json::Value, at: chrono::DateTime<chrono::Utc>) {
    let time = |v: &serde_json::Value| chrono::DateTime::parse_from_rfc3339(v.as_str()?).ok().map(|t| t.with_timezone(&chrono::Utc));
    let items = list["items"].as_array_mut().expect("an EventList");
    let Some(latest) = items.iter().filter_map(|e| time(&e["requestReceivedTimestamp"])).max() else { return };
    let shift = at - latest;
    for e in items {
        for key in ["requestReceivedTimestamp", "stageTimestamp"] {
            if let Some(t) = time(&e[key]) {
                e[key] = (t + shift).to_rfc3339_opts(chrono::SecondsFormat::Micros, true).into();
            }
        }
    }
}
