//! `driftwatch state list`: what the store says was delivered, per Application.

use super::{Format, OK, Store, Value, Write, json};

/// `driftwatch state list (--state FILE | --config FILE) [--app PREFIX]`: what the
/// store says was delivered, per Application.
pub fn state_list(state: &Store, app_prefix: Option<&str>, format: Format, out: &mut dyn Write) -> anyhow::Result<i32> {
    let mut rows = Vec::new();
    for app in state.pass().apps()? {
        if app_prefix.is_some_and(|p| !app.starts_with(p)) {
            continue;
        }
        for (key, at) in state.pass().keys(&app)? {
            let when = crate::state::from_millis(at).to_rfc3339_opts(chrono::SecondsFormat::Secs, true);
            rows.push((app.clone(), key, when));
        }
    }
    let notes: Vec<(String, String)> =
        state.pass().notes()?.into_iter().filter(|(a, _)| app_prefix.is_none_or(|p| a.starts_with(p))).collect();
    match format {
        Format::Json => {
            // Notes are rows of their own: `{app, note}` instead of `{app, key, deliveredAt}`.
            let v: Vec<Value> = rows
                .iter()
                .map(|(a, k, w)| json!({"app": a, "key": k, "deliveredAt": w}))
                .chain(notes.iter().map(|(a, n)| json!({"app": a, "note": n})))
                .collect();
            writeln!(out, "{}", serde_json::to_string_pretty(&v)?)?;
        }
        Format::Text => {
            writeln!(out, "{:<40} {:<22} KEY", "APP", "DELIVERED")?;
            for (a, k, w) in &rows {
                writeln!(out, "{a:<40} {w:<22} {k}")?;
            }
            if !notes.is_empty() {
                writeln!(out, "\nNOTES")?;
                for (a, n) in &notes {
                    writeln!(out, "{a:<40} {n}")?;
                }
            }
        }
    }
    Ok(OK)
}
