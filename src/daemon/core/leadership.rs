//! Leading and standing by: taking over sending (the state store opened, its file
//! lock held, the delivery workers started), stepping down, reopening the store after
//! a failed write, and building the services' clients.

use super::{Arc, Core, Delivery, Instant, METRICS, Runtime, ServiceRuntime, Store, StoreAt};

/// Every configured service's client (`pipeline::wiring::service_clients`), each with a
/// queue-depth series.
pub(super) fn build_services(rt: &Runtime, state: &Arc<Store>) -> Result<Vec<ServiceRuntime>, Vec<String>> {
    let services = crate::pipeline::wiring::service_clients(rt, state)?;
    for s in &services {
        // Every configured service has a queue-depth series, zero until something waits.
        METRICS.show_queue(&s.name);
    }
    Ok(services)
}

/// What keeps the configuration's services from being built, checked against a
/// throwaway store before anything is opened.
pub(in crate::daemon) fn services_problems(rt: &Runtime) -> Result<(), Vec<String>> {
    let probe = Store::in_memory().map_err(|e| vec![e.to_string()])?;
    build_services(rt, &Arc::new(probe)).map(drop)
}

/// This process, as a fencing holder without leader election: host and process id.
fn identity() -> String {
    let host = std::env::var("HOSTNAME").unwrap_or_else(|_| "driftwatch".into());
    format!("{host}/{}", std::process::id())
}

/// Why [`Core::lead`] could not take over sending.
pub(in crate::daemon) enum LeadError {
    /// The state file is held (another driftwatch) or cannot be opened.
    Store(String),
    /// A delivery client could not be built (a CA file gone, ...).
    Services(Vec<String>),
}

impl Core {
    /// Takes over sending: opens the state store (the previous holder's file lock must
    /// be gone), starts the workers (which deliver what the outbox holds first), and
    /// evaluates every cached Application. Fails if the store is still locked or a
    /// delivery client cannot be built; the caller retries.
    pub(super) fn lead(&mut self) -> Result<(), LeadError> {
        if self.state.is_some() {
            return Ok(());
        }
        let opened = match &self.store_at {
            // With leader election another replica may open the same file: the file
            // system's locks must work (Store::open_fenced).
            StoreAt::File(path) if self.stand_aside.is_some() => Store::open_fenced(path),
            StoreAt::File(path) => Store::open(path),
            // In PostgreSQL the store is taken over with the Lease's generation: a
            // replica whose Lease is older cannot take it back, and once
            // this one took it, the one before it can write nothing more.
            StoreAt::Postgres(pg) => {
                let role = match &self.stand_aside {
                    Some((aside, _)) => {
                        crate::state::Role::Leader { holder: aside.identity().to_string(), lease: Some(aside.lease_generation()) }
                    }
                    None => crate::state::Role::Leader { holder: identity(), lease: None },
                };
                let opts = pg.clone();
                // Connecting and migrating block: off the runtime's workers.
                self.wait(async move { tokio::task::spawn_blocking(move || Store::open_postgres(&opts, &role)).await })
                    .unwrap_or_else(|e| Err(crate::state::StateError::Postgres(e.to_string())))
            }
        };
        let mut store = match opened {
            Ok(s) => s,
            Err(e) => {
                tracing::warn!(error = %e, "cannot open the state store yet; retrying");
                // The previous leader may still be closing it (a handover): stand
                // aside only if it stays closed for a whole lease duration — at once
                // when the volume cannot lock it (that does not pass).
                // A store refused to this replica's Lease (another took it over with a
                // newer one) does not pass either.
                self.lead_failed(matches!(e, crate::state::StateError::NoLocks { .. } | crate::state::StateError::Fenced(_)));
                return Err(LeadError::Store(e.to_string()));
            }
        };
        if let Some(n) = self.pipeline.runtime.state.max_keys_per_app {
            store = store.with_max_keys_per_app(n);
        }
        let state = Arc::new(store);
        // Passes commit without waiting for the disk; the main loop flushes them every
        // FLUSH_EVERY.
        state.defer_durability(true);
        match build_services(&self.pipeline.runtime, &state) {
            Ok(services) => self.delivery = Some(Delivery::start_leading(services, state.clone(), self.halt.clone())),
            Err(e) => {
                // The store is closed again (dropped here): a standby may take it.
                for e in &e {
                    tracing::error!(error = %e, "building the delivery clients failed");
                }
                self.lead_failed(true);
                return Err(LeadError::Services(e));
            }
        }
        self.shared.set_store(self.shard, Some(state.clone()));
        self.state = Some(state);
        self.lead_failing_since = None;
        self.count_leading(true);
        match self.sharded {
            true => tracing::info!(shard = self.shard, "leading the shard: sending notifications"),
            false => tracing::info!("leading: sending notifications"),
        }
        self.evaluated.clear();
        self.reevaluate_all();
        Ok(())
    }

    /// This replica should send but cannot. With leader election, it gives the Lease up
    /// (for two lease durations, so another replica can take it) rather than hold it
    /// while sending nothing: at once when the clients cannot be built, after a lease
    /// duration of failing when the store will not open.
    fn lead_failed(&mut self, at_once: bool) {
        let since = *self.lead_failing_since.get_or_insert_with(Instant::now);
        let Some((aside, duration)) = &self.stand_aside else { return };
        if at_once || since.elapsed() >= *duration {
            tracing::error!(aside = ?(*duration * 2), "leading but unable to send: giving the lease up");
            aside.until(tokio::time::Instant::now() + *duration * 2);
            self.lead_failing_since = None;
        }
    }

    /// Stops sending: workers stop after their current attempt, the store is closed
    /// (releasing its file lock), undelivered notifications stay in its outbox.
    pub(super) fn step_down(&mut self) {
        self.flush();
        self.count_leading(false);
        self.close();
        self.evaluated.clear();
        match self.sharded {
            true => tracing::info!(shard = self.shard, "the shard is another replica's: not sending"),
            false => tracing::info!("standing by: not sending"),
        }
    }

    /// Closes and reopens the state store after a failed write (workers stopped and
    /// started again, the outbox delivered from where it was). Until it opens again
    /// (the disk still full), `lead` is retried.
    pub(super) fn reopen(&mut self) {
        self.reopen_store = false;
        if self.state.as_ref().is_some_and(|s| s.fenced()) {
            self.fenced_out();
            return;
        }
        self.last_reopen = Some(Instant::now());
        self.flush();
        tracing::warn!("reopening the state store after a failed write");
        self.close();
        let _ = self.lead();
    }

    /// Another replica took the store in PostgreSQL over: this one stops sending and
    /// does not reopen the store (that would take it back). With leader election it
    /// stands aside for two lease durations (its Lease is gone or going); without, the
    /// daemon stops ([`Core::run`] ends with `fenced`), since a second daemon without
    /// election runs on the same state.
    fn fenced_out(&mut self) {
        tracing::error!("another replica took the state store over (PostgreSQL fencing epoch): this one stops sending");
        self.step_down();
        match &self.stand_aside {
            Some((aside, duration)) => aside.until(tokio::time::Instant::now() + *duration * 2),
            None => self.fenced = true,
        }
    }

    /// Stops the workers (within the step-down grace) and closes the store, releasing
    /// its file lock; the operations endpoints stop reading it.
    fn close(&mut self) {
        if let Some(d) = self.delivery.take() {
            self.wait(d.shutdown(self.step_down_grace));
        }
        self.shared.set_store(self.shard, None);
        self.state = None;
    }
}
