//! Relevant events from the audit input: recorded in the window of their Application
//! and evaluated at once, one pass per new attempt (so each is the newest an
//! `on-drift-attempt` pass sees); the same actor again on the same resource within the
//! window only counts. Also keeps the audit input's index of managed objects.

use super::{App, Core, Instant, METRICS, Utc};
use crate::drift::audit::Recorded;

impl Core {
    pub(super) fn audited(&mut self, batch: crate::audit::Relevant, arrived: Instant) {
        let window = self.pipeline.runtime.audit.window;
        let new = batch.len();
        // A write of the break-glass annotation: kept (it verifies the exception it
        // opened or approved) and the Application judged again at once.
        for w in batch.break_glass {
            let key = w.app_key.clone();
            match self.inputs.break_glass_audited(w) {
                true => self.reevaluate([key]),
                false => METRICS.audit_dropped.inc("too-many-apps"),
            }
        }
        for a in batch.attempts {
            let key = a.app_key.clone();
            match self.inputs.attempt_audited(a, &self.pipeline.runtime.classes, window, Utc::now()) {
                Recorded::Full => METRICS.audit_dropped.inc("too-many-apps"),
                Recorded::OverBudget => METRICS.audit_dropped.inc("actor-over-budget"),
                Recorded::WindowFull => METRICS.audit_dropped.inc("window-full"),
                Recorded::Coalesced => {}
                Recorded::New => self.reevaluate([key]),
            }
        }
        if new > 0 {
            // From the request's arrival to its relevant events evaluated (their
            // notifications in the outbox).
            METRICS.audit_evaluated_latency.observe(arrived.elapsed());
        }
    }

    /// What `app` manages, for the audit input (when there is one).
    pub(super) fn index_managed(&self, app: &App) {
        if let Some(a) = &self.audit {
            // Bounded by its AppProject whether or not live objects are read, and by
            // Argo CD's admission of the Application itself (`project::Scope`).
            let rt = &self.pipeline.runtime;
            // The audit input is this cluster's: an Application deploying to a spoke
            // manages no object here (a same-named one here is another's), so only its
            // own spec is indexed.
            let scope = match rt.target(&app.object) {
                crate::config::clusters::Target::Local => self.inputs.project_scope(app, rt),
                _ => {
                    let (server, name) = rt.destination_of(&app.object);
                    crate::project::Scope::of(&app.object, None, &rt.attribution.argocd_namespace).resolved(&server, &name)
                }
            };
            a.index.write().unwrap_or_else(|p| p.into_inner()).update(app, &scope);
        }
    }

    /// Forgets a deleted Application in the audit input.
    pub(super) fn unindex(&mut self, key: &str) {
        if let Some(a) = &self.audit {
            a.index.write().unwrap_or_else(|p| p.into_inner()).remove(key);
        }
        self.inputs.app_gone(key);
    }

    /// Tells the audit listener whether this replica evaluates (a standby answers 503,
    /// and the API server sends the batch again, to the leader).
    pub(super) fn audit_leading(&self) {
        if let Some(a) = &self.audit {
            a.set_leading(self.state.is_some());
        }
    }
}
