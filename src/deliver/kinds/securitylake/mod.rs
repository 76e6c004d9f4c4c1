//! Amazon Security Lake through a custom source: OCSF records written as Parquet
//! objects, one OCSF class each, under the source's partitioned prefix in its S3
//! bucket (or any S3-compatible store), with AWS SigV4 signing and an optional role
//! assumed through STS. Records wait in the durable outbox until their file closes
//! (by age or size); the queue sends a file whole and settles it whole
//! (`deliver::queue::files`), and each object is named from its records, so a crash
//! between a write and its settle writes the same object again, not a second one.

mod client;
mod config;
mod credentials;
mod payload;
mod sigv4;
#[cfg(test)]
mod tests;

pub use client::LakeClient;
pub use config::SecurityLakeConfig;

use std::sync::Arc;
use std::time::Duration;

use crate::deliver::Deliverer;
use crate::deliver::deliverer::FileCut;
use crate::deliver::env::Env;
use crate::deliver::kind::{ArgoService, BuildError, Kind, Limits, NoSection, SettingsError};
use crate::deliver::siem::Schema;
use crate::model::DestinationKind;
use crate::template::Encoder;

/// A file's age: five minutes by default, from five minutes to a day (Security Lake
/// asks for objects every 5 minutes to once a day).
pub const DEFAULT_FILE_AGE: Duration = Duration::from_secs(300);
const FILE_AGE: std::ops::RangeInclusive<Duration> = Duration::from_secs(300)..=Duration::from_secs(24 * 3600);
/// A file's records' JSON: 64 MiB by default, at most 256 MiB (Security Lake's most
/// for an object), at least 1 KiB.
pub const DEFAULT_MAX_FILE_BYTES: u64 = 64 << 20;
const MAX_FILE_BYTES: std::ops::RangeInclusive<u64> = 1024..=256 << 20;
/// Notifications per file at most: half a service's outbox, so a file closes before
/// the outbox is full and refuses new ones.
const MAX_FILE_NOTIFICATIONS: usize = crate::state::MAX_OUTBOX_PER_SERVICE / 2;

/// This kind's encoder: the rendered message (the records are built from the
/// notification, not from a template).
pub fn encode(f: &crate::template::Fields<'_>, _: &crate::template::Target<'_>, _: &crate::model::App) -> crate::template::Payload {
    f.message_trimmed()
}

/// How a service's files are cut.
pub fn file_cut(c: &SecurityLakeConfig) -> FileCut {
    FileCut {
        age: c.file_age.map_or(DEFAULT_FILE_AGE, |d| d.0),
        max_weight: c.max_file_bytes.unwrap_or(DEFAULT_MAX_FILE_BYTES),
        max_count: MAX_FILE_NOTIFICATIONS,
    }
}

/// The Security Lake kind: what the registry (`deliver::kinds`) needs of it.
pub struct SecurityLake;

impl Kind for SecurityLake {
    const KIND: DestinationKind = DestinationKind::SecurityLake;
    type Config = SecurityLakeConfig;
    // Files, not requests per notification: one file at a time.
    const LIMITS: Limits = Limits { per_second: 10.0, burst: 10, concurrency: 1 };
    const ENCODE: Encoder = encode;
    // A SIEM: one record per notification, also on grouped routes.
    const SIEM: bool = true;
    type Template = NoSection;
    // Argo CD has no such service.
    const ARGO: Option<ArgoService> = None;

    fn validate(c: &SecurityLakeConfig) -> Result<(), SettingsError> {
        let rule = |m: String| Err(SettingsError::Rule(m));
        let cut = file_cut(c);
        if !FILE_AGE.contains(&cut.age) {
            return rule(format!("fileAge must be from 5m to 24h (Security Lake takes objects every 5 minutes to once a day), not {:?}", cut.age));
        }
        if !MAX_FILE_BYTES.contains(&cut.max_weight) {
            return rule(format!("maxFileBytes must be from 1024 to 268435456 (256 MiB, Security Lake's most), not {}", cut.max_weight));
        }
        if c.format == Schema::Ecs {
            return rule("format must be ocsf or ocsf-1.7.0: Security Lake takes OCSF only".into());
        }
        let named = |v: &str, extra: &[char]| !v.is_empty() && v.chars().all(|ch| ch.is_ascii_alphanumeric() || extra.contains(&ch));
        // They go into object keys and host names: nothing that would end a segment.
        if !(3..=63).contains(&c.bucket.len()) || !named(&c.bucket, &['-', '.']) || c.bucket.chars().any(|ch| ch.is_ascii_uppercase()) {
            return rule(format!("bucket is an S3 bucket name (3 to 63 lower-case letters, digits, '-' and '.'), not {:?}", c.bucket));
        }
        if !named(&c.region, &['-']) {
            return rule(format!("region is an AWS Region (eu-west-1), not {:?}", c.region));
        }
        if c.account_id.len() != 12 || !c.account_id.chars().all(|ch| ch.is_ascii_digit()) {
            return rule(format!("accountId is a 12-digit AWS account id, not {:?}", c.account_id));
        }
        let sources = std::iter::once(("sourceName", &c.source_name)).chain(c.class_sources.values().map(|v| ("classSources", v)));
        for (key, v) in sources.chain(c.source_version.iter().map(|v| ("sourceVersion", v))) {
            if !named(v, &['-', '_', '.']) || v.len() > 64 {
                return rule(format!("{key} may hold only letters, digits, '-', '_' and '.' (at most 64), not {v:?}"));
            }
        }
        if let Some(k) = c.class_sources.keys().find(|k| k.parse::<u32>().is_err()) {
            return rule(format!("classSources are keyed by an OCSF class uid (2004), not {k:?}"));
        }
        // Signed requests go to both: never in clear.
        for (key, url) in [("endpoint", c.endpoint.as_ref()), ("stsEndpoint", c.sts_endpoint.as_ref())] {
            if let Some(why) = url.and_then(|u| crate::deliver::http::not_https(u)) {
                return rule(format!("{key} {why}"));
            }
        }
        if let Some(arn) = c.role_arn.as_ref().filter(|a| !a.starts_with("arn:") || !a.contains(":role/")) {
            return rule(format!("roleArn is an IAM role's ARN (arn:aws:iam::<account>:role/<name>), not {arn:?}"));
        }
        if c.role_arn.is_none() && (c.external_id.is_some() || c.sts_endpoint.is_some()) {
            return rule("externalId and stsEndpoint are for roleArn".into());
        }
        Ok(())
    }

    fn secrets(c: &SecurityLakeConfig) -> Vec<&str> {
        [Some(&c.access_key_id), Some(&c.secret_access_key), c.session_token.as_ref()].into_iter().flatten().map(String::as_str).collect()
    }

    fn client(_name: &str, c: &SecurityLakeConfig, env: &Env) -> Result<Arc<dyn Deliverer>, BuildError> {
        Ok(Arc::new(LakeClient::new(c, env, file_cut(c))?))
    }
}
