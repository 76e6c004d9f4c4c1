//! The face of the drift history's readers (the web view, `/metrics`, `driftwatch
//! history`): episodes, the fleet's open ones, sync operations and break-glass
//! exceptions. The passes write the history with their own write
//! (`PassStore::write_pass_due`) and the settles note outcomes in it (`Outbox::settle`).

use std::collections::BTreeMap;
use std::sync::Arc;

use chrono::{DateTime, Utc};

use super::store::Shared;
use super::tables::{break_glass, episodes, operations};
use super::{HistoryQuery, OpenEpisode, Retention, StateError};
use crate::drift::break_glass::Record;
use crate::drift::episode::Episode;
use crate::drift::operation::OperationRecord;

/// The face of the drift history (see the module's documentation).
#[derive(Clone)]
pub struct History(Arc<Shared>);

impl History {
    pub(super) fn new(shared: Arc<Shared>) -> History {
        History(shared)
    }

    /// Episodes matching `q`, oldest first. Read newest first, stopping once `limit`
    /// match: a filter is checked on the few fields it needs (decoded without the
    /// rest), and only a match is decoded whole, so `/history?limit=20` decodes 20
    /// episodes, not the history.
    pub fn episodes(&self, q: &HistoryQuery) -> Result<Vec<Episode>, StateError> {
        self.0.read_with(|tx| episodes::query(tx, q))
    }

    /// The newest episode of an Application (open, or the last resolved one).
    pub fn latest_episode(&self, app: &str) -> Result<Option<Episode>, StateError> {
        self.0.read_with(|tx| episodes::latest(tx, app))
    }

    /// Every open episode's summary (one per Application with one, at most as many as
    /// it watches; unreadable summaries are skipped), in no particular order.
    pub fn open_episodes(&self) -> Result<Vec<OpenEpisode>, StateError> {
        self.0.read_with(episodes::open)
    }

    /// Open episodes by class (an episode of several classes counts in each; one of
    /// none in `none`): reads the counters kept with them, one entry per class.
    pub fn open_episodes_by_class(&self) -> Result<BTreeMap<String, u64>, StateError> {
        self.0.read_with(episodes::open_by_class)
    }

    /// Sync operations of the Applications matching `q.app` (`namespace/name`, or a
    /// name), oldest first, at most `limit` (the newest).
    pub fn operations(&self, q: &HistoryQuery, limit: usize) -> Result<Vec<OperationRecord>, StateError> {
        self.0.read_with(|tx| operations::list(tx, q, limit))
    }

    /// Break-glass exceptions of the Applications matching `q.app`, oldest first, at
    /// most `limit` (the newest).
    pub fn break_glass_history(&self, q: &HistoryQuery, limit: usize) -> Result<Vec<Record>, StateError> {
        self.0.read_with(|tx| break_glass::list(tx, q, limit))
    }

    /// Stores an episode (new or changed) as its Application's latest; a new one
    /// prunes the history to `retention`.
    pub fn save_episode(&self, ep: &Episode, retention: Retention, now: DateTime<Utc>) -> Result<(), StateError> {
        self.0.write_with(|tx| episodes::save(tx, ep, retention, now))
    }

    /// Stores episodes in one transaction, in order, as [`History::save_episode`]
    /// would one by one: for seeding a state file with a large history (the live
    /// benchmark's web view scenario) without a commit per episode.
    pub fn save_episodes(&self, eps: &[Episode], retention: Retention, now: DateTime<Utc>) -> Result<(), StateError> {
        self.0.write_with(|tx| eps.iter().try_for_each(|ep| episodes::save(tx, ep, retention, now)))
    }
}
