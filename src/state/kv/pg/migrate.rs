//! The schema's migrations: versioned in `schema_version`, applied at start under an
//! advisory lock, in one transaction.

use super::{KvError, Pg, ident, literal, pg_err};

/// The newest schema this build knows: the migrations are `MIGRATIONS[..SCHEMA_VERSION]`.
pub const SCHEMA_VERSION: i32 = 2;

/// Each migration, in order; a migration is never edited once released (add one).
const MIGRATIONS: [&str; SCHEMA_VERSION as usize] = [
    // 1: the tables, their counters and the fence.
    r#"
    CREATE TABLE kv (t text COLLATE "C" NOT NULL, k bytea NOT NULL, v bytea NOT NULL, PRIMARY KEY (t, k));
    CREATE TABLE kv_len (t text COLLATE "C" PRIMARY KEY, n bigint NOT NULL);
    CREATE TABLE fence (
        name text PRIMARY KEY,
        epoch bigint NOT NULL,
        holder text NOT NULL,
        lease_transitions bigint,
        taken_at timestamptz NOT NULL DEFAULT now()
    );
    INSERT INTO fence (name, epoch, holder) VALUES ('state', 0, '');
    "#,
    // 2: the creation time of the Lease the store was taken over with (a Lease deleted
    // and created again starts its count of holder changes at 0 and is newer).
    r#"
    ALTER TABLE fence ADD COLUMN lease_created bigint;
    "#,
];

impl Pg {
    /// Brings the schema to [`SCHEMA_VERSION`] in one transaction, under an advisory
    /// lock (replicas starting together migrate once).
    pub(super) fn migrate(&self) -> Result<(), KvError> {
        let mut c = self.conn()?;
        let schema = ident(&self.schema);
        let mut tx = c.transaction().map_err(pg_err)?;
        tx.batch_execute(&format!(
            "SELECT pg_advisory_xact_lock(hashtext({}));
             CREATE SCHEMA IF NOT EXISTS {schema};
             CREATE TABLE IF NOT EXISTS {schema}.schema_version (version integer NOT NULL, applied_at timestamptz NOT NULL DEFAULT now());",
            literal(&format!("driftwatch-migrate:{}", self.schema))
        ))
        .map_err(|e| KvError::new(format!("preparing schema {}: {}", self.schema, pg_err(e))))?;
        let row = tx.query_one("SELECT coalesce(max(version), 0) FROM schema_version", &[]).map_err(pg_err)?;
        let at: i32 = row.try_get(0).map_err(pg_err)?;
        if at > SCHEMA_VERSION {
            return Err(KvError::new(format!(
                "the state schema {} in PostgreSQL is at version {at}, written by a newer driftwatch; this one knows up to version {SCHEMA_VERSION}: run the newer version",
                self.schema
            )));
        }
        for (i, sql) in MIGRATIONS.iter().enumerate().skip(usize::try_from(at).unwrap_or(0)) {
            let version = i32::try_from(i + 1).unwrap_or(i32::MAX);
            tx.batch_execute(sql).map_err(|e| {
                KvError::new(format!(
                    "migrating the state schema {} to version {version} failed, and changed nothing: {}",
                    self.schema,
                    pg_err(e)
                ))
            })?;
            tx.execute("INSERT INTO schema_version (version) VALUES ($1)", &[&version]).map_err(pg_err)?;
            tracing::info!(schema = %self.schema, version, "migrated the state schema");
        }
        tx.commit().map_err(pg_err)
    }
}
