//! A file's OCSF records as Security Lake objects: one Parquet object per OCSF class
//! and event day, under the custom source's partitioned prefix
//! (`ext/<source>/<version>/region=<region>/accountId=<account>/eventDay=YYYYMMDD/`),
//! each named from its records (deterministic: the same records, the same object).
//! Pure: no network, no clock.
//!
//! Columns: each record's top-level attributes, nested objects as Parquet structs and
//! arrays as lists, the types inferred from the records (Arrow's JSON reader): what
//! Security Lake's crawler reads into the source's table, so `metadata.product.name`
//! is a column path a query can use, as in Security Lake's own sources. Nulls, empty
//! objects and empty arrays are left out (Parquet has no empty struct; a missing
//! attribute reads as null). Records whose types cannot share one schema (an
//! attribute a string in one, an object in another) are written with their nested
//! attributes as JSON text instead, rather than refused.

use std::collections::BTreeMap;
use std::sync::Arc;

use serde_json::Value;
use sha2::{Digest, Sha256};

use crate::deliver::siem::{record_id, record_time};

/// Where a service's objects go.
#[derive(Debug, Clone, PartialEq)]
pub struct Layout {
    pub region: String,
    pub account_id: String,
    pub source_name: String,
    pub source_version: String,
    /// A source per class uid, for the classes that have their own.
    pub class_sources: BTreeMap<i64, String>,
}

/// One object to write.
#[derive(Debug, Clone, PartialEq)]
pub struct Object {
    /// The key in the bucket (unencoded).
    pub key: String,
    pub class_uid: i64,
    pub records: usize,
    pub body: Vec<u8>,
}

impl Layout {
    /// The object key of a file of `class_uid` on `day` (YYYYMMDD) holding `records`
    /// (in order): the class's source prefix, the partition, and a name made from the
    /// class, the first and last records' identities and the count.
    pub fn key(&self, class_uid: i64, day: &str, records: &[Value]) -> String {
        let source = self.class_sources.get(&class_uid).unwrap_or(&self.source_name);
        let first = records.first().map(record_id).unwrap_or_default();
        let last = records.last().map(record_id).unwrap_or_default();
        let digest = Sha256::digest(format!("{class_uid}\u{0}{first}\u{0}{last}\u{0}{}", records.len()).as_bytes());
        let name: String = digest.iter().take(16).map(|b| format!("{b:02x}")).collect();
        format!(
            "ext/{source}/{}/region={}/accountId={}/eventDay={day}/{class_uid}-{name}.parquet",
            self.source_version, self.region, self.account_id
        )
    }
}

/// The objects of `records` (a file's, in queueing order): split by class and event
/// day (the records' own `time`, UTC), each keeping the records' order.
pub fn objects(layout: &Layout, records: Vec<Value>) -> Result<Vec<Object>, String> {
    let mut parts: BTreeMap<(i64, String), Vec<Value>> = BTreeMap::new();
    for r in records {
        let class = r.get("class_uid").and_then(Value::as_i64).ok_or("a record without class_uid")?;
        let day = record_time(&r).ok_or("a record without time")?.format("%Y%m%d").to_string();
        parts.entry((class, day)).or_default().push(r);
    }
    parts
        .into_iter()
        .map(|((class_uid, day), records)| {
            let key = layout.key(class_uid, &day, &records);
            Ok(Object { key, class_uid, records: records.len(), body: parquet(&records)? })
        })
        .collect()
}

/// `records` as one Parquet file (one row group, GZIP pages).
pub fn parquet(records: &[Value]) -> Result<Vec<u8>, String> {
    let pruned: Vec<Value> = records.iter().cloned().map(prune).collect();
    match write(&pruned) {
        Ok(bytes) => Ok(bytes),
        // Types that do not agree between records: their nested attributes as text.
        Err(_) => write(&pruned.into_iter().map(flatten).collect::<Vec<_>>()),
    }
}

fn write(rows: &[Value]) -> Result<Vec<u8>, String> {
    use parquet::arrow::ArrowWriter;
    use parquet::basic::{Compression, GzipLevel};
    use parquet::file::properties::WriterProperties;
    let e = |e: &dyn std::fmt::Display| format!("parquet: {e}");
    let schema = arrow_json::reader::infer_json_schema_from_iterator(rows.iter().map(Ok)).map_err(|x| e(&x))?;
    let mut decoder = arrow_json::ReaderBuilder::new(Arc::new(schema))
        .with_batch_size(rows.len().max(1))
        .with_coerce_primitive(true)
        .build_decoder()
        .map_err(|x| e(&x))?;
    decoder.serialize(rows).map_err(|x| e(&x))?;
    let batch = decoder.flush().map_err(|x| e(&x))?.ok_or("parquet: no records")?;
    let props = WriterProperties::builder().set_compression(Compression::GZIP(GzipLevel::default())).build();
    let mut out = Vec::new();
    let mut writer = ArrowWriter::try_new(&mut out, batch.schema(), Some(props)).map_err(|x| e(&x))?;
    writer.write(&batch).map_err(|x| e(&x))?;
    writer.close().map_err(|x| e(&x))?;
    Ok(out)
}

