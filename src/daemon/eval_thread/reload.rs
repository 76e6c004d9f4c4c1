//! Reloading the configuration: everything built first, swapped in only when all of
//! it is valid; a refused reload keeps the running configuration and says why.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::SystemTime;

use super::EvalThread;
use super::leadership::build_services;
use crate::config::{self, Runtime};
use crate::daemon::fingerprint::config_fingerprint;
use crate::metrics::METRICS;
use crate::state::Store;
use crate::trigger::TriggerEngine;

/// Where the configuration is reloaded from, and how its files were at the last load.
pub(super) struct ConfigFiles {
    engine: Arc<TriggerEngine>,
    path: Option<PathBuf>,
    /// The fingerprint of the files the running configuration was read from, as they
    /// were at the last (attempted) load.
    last: Vec<(PathBuf, Option<SystemTime>, u64)>,
}

impl ConfigFiles {
    pub fn new(engine: Arc<TriggerEngine>, path: Option<PathBuf>, rt: &Runtime) -> ConfigFiles {
        ConfigFiles { engine, path, last: config_fingerprint(&rt.sources) }
    }

    /// Whether the files `rt` was read from changed since the last load.
    pub fn changed(&self, rt: &Runtime) -> bool {
        config_fingerprint(&rt.sources) != self.last
    }

    /// The files were looked at (loaded, or refused): they count as changed only when
    /// they change again.
    fn looked_at(&mut self, rt: &Runtime) {
        self.last = config_fingerprint(&rt.sources);
    }

    fn load(&self) -> Result<Runtime, Vec<crate::source::ConfigError>> {
        config::load_with(self.path.as_deref(), self.engine.clone())
    }
}

/// Whether any condition reads the clock (decided from the compiled script): only then
/// is a periodic re-evaluation needed.
pub(super) fn time_dependent(rt: &Runtime) -> bool {
    rt.triggers.values().flat_map(|t| &t.conditions).any(|c| c.reads_clock)
}

/// What the live reads were built from at start-up (`LiveFetcher::for_runtime`).
fn live_settings(rt: &Runtime) -> String {
    let clusters: Vec<(&str, &str, &str)> = rt.clusters.iter().map(|c| (c.label.as_str(), c.name.as_str(), c.server.as_str())).collect();
    let a = &rt.attribution;
    format!(
        "{clusters:?} {:?} {:?} {:?} {} {} {:?}",
        rt.argocd.as_ref().map(|a| &a.server),
        rt.diff,
        a.ignore_managers,
        a.read_secrets,
        a.concurrency,
        a.ttl
    )
}

impl EvalThread {
    /// Why the running audit input cannot take `rt`'s `audit:` settings, if it cannot:
    /// a reload never weakens what the listener accepts, nor pretends to start or stop it.
    fn audit_unchangeable(&self, rt: &Runtime) -> Result<(), String> {
        match self.eval.audit() {
            Some(a) => a.reloadable(&rt.audit).map_err(String::from),
            None if rt.audit.enabled() => {
                Err("audit: added by a reload: the audit input starts with driftwatch; restart it to start the input".into())
            }
            None => Ok(()),
        }
    }

    /// The operations listener's TLS is built at start-up: a reload that changes it
    /// (adds, drops, other files) is refused rather than pretending.
    fn operations_unchangeable(&self, rt: &Runtime) -> Result<(), String> {
        if rt.operations_tls == self.eval.runtime().operations_tls {
            return Ok(());
        }
        Err("operations.tls changed: the running operations listener was built with the old setting and keeps it until a \
             restart; restart driftwatch to apply it"
            .into())
    }

    /// With shards, every evaluation thread reloads its own configuration (from the
    /// same files); the first says what happened, once for the process, in the log and
    /// the reload metrics.
    fn speaks_for_process(&self) -> bool {
        self.shard == 0
    }

    /// The Applications are split into shards at start: a reload that changes
    /// `sharding.shards` is refused rather than pretending.
    fn shards_unchangeable(&self, rt: &Runtime) -> Result<(), String> {
        if rt.shards == self.eval.runtime().shards {
            return Ok(());
        }
        Err(format!(
            "sharding.shards changed from {} to {}: the Applications are split into shards at start; restart driftwatch to apply it",
            self.eval.runtime().shards,
            rt.shards
        ))
    }

    /// Builds everything new; swaps it in only if all of it is valid. Either way the
    /// files are looked at again only when they change again.
    pub(super) fn reload(&mut self) {
        self.try_reload();
        self.config.looked_at(self.eval.runtime());
    }

    fn try_reload(&mut self) {
        let probe = match self.lead.store() {
            Some(s) => s.clone(),
            // Not leading: validate the services against a throwaway store.
            None => match Store::in_memory() {
                Ok(s) => Arc::new(s),
                Err(e) => {
                    tracing::error!(error = %e, "configuration reload failed");
                    return;
                }
            },
        };
        let errors: Vec<String> = match self.config.load() {
            Ok(rt) => match self
                .audit_unchangeable(&rt)
                .and_then(|()| self.operations_unchangeable(&rt))
                .and_then(|()| self.shards_unchangeable(&rt))
                .map_err(|e| vec![e])
                .and_then(|()| build_services(&rt, &probe))
            {
                Ok(services) => {
                    self.lead.restart_delivery(services);
                    self.shared.set_config(&rt);
                    if let Some(a) = self.eval.audit() {
                        a.reload(&rt.audit);
                    }
                    // The live reads' clients and settings are built at start-up: say so
                    // when a reload changes them rather than seem to apply it.
                    if self.speaks_for_process() && self.eval.reads_live() && live_settings(&rt) != live_settings(self.eval.runtime()) {
                        tracing::warn!(
                            "clusters:, argocd:, diff: or attribution settings changed: live reads keep the running ones until a restart"
                        );
                    }
                    // The projects and live objects seen stay: they are the cluster's, not the configuration's.
                    self.eval.set_runtime(rt);
                    if self.speaks_for_process() {
                        METRICS.reload_ok.set(1);
                        METRICS.reloads.inc("ok");
                        METRICS.set_reload_errors(Vec::new());
                        tracing::info!("configuration reloaded");
                    }
                    self.eval.forget_fingerprints();
                    self.reevaluate_all();
                    return;
                }
                Err(errors) => errors,
            },
            Err(errors) => errors.iter().map(ToString::to_string).collect(),
        };
        if !self.speaks_for_process() {
            return;
        }
        METRICS.reload_ok.set(0);
        METRICS.reloads.inc("refused");
        for e in &errors {
            tracing::error!(error = %e, "configuration reload failed; keeping the running configuration");
        }
        METRICS.set_reload_errors(errors);
    }
}
