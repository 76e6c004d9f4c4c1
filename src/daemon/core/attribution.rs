//! Live objects read for attribution: the attribution they give, and the
//! re-evaluation of the Applications waiting for it when it changed.

use super::*;

impl Core {
    /// A live object was read: update its attribution and re-evaluate the
    /// Applications waiting for it when it changed what is known.
    pub(super) fn live_read(&mut self, fetched: crate::cluster::live::Fetched) {
        let Some(live) = self.live.as_mut() else { return };
        // None: nobody reports this resource as drifted any more.
        let Some(waiting) = live.complete(&fetched) else { return };
        let f = fetched;
        let key = f.wanted.key();
        let next = match &f.object {
            Ok(Some(object)) => {
                Some(crate::drift::attribution::attribute(object, &f.wanted.class, &self.pipeline.runtime.attribution.ignore_managers))
            }
            Ok(None) => None,
            Err(e @ ReadError::Forbidden { group, resource }) => {
                let label = ReadError::resource_label(group, resource);
                METRICS.live_reads_forbidden.inc(&label);
                // Once per kind: the drift is still reported, and the read is not
                // retried for a while (`live::FORBIDDEN_BACKOFF`).
                if self.forbidden_logged.len() < MAX_FORBIDDEN_LOGGED && self.forbidden_logged.insert(label.clone()) {
                    tracing::warn!(resource = %label, rule = %ReadError::rule(group, resource), label = crate::cluster::live::AGGREGATE_LABEL,
                        "attribution is not permitted to read this kind of resource: its drift is reported without who made it; \
                         add the rule to a ClusterRole with the label to allow it");
                }
                Some(Attribution::not_read(NotReadReason::Forbidden, e.to_string()))
            }
            Err(e @ ReadError::SecretsOff) => Some(Attribution::not_read(NotReadReason::SecretsOff, e.to_string())),
            Err(ReadError::Failed(e)) => {
                METRICS.live_read_errors.inc();
                tracing::warn!(resource = %key, error = %e, "reading a drifted resource for attribution failed");
                return;
            }
        };
        let changed = self.inputs.live.get(&key) != next.as_ref();
        match next {
            Some(a) => {
                self.inputs.live.insert(key, a);
            }
            None => {
                self.inputs.live.remove(&key);
            }
        }
        if changed {
            self.reevaluate(waiting);
        }
    }
}
