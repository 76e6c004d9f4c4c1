//! Writes to the Application itself outside `spec` (`operation`, notification
//! annotations, `status`): attempts like any other write, and a sync's initiator from
//! the audit input.

mod on_a_real_api_server {
    use std::time::Duration;

    use kube::api::Patch;
    use serde_json::{Value, json};

    use crate::audit_identity::on_a_real_api_server::{World, world};
    use crate::common::audited::grant;
    use crate::common::control_plane::{ADMIN, BOB, block_on, patch_as};
    use crate::common::daemon::{bodies, wait_for};

    fn app() -> Value {
        json!({"apiVersion": "argoproj.io/v1alpha1", "kind": "Application", "metadata": {"name": "payments-api", "namespace": "argocd"}})
    }

    /// bob may patch Applications in `argocd` (as the break-glass operators' role may);
    /// he writes `patch` with a merge patch as `kubectl patch --type=merge` sends it.
    fn bob_writes(w: &World, patch: Value) {
        block_on(async {
            let admin = w.api.client(ADMIN).await;
            grant(&admin, "argocd", "bob", "argoproj.io", &["applications"], &["get", "patch"]).await;
            let bob = w.api.client(BOB).await;
            patch_as(&bob, "kubectl-patch", &app(), Patch::Merge(patch)).await.unwrap();
        });
    }

    /// The chat messages naming bob.
    fn told_of_bob(w: &World, what: &str) -> String {
        let mut found = String::new();
        wait_for(what, Duration::from_secs(30), || {
            found = bodies(&w.chat).into_iter().find(|b| b.contains("by bob")).unwrap_or_default();
            !found.is_empty()
        });
        found
    }

    /// bob writes the Application's `operation` directly — a sync of a revision nobody
    /// reviewed — with `initiatedBy` claiming carol. Expected: an attempt told naming
    /// bob and the operation's fields (it was dropped as not-a-change: it does not touch
    /// `spec`).
    #[test]
    fn a_sync_written_directly_with_a_forged_initiator_is_an_attempt_naming_the_writer() {
        let w = world("attack-operation");
        bob_writes(
            &w,
            json!({"operation": {"initiatedBy": {"username": "carol"}, "sync": {"revision": "0000000000000000000000000000000000000bad"}}}),
        );
        let told = told_of_bob(&w, "bob's operation write told");
        assert!(told.contains("operation.sync.revision"), "{told}");
        assert!(told.contains(":rotating_light:"), "a direct sync is a security write: {told}");
        let pages = w.wait_pages("bob's operation write paged", 1);
        assert!(pages.iter().any(|(s, sev)| s.contains("bob") && sev == "critical"), "{pages:?}");
        w.stop();
    }

    /// bob points the Application at what he wants deployed — inline Helm values that
    /// make the container privileged, past Git's review — and turns self-heal off.
    /// Argo CD then deploys it as desired state, so no live drift ever shows it: the
    /// write to the Application is the only trace. Expected: paged on the security route
    /// (class `application`), naming bob (it was class `application`, which no route
    /// could list, and `spec.source` was not a security field: chat only).
    #[test]
    fn a_source_rewritten_by_a_person_is_paged() {
        let w = world("attack-source");
        bob_writes(
            &w,
            json!({"spec": {"source": {"helm": {"values": "securityContext:\n  privileged: true\n"}},
                            "syncPolicy": {"automated": {"selfHeal": false}}}}),
        );
        let pages = w.wait_pages("bob's source write paged", 1);
        assert!(pages.iter().any(|(s, sev)| s.contains("bob") && sev == "critical"), "{pages:?}");
        let told = told_of_bob(&w, "bob's source write told");
        assert!(told.contains("spec.source.helm.values"), "{told}");
        w.stop();
    }

    /// bob rewrites where the Application's notifications go (its subscription
    /// annotation). Expected: an attempt told naming bob.
    #[test]
    fn a_notification_annotation_written_by_a_person_is_an_attempt() {
        let w = world("attack-subscription");
        bob_writes(&w, json!({"metadata": {"annotations": {"notifications.argoproj.io/subscribe.on-live-drift.slack": "bob-private"}}}));
        let told = told_of_bob(&w, "bob's annotation write told");
        assert!(told.contains("notifications.argoproj.io/subscribe.on-live-drift.slack"), "{told}");
        w.stop();
    }

    /// bob writes the Application's `status` (the CRD has no status subresource): a
    /// resource list with a forged entry and a stale-looking operation dated far ahead,
    /// which would have kept the Application skipped for good. Expected: an attempt told naming bob
    /// and the status fields written; and a privileged write on the Deployment after it
    /// is still paged.
    #[test]
    fn a_status_written_by_a_person_is_an_attempt_and_cannot_hold_the_application_back() {
        let w = world("attack-status");
        bob_writes(
            &w,
            json!({"status": {"operationState": {"phase": "Succeeded", "startedAt": "2099-01-01T00:00:00Z", "finishedAt": "2099-01-01T00:00:00Z", "operation": {"sync": {}}},
                              "resources": [
                                  {"group": "apps", "version": "v1", "kind": "Deployment", "namespace": "payments", "name": "api", "status": "Synced"},
                                  {"version": "v1", "kind": "ConfigMap", "namespace": "payments", "name": "settings", "status": "Synced"},
                                  {"version": "v1", "kind": "ConfigMap", "namespace": "payments", "name": "forged", "status": "OutOfSync"}]}}),
        );
        let told = told_of_bob(&w, "bob's status write told");
        assert!(told.contains("status.resources") && told.contains("status.operationState"), "{told}");
        let privileged = r#"{"spec": {"template": {"spec": {"containers": [{"name": "app", "securityContext": {"privileged": true}}]}}}}"#;
        assert_eq!(
            w.patch(crate::common::control_plane::ALICE, crate::audit_identity::on_a_real_api_server::DEPLOY, privileged, None),
            200
        );
        w.heal();
        // bob's status write is paged itself (class `application`), and alice's after it.
        wait_for("alice's privileged write paged", Duration::from_secs(30), || w.pages().iter().any(|(s, _)| s.contains("alice")));
        let pages = w.pages();
        assert!(pages.iter().any(|(s, sev)| s.contains("by bob") && sev == "critical"), "{pages:?}");
        w.stop();
    }
}
