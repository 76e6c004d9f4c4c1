//! The real control plane with its audit webhook posting to a daemon: the daemon's
//! audit listener, the API server restarted to post to it, people granted rights by
//! RBAC, and Argo CD's application controller. Shared by `tests/control_plane.rs` and
//! the attack corpus (`tests/attacks/`).

use std::net::TcpListener;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::{Value, json};

use super::AppBuilder;
use super::control_plane::{self as cp, apply_as};
use super::daemon::{Daemon, wait_for};
use super::receiver::receiver;

/// A receiver for the `hook` service, with the port it listens on.
pub fn hook() -> (Arc<Mutex<Vec<String>>>, u16) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    (receiver(listener), port)
}

/// An Application as the API server takes it: the fixture without the `uid` the
/// server assigns, and with a `deployedAt` on each history entry (the CRD requires it).
pub fn application(b: AppBuilder) -> Value {
    let mut v = b.build();
    if let Some(m) = v["metadata"].as_object_mut() {
        m.remove("uid");
    }
    if let Some(h) = v.pointer_mut("/status/history").and_then(Value::as_array_mut) {
        for e in h {
            e["deployedAt"] = json!("2026-12-01T09:00:00Z");
        }
    }
    v
}

/// Writes an Application whole as Argo CD's controller does (no status subresource).
pub async fn put_app(client: &kube::Client, app: Value) {
    apply_as(client, "argocd-application-controller", app).await;
}

pub const AUDIT_TOKEN: &str = "audit-e2e-token-0123456789";

/// The webhook kubeconfig the API server posts its audit batches with: the daemon's
/// listener at `addr`, its CA, the token.
pub fn audit_flags(dir: &Path, addr: &str, ca: &str) -> Vec<String> {
    std::fs::write(dir.join("audit-ca.crt"), ca).unwrap();
    let kubeconfig = format!(
        "apiVersion: v1\nkind: Config\nclusters:\n- name: driftwatch\n  cluster:\n    server: https://{addr}/audit\n    certificate-authority: {ca}\n\
         users:\n- name: apiserver\n  user:\n    token: {AUDIT_TOKEN}\ncontexts:\n- name: default\n  context: {{cluster: driftwatch, user: apiserver}}\ncurrent-context: default\n",
        ca = dir.join("audit-ca.crt").display()
    );
    std::fs::write(dir.join("audit-webhook.yaml"), kubeconfig).unwrap();
    let policy = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/k8s-audit/audit-policy.yaml");
    vec![
        format!("--audit-policy-file={}", policy.display()),
        format!("--audit-webhook-config-file={}", dir.join("audit-webhook.yaml").display()),
        "--audit-webhook-mode=batch".into(),
        "--audit-webhook-batch-max-wait=1s".into(),
    ]
}

/// The audit webhook a daemon listens on for the API server: TLS, the token from
/// `secrets/`.
pub const AUDIT_LISTENER: &str =
    "secretsFile: secrets\naudit:\n  listen: 127.0.0.1:0\n  tls: {certFile: tls.crt, keyFile: tls.key}\n  token: $audit-token\n";

/// A daemon directory with `config` and the audit listener (its certificate, the
/// token); the daemon started on `api`, then `api` restarted to post its audit
/// batches to it.
pub fn start_audited(dir: &Path, config: &str, api: &cp::ApiServer, extra: &[&str]) -> Daemon {
    let ca = super::tls::serving_tls(dir);
    std::fs::create_dir(dir.join("secrets")).unwrap();
    std::fs::write(dir.join("secrets/audit-token"), AUDIT_TOKEN).unwrap();
    std::fs::write(dir.join("driftwatch.yaml"), format!("{config}{AUDIT_LISTENER}")).unwrap();
    let d = Daemon::start_with(dir, extra);
    let addr = audit_addr(&d);
    api.restart(&audit_flags(dir, &addr, &ca));
    d
}

/// The audit listener's address, from the daemon's log.
pub fn audit_addr(d: &Daemon) -> String {
    let mut addr = String::new();
    wait_for("the audit listener's address in the log", Duration::from_secs(15), || {
        let line = d.log_lines("audit webhook listening").into_iter().next().unwrap_or_default();
        addr = line.split("bound=").nth(1).and_then(|r| r.split_whitespace().next()).unwrap_or_default().to_string();
        !addr.is_empty()
    });
    addr
}

/// A Role granting `verbs` on `resources` in `ns` to `user`.
pub async fn grant(admin: &kube::Client, ns: &str, user: &str, group: &str, resources: &[&str], verbs: &[&str]) {
    let name = format!("{user}-{}", resources.join("-"));
    apply_as(
        admin,
        "test-setup",
        json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
        "metadata": {"name": name, "namespace": ns}, "rules": [{"apiGroups": [group], "resources": resources, "verbs": verbs}]}),
    )
    .await;
    apply_as(
        admin,
        "test-setup",
        json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
        "metadata": {"name": name, "namespace": ns},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": name},
        "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": user}]}),
    )
    .await;
    for resource in resources {
        for verb in verbs {
            in_force(admin, user, Some(ns), group, resource, verb).await;
        }
    }
}

/// Waits until the API server's own authorizer lets `user` do `verb`: the RBAC
/// authorizer reads bindings through an informer, so one just written may not be in
/// force yet.
pub async fn in_force(admin: &kube::Client, user: &str, ns: Option<&str>, group: &str, resource: &str, verb: &str) {
    use k8s_openapi::api::authorization::v1::{ResourceAttributes, SubjectAccessReview, SubjectAccessReviewSpec};
    let reviews: kube::Api<SubjectAccessReview> = kube::Api::all(admin.clone());
    let review = SubjectAccessReview {
        spec: SubjectAccessReviewSpec {
            user: Some(user.to_string()),
            resource_attributes: Some(ResourceAttributes {
                group: Some(group.to_string()),
                resource: Some(resource.to_string()),
                verb: Some(verb.to_string()),
                namespace: ns.map(str::to_string),
                ..Default::default()
            }),
            ..Default::default()
        },
        ..Default::default()
    };
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    loop {
        let answer = reviews.create(&Default::default(), &review).await.expect("a SubjectAccessReview");
        if answer.status.is_some_and(|s| s.allowed) {
            return;
        }
        assert!(std::time::Instant::now() < deadline, "{user} may {verb} {resource} in {ns:?}: not in force after 30 s");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Argo CD's application controller: its ServiceAccount, bound to cluster-admin as Argo
/// CD installs it; a client with its token.
pub async fn argocd_controller(api: &cp::ApiServer, admin: &kube::Client) -> kube::Client {
    controller(api, admin, "argocd", "argocd-application-controller").await
}

/// A controller's ServiceAccount `ns/name` (Argo CD's application controller, Flux's
/// kustomize-controller or helm-controller, Fleet's agent), bound to cluster-admin as
/// their installs bind it, and a client with its token.
pub async fn controller(api: &cp::ApiServer, admin: &kube::Client, ns: &str, name: &str) -> kube::Client {
    api.namespaces(&[ns]).await;
    let token = api.service_account_token(ns, name).await;
    apply_as(
        admin,
        "test-setup",
        json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
        "metadata": {"name": format!("{ns}-{name}")},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "cluster-admin"},
        "subjects": [{"kind": "ServiceAccount", "name": name, "namespace": ns}]}),
    )
    .await;
    in_force(admin, &format!("system:serviceaccount:{ns}:{name}"), None, "apps", "deployments", "patch").await;
    api.client_with_token(&token).await
}
