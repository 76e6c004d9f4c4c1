//! The fence: one row whose epoch a daemon takes when it takes the store over; a
//! write transaction whose epoch is no longer the row's is refused.

use super::{KvError, LeaseGeneration, Pg, pg_err};

impl Pg {
    /// A new epoch for this daemon; refused when the Lease it holds is older than the
    /// one recorded (another replica took over since): created earlier, or the same
    /// Lease with fewer changes of holder ([`LeaseGeneration`]). A store last taken over
    /// before creation times were recorded (schema version 1) is judged by the count
    /// alone, as then: otherwise any holder, a deposed one too, would be newer than it.
    pub(super) fn take_over(&self, holder: &str, lease: Option<LeaseGeneration>) -> Result<i64, KvError> {
        let mut c = self.conn()?;
        let lt = lease.map(|l| i64::try_from(l.transitions).unwrap_or(i64::MAX));
        let created = lease.map(|l| l.created);
        let row = c
            .query_opt(
                "UPDATE fence SET epoch = epoch + 1, holder = $1, lease_transitions = coalesce($2, lease_transitions),
                     lease_created = coalesce($3, lease_created), taken_at = now()
                 WHERE name = 'state' AND ($2::bigint IS NULL OR lease_transitions IS NULL
                     OR (lease_created IS NULL AND lease_transitions < $2)
                     OR (lease_created, lease_transitions) < ($3::bigint, $2::bigint)
                     OR (lease_created IS NOT DISTINCT FROM $3::bigint AND lease_transitions = $2 AND holder = $1)
                     OR (lease_created IS NULL AND lease_transitions = $2 AND holder = $1))
                 RETURNING epoch",
                &[&holder, &lt, &created],
            )
            .map_err(pg_err)?;
        match row {
            Some(r) => {
                let epoch: i64 = r.try_get(0).map_err(pg_err)?;
                tracing::info!(epoch, holder, "took the state store over (fencing epoch)");
                Ok(epoch)
            }
            None => {
                let now =
                    c.query_one("SELECT holder, lease_transitions, lease_created FROM fence WHERE name = 'state'", &[]).map_err(pg_err)?;
                let (by, at, born): (String, Option<i64>, Option<i64>) =
                    (now.try_get(0).map_err(pg_err)?, now.try_get(1).map_err(pg_err)?, now.try_get(2).map_err(pg_err)?);
                let when = |s: Option<i64>| {
                    s.and_then(|s| chrono::DateTime::from_timestamp(s, 0)).map_or("unknown".to_string(), |t| t.to_rfc3339())
                };
                Err(KvError::fenced(format!(
                    "fenced: the state store was taken over by {by} at Lease transition {} of a Lease created {}, after this replica's Lease (transition {}, created {}): not taking it back",
                    at.unwrap_or_default(),
                    when(born),
                    lt.unwrap_or_default(),
                    when(created)
                )))
            }
        }
    }

    /// Whether a write was refused because another daemon took the store over.
    pub fn fenced(&self) -> bool {
        self.fenced.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// A read transaction whose first round trip begins it and reads the fence: refused
    /// (and remembered) when another daemon took the store over since this one did.
    /// A delivery worker reads its batch so: a deposed leader starts no send after the
    /// takeover committed. No lock.
    pub fn begin_read_fenced(&self) -> Result<super::Tx, KvError> {
        let tx = self.begin(false)?;
        let Some(mine) = self.epoch else { return Ok(tx) };
        match tx.begin_reading_epoch()? {
            Some(now) => self.refuse_unless(mine, now).map(|()| tx),
            None => Err(KvError::new("the fence row of the state schema is missing")),
        }
    }

    pub(super) fn refuse_unless(&self, mine: i64, now: i64) -> Result<(), KvError> {
        if mine == now {
            return Ok(());
        }
        self.fenced.store(true, std::sync::atomic::Ordering::Relaxed);
        Err(KvError::fenced(format!(
            "fenced: another replica took the state store over (epoch {now}, this one holds {mine}); nothing written or sent"
        )))
    }
}
