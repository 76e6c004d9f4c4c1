//! The face of the drift history's readers (the web view, `/metrics`, `driftwatch
//! history`): episodes, the fleet's open ones, sync operations and break-glass
//! exceptions. The passes write the history with their own write
//! (`PassStore::write_pass_due`) and the settles note outcomes in it (`Outbox::settle`).

use std::collections::BTreeMap;
use std::sync::Arc;

use chrono::{DateTime, Utc};

use super::StateError;
use super::store::Shared;
use super::tables::{break_glass, episodes, operations};
use crate::drift::break_glass::Record;
use crate::drift::episode::Episode;
use crate::drift::operation::OperationRecord;

/// What the fleet view shows of an open episode, kept beside it so a look at the fleet
/// reads one small entry per open episode.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct OpenEpisode {
    pub id: String,
    pub namespace: String,
    pub name: String,
    /// A Flux or Fleet unit's kind (`Kustomization`); empty for an Application.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub unit_kind: String,
    #[serde(default)]
    pub project: String,
    #[serde(default)]
    pub cluster: String,
    pub opened_at: DateTime<Utc>,
    pub severity: crate::model::Severity,
    #[serde(default)]
    pub classes: Vec<String>,
    /// The person behind it (the audit input's), else the field manager that wrote it.
    #[serde(default)]
    pub who: String,
    /// The ticket of the break-glass exception it is recorded against.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub break_glass: Option<String>,
}

impl OpenEpisode {
    pub fn of(ep: &Episode) -> OpenEpisode {
        let person = ep
            .attempts
            .iter()
            .map(|a| a.actor.username.as_str())
            .chain(ep.attribution.iter().filter_map(|a| a.actor.as_ref().map(|a| a.username.as_str())))
            .find(|u| !u.is_empty());
        let who = person.or_else(|| ep.attribution.first().map(|a| a.manager.as_str())).unwrap_or_default();
        OpenEpisode {
            id: ep.id.clone(),
            namespace: ep.namespace.clone(),
            name: ep.name.clone(),
            unit_kind: ep.unit_kind.clone(),
            project: ep.project.clone(),
            cluster: ep.cluster.clone(),
            opened_at: ep.opened_at,
            severity: ep.severity,
            classes: ep.classes.iter().cloned().collect(),
            who: who.to_string(),
            break_glass: ep.break_glass.as_ref().map(|b| b.ticket.clone()),
        }
    }
}

/// How much history is kept.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Retention {
    pub max_episodes: usize,
    pub max_age: chrono::Duration,
}

impl Default for Retention {
    fn default() -> Self {
        Retention { max_episodes: 10_000, max_age: chrono::Duration::days(90) }
    }
}

/// What `driftwatch history` asks for.
#[derive(Debug, Clone, Default)]
pub struct HistoryQuery {
    /// `name` or `namespace/name`.
    pub app: Option<String>,
    /// Episodes open at or after this instant.
    pub since: Option<DateTime<Utc>>,
    /// Episodes opened at or before this instant (with `since`, those going on at some
    /// time in between); operations and exceptions at or before it.
    pub until: Option<DateTime<Utc>>,
    pub class: Option<String>,
    /// At most this many, the newest.
    pub limit: Option<usize>,
}

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
