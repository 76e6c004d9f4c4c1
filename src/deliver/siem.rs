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

/// The time a record says it is about (an episode step's when it happened): OCSF's
/// `time` (epoch milliseconds), ECS's `@timestamp`.
pub fn record_time(record: &Value) -> Option<chrono::DateTime<chrono::Utc>> {
    if let Some(ms) = record.get("time").and_then(Value::as_i64) {
        return chrono::DateTime::<chrono::Utc>::from_timestamp_millis(ms);
    }
    let text = record.get("@timestamp").and_then(Value::as_str)?;
    chrono::DateTime::parse_from_rfc3339(text).ok().map(|t| t.with_timezone(&chrono::Utc))
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

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::Schema;

    /// `format: ocsf-1.7.0` writes the same records, each saying 1.7.0 and valid against
    /// OCSF 1.7.0's schemas; `format: ocsf` says 1.8.0 and is valid against 1.8.0's.
    #[test]
    fn records_follow_the_version_their_destination_asks_for() {
        let now = chrono::Utc::now();
        let mut n = crate::deliver::ocsf::tests::sample();
        n.episode = Some(crate::deliver::ocsf::tests::an_episode_with_requests());
        let (new, old) = (
            Schema::Ocsf.records(&n, &crate::deliver::ocsf::tests::origin(), now),
            Schema::Ocsf1_7.records(&n, &crate::deliver::ocsf::tests::origin(), now),
        );
        assert_eq!(new.len(), 3);
        assert_eq!(new.len(), old.len());
        for (a, b) in new.iter().zip(&old) {
            assert_eq!((a["metadata"]["version"].as_str(), b["metadata"]["version"].as_str()), (Some("1.8.0"), Some("1.7.0")));
            crate::deliver::ocsf::tests::assert_valid(a);
            crate::deliver::ocsf::tests::assert_valid(b);
            let (mut a, mut b) = (a.clone(), b.clone());
            a["metadata"]["version"] = json!(null);
            b["metadata"]["version"] = json!(null);
            assert_eq!(a, b, "only the version differs");
        }
        let parsed: Schema = serde_json::from_value(json!("ocsf-1.7.0")).unwrap();
        assert_eq!(parsed, Schema::Ocsf1_7);
        let refused = serde_json::from_value::<Schema>(json!("ocsf-1.6.0")).unwrap_err().to_string();
        assert!(refused.contains("ocsf-1.7.0") && refused.contains("ecs"), "the error lists what is accepted: {refused}");
    }
}
