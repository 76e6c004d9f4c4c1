//! The settings of an Amazon Security Lake service (`services.<name>` in
//! driftwatch.yaml): a custom source's S3 location, how requests are signed, and how
//! files are cut; `$key` references are resolved when the client is built.

use std::collections::BTreeMap;

use serde::Deserialize;

use crate::source::ConfigDuration;

#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct SecurityLakeConfig {
    /// The Security Lake bucket (`aws-security-data-lake-<region>-<id>`), or any
    /// S3-compatible store's bucket.
    pub bucket: String,
    /// The bucket's AWS Region: the signing scope, the default endpoint's, and the
    /// partition's `region=`.
    pub region: String,
    /// The AWS account the records are about: the partition's `accountId=` (12 digits).
    pub account_id: String,
    /// The custom source's name, as created in Security Lake: objects go under
    /// `ext/<sourceName>/<sourceVersion>/`.
    pub source_name: String,
    /// The custom source's version; `1.0` when absent.
    pub source_version: Option<String>,
    /// A custom source per OCSF class (Security Lake advises one per class), by the
    /// class's uid (`"2004": driftwatch-findings`); a class not named goes to
    /// `sourceName`.
    #[serde(default)]
    pub class_sources: BTreeMap<String, String>,
    /// An S3-compatible endpoint (`https://minio.example.com:9000`); AWS's regional
    /// endpoint (`https://s3.<region>.amazonaws.com`) when absent.
    pub endpoint: Option<String>,
    /// Path-style addressing (`<endpoint>/<bucket>/<key>`, what most S3-compatible
    /// stores want) rather than virtual-hosted (`<bucket>.<endpoint host>/<key>`).
    #[serde(default)]
    pub path_style: bool,
    /// The access key id and secret access key, both `$secret`s.
    pub access_key_id: String,
    pub secret_access_key: String,
    /// The session token of temporary credentials, a `$secret`.
    pub session_token: Option<String>,
    /// A role to assume (STS `AssumeRole`) with the keys above: the custom source's
    /// provider role Security Lake created. Its credentials are kept and fetched again
    /// before they expire.
    pub role_arn: Option<String>,
    /// The external id the role's trust policy asks for (the custom source's).
    pub external_id: Option<String>,
    /// STS's endpoint; `https://sts.<region>.amazonaws.com` when absent.
    pub sts_endpoint: Option<String>,
    /// A file is closed once its oldest record has waited this long: from 5m (the
    /// default) to 24h, as Security Lake asks (objects every 5 minutes to once a day).
    pub file_age: Option<ConfigDuration>,
    /// A file is closed before its records' JSON would pass this many bytes (the
    /// Parquet object is smaller): from 1024 to 256 MiB (Security Lake's most);
    /// 64 MiB when absent. Each file is built in memory.
    pub max_file_bytes: Option<u64>,
    /// The records' OCSF version: `ocsf` (1.8.0, the default) or `ocsf-1.7.0`.
    /// Security Lake takes OCSF only.
    #[serde(default = "ocsf")]
    pub format: crate::deliver::siem::Schema,
    /// The endpoint's CA file and certificate check (STS's is always checked).
    pub ca_file: Option<String>,
    #[serde(default)]
    pub insecure_skip_verify: bool,
}

fn ocsf() -> crate::deliver::siem::Schema {
    crate::deliver::siem::Schema::Ocsf
}
