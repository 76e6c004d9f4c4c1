//! The evaluator's side of the audit input: its index of the objects each
//! Application manages, and whether this replica evaluates (a standby answers 503).
//! The audited events themselves are recorded by `EvalThread::audited`, one pass each.

use super::Evaluator;
use crate::model::App;

impl Evaluator {
    /// What `app` manages, for the audit input (when there is one).
    pub fn index_managed(&self, app: &App) {
        use crate::config::clusters::Target;
        use crate::project::Scope;
        use crate::unit::Engine;
        let Some(a) = &self.audit else { return };
        let rt = &self.pipeline.runtime;
        // A Flux or Fleet unit's inventory is its controller's to write (the status
        // subresource), from what the unit's sources hold: a tenant's Flux unit (one
        // outside the namespaces Flux's controllers run in) manages and reads objects of
        // its own namespace and target namespace only, so it cannot claim another
        // team's objects and be told of their writes. What it reads is in this cluster
        // wherever it deploys.
        let own = match app.engine() {
            Engine::ArgoCd => None,
            Engine::Fleet => Some(Scope::unrestricted()),
            _ if rt.audit.argocd_identities.flux_namespaces().contains(&app.namespace.as_str()) => Some(Scope::unrestricted()),
            _ => Some(Scope::namespaces(&[&app.namespace, &app.unit.destination.namespace])),
        };
        // The audit input is this cluster's: a unit deploying to a spoke manages no
        // object here (a same-named one here is another's), so only its own object (and
        // what it reads) is indexed. An Application is bounded by its AppProject whether
        // or not live objects are read, and by Argo CD's admission of the Application
        // itself (`project::Scope`).
        // A spoke whose API server posts its own batches (`clusters[].auditToken`): the
        // unit's objects are indexed as that cluster's, bounded as a local unit's are.
        let target = rt.target_of(app);
        let fed = match &target {
            Target::Spoke(label) => rt.audit.spokes.iter().any(|f| f.cluster == *label).then(|| label.clone()),
            _ => None,
        };
        let scope = match (&target, &own, &fed) {
            (Target::Local, Some(own), _) | (_, Some(own), Some(_)) => own.clone(),
            (Target::Local, None, _) | (_, None, Some(_)) => self.inputs.project_scope(app, rt),
            (_, Some(_), None) => Scope::refusing("deploys to another cluster: its objects are not this audit input's"),
            (_, None, None) => {
                let (server, name) = rt.destination_of(&app.object);
                Scope::of(&app.object, None, &rt.attribution.argocd_namespace).resolved(&server, &name)
            }
        };
        let inputs = own.unwrap_or_else(|| scope.clone());
        let cluster = fed.as_deref().unwrap_or_default();
        a.index.write().unwrap_or_else(|p| p.into_inner()).update_in(app, cluster, &scope, &inputs);
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
