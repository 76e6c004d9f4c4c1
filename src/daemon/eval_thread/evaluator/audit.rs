//! The evaluator's side of the audit input: its index of the objects each
//! Application manages, and whether this replica evaluates (a standby answers 503).
//! The audited events themselves are recorded by `EvalThread::audited`, one pass each.

use super::Evaluator;
use crate::model::App;

impl Evaluator {
    /// What `app` manages, for the audit input (when there is one).
    pub fn index_managed(&self, app: &App) {
        if let Some(a) = &self.audit {
            // Bounded by its AppProject whether or not live objects are read, and by
            // Argo CD's admission of the Application itself (`project::Scope`).
            let rt = &self.pipeline.runtime;
            // The audit input is this cluster's: an Application deploying to a spoke
            // manages no object here (a same-named one here is another's), so only its
            // own spec is indexed.
            let scope = match rt.target_of(app) {
                // A Flux or Fleet unit's inventory is its controller's to write (the
                // status subresource), from what the unit's sources hold: a tenant's
                // Flux unit (one outside the namespaces Flux's controllers run in)
                // manages objects of its own namespace and target namespace only, so it
                // cannot claim another team's objects and be told of their writes.
                crate::config::clusters::Target::Local if app.engine() != crate::unit::Engine::ArgoCd => {
                    let trusted = rt.audit.argocd_identities.flux_namespaces();
                    match app.engine() {
                        crate::unit::Engine::Fleet => crate::project::Scope::unrestricted(),
                        _ if trusted.contains(&app.namespace.as_str()) => crate::project::Scope::unrestricted(),
                        _ => crate::project::Scope::namespaces(&[&app.namespace, &app.unit.destination.namespace]),
                    }
                }
                crate::config::clusters::Target::Local => self.inputs.project_scope(app, rt),
                _ if app.engine() != crate::unit::Engine::ArgoCd => {
                    crate::project::Scope::refusing("deploys to another cluster: its objects are not this audit input's")
                }
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
    pub fn audit_leading(&self, sends: bool) {
        if let Some(a) = &self.audit {
            a.set_leading(sends);
        }
    }
}
