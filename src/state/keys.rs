//! The delivered keys (table `notified`): per Application, each dedup key with when
//! its delivery settled. Only a settle records one (`record_in`, in the settle's
//! transaction); a pass's re-arm forgets one; the oldest beyond the bound per
//! Application go.

use super::{NOTIFIED, SEP, StateError, StateStore, StateView, WriteTransaction, app_range, storage};

impl StateStore {
    pub fn is_notified(&self, app: &str, key: &str) -> Result<bool, StateError> {
        self.view()?.is_notified(app, key)
    }

    /// Records a delivered notification, then prunes the Application's oldest keys
    /// beyond the bound. Durable when this returns.
    #[cfg(test)]
    pub fn record(&self, app: &str, key: &str, at_millis: u64) -> Result<(), StateError> {
        let tx = self.db.begin_write().map_err(storage)?;
        self.record_in(&tx, app, key, at_millis)?;
        tx.commit().map_err(storage)
    }

    /// [`StateStore::record`] inside a caller's transaction.
    pub(super) fn record_in(&self, tx: &WriteTransaction, app: &str, key: &str, at_millis: u64) -> Result<(), StateError> {
        let mut table = tx.open_table(NOTIFIED).map_err(storage)?;
        table.insert(Self::full_key(app, key).as_str(), at_millis).map_err(storage)?;
        let (lo, hi) = app_range(app);
        let mut entries: Vec<(String, u64)> = Vec::new();
        for item in table.range(lo.as_str()..hi.as_str()).map_err(storage)? {
            let (k, v) = item.map_err(storage)?;
            entries.push((k.value().to_string(), v.value()));
        }
        if entries.len() > self.max_keys_per_app {
            entries.sort_by_key(|(k, at)| (*at, k.clone()));
            let excess = entries.len() - self.max_keys_per_app;
            for (k, _) in entries.into_iter().take(excess) {
                table.remove(k.as_str()).map_err(storage)?;
            }
        }
        Ok(())
    }

    /// Forgets a key inside a caller's transaction.
    pub(super) fn forget_in(tx: &WriteTransaction, app: &str, key: &str) -> Result<(), StateError> {
        let mut table = tx.open_table(NOTIFIED).map_err(storage)?;
        table.remove(Self::full_key(app, key).as_str()).map_err(storage)?;
        Ok(())
    }

    /// Forgets one key (a plain trigger whose condition turned false re-arms).
    /// Returns whether it was there.
    #[cfg(test)]
    pub fn forget(&self, app: &str, key: &str) -> Result<bool, StateError> {
        let tx = self.db.begin_write().map_err(storage)?;
        let removed = {
            let mut table = tx.open_table(NOTIFIED).map_err(storage)?;
            table.remove(Self::full_key(app, key).as_str()).map_err(storage)?.is_some()
        };
        tx.commit().map_err(storage)?;
        Ok(removed)
    }

    /// When a key was recorded (unix ms), if it is.
    pub fn notified_at(&self, app: &str, key: &str) -> Result<Option<u64>, StateError> {
        self.view()?.notified_at(app, key)
    }

    /// Every key of one Application with its delivery time.
    pub fn keys(&self, app: &str) -> Result<Vec<(String, u64)>, StateError> {
        self.view()?.keys(app)
    }

    /// Every Application key in the store.
    pub fn apps(&self) -> Result<Vec<String>, StateError> {
        let tx = self.db.begin_read().map_err(storage)?;
        let table = tx.open_table(NOTIFIED).map_err(storage)?;
        let mut out: Vec<String> = Vec::new();
        for item in table.iter().map_err(storage)? {
            let (k, _) = item.map_err(storage)?;
            if let Some((app, _)) = k.value().split_once(SEP)
                && out.last().map(String::as_str) != Some(app)
            {
                out.push(app.to_string());
            }
        }
        Ok(out)
    }
}

impl StateView {
    pub(super) fn is_notified(&self, app: &str, key: &str) -> Result<bool, StateError> {
        Ok(self.notified_at(app, key)?.is_some())
    }

    /// When a key was recorded (unix ms), if it is.
    pub(super) fn notified_at(&self, app: &str, key: &str) -> Result<Option<u64>, StateError> {
        let table = self.tx.open_table(NOTIFIED).map_err(storage)?;
        Ok(table.get(StateStore::full_key(app, key).as_str()).map_err(storage)?.map(|v| v.value()))
    }

    /// Every key of one Application with its delivery time.
    pub(super) fn keys(&self, app: &str) -> Result<Vec<(String, u64)>, StateError> {
        let table = self.tx.open_table(NOTIFIED).map_err(storage)?;
        let (lo, hi) = app_range(app);
        let mut out = Vec::new();
        for item in table.range(lo.as_str()..hi.as_str()).map_err(storage)? {
            let (k, v) = item.map_err(storage)?;
            let key = k.value().split_once(SEP).map(|(_, k)| k.to_string()).unwrap_or_default();
            out.push((key, v.value()));
        }
        Ok(out)
    }
}
