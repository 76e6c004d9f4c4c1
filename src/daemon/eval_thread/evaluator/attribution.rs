//! Live objects read for attribution and the diff: the reads a pass asks for, what
//! a read gives (and which Applications waiting for it to evaluate again when it
//! changed what is known), and each cluster's health (logged once when a cluster
//! stops answering, once when it answers again).

use super::Evaluator;
use crate::cluster::live::ReadError;
use crate::drift::attribution::Attribution;
use crate::metrics::METRICS;
use crate::model::App;

/// At most this many refused resources (and clusters down) are remembered for logging
/// once.
const MAX_FORBIDDEN_LOGGED: usize = 256;

impl Evaluator {
    /// The live reads an evaluation of `app` asks for: its drifted resources' (who,
    /// the diff), and the in-sync reading of the resources Argo CD reports Synced (their
    /// security values, the desired state for them without `argocd:`), within its
    /// AppProject.
    pub(super) fn request_live(&mut self, key: &str, app: &App, drift: &crate::drift::Drift, target: &crate::config::clusters::Target) {
        let Some(live) = self.live.as_mut() else { return };
        let rt = &self.pipeline.runtime;
        let scope = self.inputs.scope(app, rt);
        let wanted = crate::cluster::live::Wanted::from_drift(drift, target, &app.object, &scope);
        let r = live.request(key, wanted, || crate::drift::ignore::IgnoreRules::of(&app.object));
        self.inputs.live_forgotten(r.forgotten);
        live.record_in_sync(&app.object, crate::cluster::live::Wanted::in_sync(&app.object, target, &scope, &rt.classes));
    }

    /// A live object was read: update its attribution and diff. Returns the
    /// Applications waiting for it, to be evaluated again, when it changed what is known.
    pub fn live_read(&mut self, fetched: crate::cluster::live::Fetched) -> Vec<String> {
        let Some(live) = self.live.as_mut() else { return Vec::new() };
        // None: nobody reports this resource as drifted any more.
        let Some(waiting) = live.complete(&fetched) else { return Vec::new() };
        let f = fetched;
        let key = f.wanted.key();
        let cluster = f.wanted.cluster_label().to_string();
        let failed = matches!(f.result, Err(ReadError::Failed(_) | ReadError::Refused(_)));
        self.cluster_health(&cluster, &f.result);
        let next = f.attribution();
        match &f.result {
            Err(ReadError::Forbidden { group, resource }) => {
                let label = ReadError::resource_label(group, resource);
                METRICS.live_reads_forbidden.inc(&label);
                // Once per kind: the drift is still reported, and the read is not
                // retried for a while (`live::FORBIDDEN_BACKOFF`).
                if self.forbidden_logged.len() < MAX_FORBIDDEN_LOGGED && self.forbidden_logged.insert(format!("{cluster}/{label}")) {
                    tracing::warn!(cluster = %cluster, resource = %label, rule = %ReadError::rule(group, resource),
                        label = crate::cluster::live::AGGREGATE_LABEL,
                        "attribution is not permitted to read this kind of resource: its drift is reported without who made it; \
                         add the rule to a ClusterRole with the label to allow it");
                }
            }
            Err(ReadError::Failed(e) | ReadError::Refused(e)) => {
                METRICS.live_read_errors.inc();
                tracing::debug!(cluster = %cluster, resource = %key, error = %e, "reading a drifted resource failed");
            }
            _ => {}
        }
        // A failure does not replace what an earlier read of the resource found.
        match self.inputs.live_read(key, next, failed) {
            true => waiting.into_iter().collect(),
            false => Vec::new(),
        }
    }

    /// Records whether `cluster` answered: the gauge, and a log line when that changes.
    fn cluster_health(&mut self, cluster: &str, result: &Result<Option<Attribution>, ReadError>) {
        match result {
            Err(ReadError::Failed(e)) => {
                METRICS.cluster_up.set(cluster, 0);
                if self.clusters_down.len() < MAX_FORBIDDEN_LOGGED && self.clusters_down.insert(cluster.to_string()) {
                    tracing::warn!(cluster = %cluster, error = %e,
                        "a cluster does not answer live reads: drift there is reported without who made it or the diff, \
                         until it answers again (other clusters are not held up)");
                }
            }
            _ => {
                METRICS.cluster_up.set(cluster, 1);
                if self.clusters_down.remove(cluster) {
                    tracing::info!(cluster = %cluster, "the cluster answers live reads again");
                }
            }
        }
    }
}
