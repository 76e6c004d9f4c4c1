//! Which schema a SIEM destination's records follow (`format:` on Splunk HEC, the
//! signed webhook and syslog), and a notification's records in it.

use serde::Deserialize;
use serde_json::Value;

use super::ecs::{self, Origin};
use super::ocsf;
use crate::model::Notification;

/// A record's identity, whichever its schema: ECS `event.id`, OCSF `metadata.uid` (the
/// delivery's idempotency key; an API Activity's request identity, made by driftwatch);
/// empty if it has none.
pub fn record_id(record: &Value) -> &str {
    record.pointer("/metadata/uid").or_else(|| record.pointer("/event/id")).and_then(Value::as_str).unwrap_or_default()
}

/// `ecs` (the default): one Elastic Common Schema record per notification; `ocsf`:
/// OCSF 1.8.0 records ([`ocsf::records`]: a Detection Finding and the API Activity of
/// each audited request, or an API Activity for a sync); `ocsf-1.7.0`: the same in
/// OCSF 1.7.0.
#[derive(Debug, Clone, Copy, Default, Deserialize, PartialEq, Eq)]
pub enum Schema {
    #[default]
    #[serde(rename = "ecs")]
    Ecs,
    #[serde(rename = "ocsf")]
    Ocsf,
    #[serde(rename = "ocsf-1.7.0")]
    Ocsf1_7,
}

impl Schema {
    /// The records of `n` at `now`, in order.
    pub fn records(self, n: &Notification, origin: &Origin, now: chrono::DateTime<chrono::Utc>) -> Vec<Value> {
        match self {
            Schema::Ecs => vec![ecs::record(n, origin, now)],
            Schema::Ocsf => ocsf::records(n, origin, now, ocsf::VERSION),
            Schema::Ocsf1_7 => ocsf::records(n, origin, now, ocsf::VERSION_1_7),
        }
    }

    /// `record` shrunk to at most `max` bytes of JSON (one syslog datagram).
    pub fn fit(self, record: Value, max: usize) -> Value {
        match self {
            Schema::Ecs => ecs::fit(record, max),
            Schema::Ocsf | Schema::Ocsf1_7 => ocsf::fit(record, max),
        }
    }
}
