//! The forms a write can take (issue 52's fresh review): a patch padded with harmless
//! fields, a query string that looks like a dry run, a strategic merge directive. What
//! the write did is read from what it is, not from how it is spelled: each is paged.

mod on_a_real_api_server {
    use std::time::Duration;

    use crate::audit_identity::on_a_real_api_server::{DEPLOY, PRIVILEGED, world};
    use crate::common::control_plane::ALICE;
    use crate::common::daemon::wait_for;

    /// In a world of its own (`name`), alice's one patch with the query `query`, then
    /// Argo CD's self-heal when `heal`: her write is paged (critical, naming her and the
    /// Deployment).
    fn paged_after(name: &str, query: &str, body: &str, heal: bool) {
        let w = world(name);
        assert_eq!(w.patch_with(ALICE, DEPLOY, query, body, None), 200);
        if heal {
            w.heal();
        }
        wait_for("alice's write paged", Duration::from_secs(30), || {
            w.pages().iter().any(|(s, sev)| s.contains("alice") && s.contains("Deployment payments/api") && sev == "critical")
        });
        w.stop();
    }

    const QUERY: &str = "fieldManager=kubectl-patch";

    /// alice sends one patch: forty labels first, then `privileged: true` (the request
    /// body keeps that order). Expected: paged (the fields past the 32 shown were
    /// dropped, the privileged one with them: a `workload` write, chat only).
    #[test]
    fn a_privileged_write_padded_with_labels_is_paged() {
        let labels: Vec<String> = (0..40).map(|i| format!("\"f{i}\": \"x\"")).collect();
        let body = format!(
            r#"{{"metadata": {{"labels": {{{}}}}}, "spec": {{"template": {{"spec": {{"containers": [{{"name": "app", "securityContext": {{"privileged": true}}}}]}}}}}}}}"#,
            labels.join(", ")
        );
        paged_after("attack-padded", QUERY, &body, true);
    }

    /// alice's privileged patch carries `?x=dryRun=1`: the API server ignores the
    /// unknown parameter and applies the write. Expected: paged (any `dryRun=` in the
    /// URI dropped it as no change).
    #[test]
    fn a_query_that_looks_like_a_dry_run_does_not_hide_the_write() {
        paged_after("attack-dryrun", "fieldManager=kubectl-patch&x=dryRun=1", PRIVILEGED, true);
    }

    /// alice removes the container's `securityContext` whole with a strategic merge
    /// `$patch: delete`. Expected: paged as a security write (the directive was
    /// skipped, the patch set nothing, and it was dropped as no change).
    #[test]
    fn a_security_context_deleted_by_directive_is_paged() {
        let delete = r#"{"spec": {"template": {"spec": {"containers": [{"name": "app", "securityContext": {"$patch": "delete"}}]}}}}"#;
        paged_after("attack-patch-delete", QUERY, delete, false);
    }
}