/// `v` without nulls, empty objects and empty arrays, at any depth.
fn prune(v: Value) -> Value {
    match v {
        Value::Object(m) => Value::Object(m.into_iter().map(|(k, v)| (k, prune(v))).filter(|(_, v)| !is_empty(v)).collect()),
        Value::Array(a) => Value::Array(a.into_iter().map(prune).filter(|v| !is_empty(v)).collect()),
        other => other,
    }
}

fn is_empty(v: &Value) -> bool {
    match v {
        Value::Null => true,
        Value::Object(m) => m.is_empty(),
        Value::Array(a) => a.is_empty(),
        _ => false,
    }
}

/// A record with each nested attribute (object or array) as its JSON text.
fn flatten(v: Value) -> Value {
    match v {
        Value::Object(m) => Value::Object(
            m.into_iter()
                .map(|(k, v)| match v {
                    Value::Object(_) | Value::Array(_) => (k, Value::String(v.to_string())),
                    other => (k, other),
                })
                .collect(),
        ),
        other => other,
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn layout() -> Layout {
        Layout {
            region: "eu-west-1".into(),
            account_id: "123456789012".into(),
            source_name: "driftwatch".into(),
            source_version: "1.0".into(),
            class_sources: [(6003, "driftwatch-api".to_string())].into(),
        }
    }

    fn record(uid: &str, class: i64, time: i64) -> Value {
        json!({"class_uid": class, "time": time, "metadata": {"uid": uid, "version": "1.8.0", "labels": []}, "message": "m", "unmapped": null})
    }

    /// One object per class and day, under the partition; its name depends on its
    /// records only, so the same records make the same key.
    #[test]
    fn one_object_per_class_and_day_named_from_its_records() {
        let day1 = 1_772_323_200_000; // 2026-03-01T00:00:00Z
        let records = vec![record("a", 2004, day1), record("b", 6003, day1), record("c", 2004, day1 + 1), record("d", 2004, day1 + 86_400_000)];
        let objects = objects(&layout(), records.clone()).unwrap();
        let keys: Vec<&str> = objects.iter().map(|o| o.key.as_str()).collect();
        assert_eq!(keys.len(), 3, "{keys:?}");
        assert!(keys[0].starts_with("ext/driftwatch/1.0/region=eu-west-1/accountId=123456789012/eventDay=20260301/2004-"), "{keys:?}");
        assert!(keys[1].starts_with("ext/driftwatch/1.0/region=eu-west-1/accountId=123456789012/eventDay=20260302/2004-"), "{keys:?}");
        assert!(keys[2].starts_with("ext/driftwatch-api/1.0/region=eu-west-1/accountId=123456789012/eventDay=20260301/6003-"), "{keys:?}");
        assert_eq!(objects.iter().map(|o| o.records).sum::<usize>(), 4);
        let again = super::objects(&layout(), records.clone()).unwrap();
        assert_eq!(again.iter().map(|o| &o.key).collect::<Vec<_>>(), objects.iter().map(|o| &o.key).collect::<Vec<_>>());
        let fewer = super::objects(&layout(), records[1..].to_vec()).unwrap();
        assert_ne!(fewer[0].key, objects[0].key, "other records, another name");
        assert!(objects.iter().all(|o| o.body.starts_with(b"PAR1") && o.body.ends_with(b"PAR1")));
    }

    /// Nested objects become structs; records whose types disagree still make a file.
    #[test]
    fn nested_attributes_are_structs_and_disagreeing_types_are_text() {
        let bytes = parquet(&[record("a", 2004, 1)]).unwrap();
        let reader = parquet::file::reader::SerializedFileReader::new(bytes::Bytes::from(bytes)).unwrap();
        use parquet::file::reader::FileReader;
        let schema = reader.metadata().file_metadata().schema_descr();
        let paths: Vec<String> = schema.columns().iter().map(|c| c.path().string()).collect();
        assert!(paths.contains(&"metadata.uid".to_string()), "{paths:?}");
        assert!(!paths.iter().any(|p| p.contains("unmapped") || p.contains("labels")), "empty and null left out: {paths:?}");
        let odd = [json!({"class_uid": 2004, "x": "text"}), json!({"class_uid": 2004, "x": {"y": 1}})];
        assert!(parquet(&odd).is_ok());
    }
}
