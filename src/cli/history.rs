//! `driftwatch history`: the drift history as a table, JSON or CSV, its statistics
//! (`--stats`) and an Application's timeline (`--timeline`).

use std::collections::BTreeSet;
use std::io::Write;
use std::path::Path;

use chrono::{DateTime, Utc};
use serde_json::Value;

use super::OK;
use crate::drift::episode::Episode;
use crate::drift::story::Step;
use crate::duration::human_duration;
use crate::state::{HistoryQuery, Store};

/// Output formats of `history`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum HistoryFormat {
    Table,
    Json,
    Csv,
}

/// `driftwatch history --state FILE [--app A] [--since 24h] [--class C] [-o table|json|csv]`.
/// `driftwatch history` as the command line gives it: `--since` parsed, and the store
/// found from `--state`, else the configuration's (`state.path` or `state.postgres`),
/// else `driftwatch-state.redb`.
pub fn history_command(
    (state, config, shard): (Option<&Path>, Option<&Path>, Option<u32>),
    mut query: HistoryQuery,
    (since, until): (Option<String>, Option<String>),
    (format, stats, timeline): (HistoryFormat, bool, bool),
    err: &mut dyn Write,
) -> anyhow::Result<i32> {
    let (since, until) = match crate::duration::parse_window(("--since", since.as_deref()), ("--until", until.as_deref()), Utc::now()) {
        Ok(w) => w,
        Err(e) => {
            writeln!(err, "error: {e}")?;
            return Ok(super::BAD_INPUT);
        }
    };
    (query.since, query.until) = (since, until);
    let default = Path::new("driftwatch-state.redb");
    super::with_store((state, config, shard), Some(default), err, |store, _| {
        report(store, &query, (format, stats, timeline), &mut std::io::stdout())
    })
}

/// The history `query` asks for, from an open store.
fn report(
    state: &Store,
    query: &HistoryQuery,
    (format, stats, timeline): (HistoryFormat, bool, bool),
    out: &mut dyn Write,
) -> anyhow::Result<i32> {
    let episodes = state.history().episodes(query)?;
    match (stats, timeline) {
        (true, _) => write_stats(&episodes, format, out)?,
        (false, true) => {
            let limit = query.limit.unwrap_or(usize::MAX);
            let ops = state.history().operations(query, limit)?;
            let exceptions = state.history().break_glass_history(query, limit)?;
            write_timeline(&crate::drift::story::timeline(&episodes, &ops, &exceptions), format, out)?
        }
        (false, false) => write_history(&episodes, format, Utc::now(), out)?,
    }
    Ok(OK)
}

fn write_timeline(steps: &[Step], format: HistoryFormat, out: &mut dyn Write) -> std::io::Result<()> {
    match format {
        HistoryFormat::Json => writeln!(out, "{}", serde_json::to_string_pretty(&steps).unwrap_or_default()),
        HistoryFormat::Csv => {
            writeln!(out, "time,app,event,revision,by,episode,detail")?;
            for s in steps {
                let row = [
                    s.time.to_rfc3339(),
                    s.app.clone(),
                    s.event.clone(),
                    s.revision.clone(),
                    s.by.clone(),
                    s.episode.clone(),
                    s.detail.clone(),
                ];
                writeln!(out, "{}", row.iter().map(|c| csv_field(c)).collect::<Vec<_>>().join(","))?;
            }
            Ok(())
        }
        HistoryFormat::Table => {
            for s in steps {
                let rev =
                    if s.revision.is_empty() { String::new() } else { format!(" {}", s.revision.chars().take(7).collect::<String>()) };
                let by = if s.by.is_empty() { String::new() } else { format!(" by {}", s.by) };
                let line = format!(
                    "{}  {:<28} {:<11}{rev}{by}  {}",
                    s.time.to_rfc3339_opts(chrono::SecondsFormat::Secs, true),
                    s.app,
                    s.event,
                    s.detail
                );
                writeln!(out, "{}", line.trim_end())?;
            }
            writeln!(out, "{} step(s)", steps.len())
        }
    }
}

/// Detection and resolution times of a set of episodes.
#[derive(Debug, Default, PartialEq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Stats {
    pub episodes: usize,
    pub detection_p50: Option<i64>,
    pub detection_p95: Option<i64>,
    pub resolution_p50: Option<i64>,
    pub resolution_p95: Option<i64>,
}

/// The nearest-rank percentile `p` (0-100) of sorted `v`.
fn percentile(v: &[i64], p: usize) -> Option<i64> {
    if v.is_empty() {
        return None;
    }
    let rank = (p * v.len()).div_ceil(100).clamp(1, v.len());
    v.get(rank - 1).copied()
}

impl Stats {
    fn of<'a>(eps: impl Iterator<Item = &'a Episode>) -> Stats {
        let (mut detect, mut resolve, mut n) = (Vec::new(), Vec::new(), 0);
        for e in eps {
            n += 1;
            detect.extend(e.detection_secs());
            resolve.extend(e.resolution_secs());
        }
        detect.sort_unstable();
        resolve.sort_unstable();
        Stats {
            episodes: n,
            detection_p50: percentile(&detect, 50),
            detection_p95: percentile(&detect, 95),
            resolution_p50: percentile(&resolve, 50),
            resolution_p95: percentile(&resolve, 95),
        }
    }
}

/// `history --stats`: p50/p95 of time to detect and to resolve, per class and per
/// Application.
pub fn write_stats(episodes: &[Episode], format: HistoryFormat, out: &mut dyn Write) -> std::io::Result<()> {
    let mut classes: BTreeSet<&str> = BTreeSet::new();
    let mut apps: BTreeSet<String> = BTreeSet::new();
    for e in episodes {
        classes.extend(e.classes.iter().map(String::as_str));
        apps.insert(format!("{}/{}", e.namespace, e.name));
    }
    let by_class: Vec<(String, Stats)> =
        classes.iter().map(|c| (c.to_string(), Stats::of(episodes.iter().filter(|e| e.classes.contains(*c))))).collect();
    let by_app: Vec<(String, Stats)> =
        apps.iter().map(|a| (a.clone(), Stats::of(episodes.iter().filter(|e| format!("{}/{}", e.namespace, e.name) == *a)))).collect();
    let secs = |s: Option<i64>| s.map_or("-".to_string(), human_duration);
    match format {
        HistoryFormat::Json => {
            let map =
                |rows: &[(String, Stats)]| rows.iter().map(|(k, s)| (k.clone(), serde_json::json!(s))).collect::<serde_json::Map<_, _>>();
            writeln!(
                out,
                "{}",
                serde_json::to_string_pretty(&serde_json::json!({"byClass": map(&by_class), "byApp": map(&by_app)})).unwrap_or_default()
            )?;
        }
        HistoryFormat::Csv => {
            writeln!(out, "scope,name,episodes,detection_p50_seconds,detection_p95_seconds,resolution_p50_seconds,resolution_p95_seconds")?;
            let n = |s: Option<i64>| s.map(|v| v.to_string()).unwrap_or_default();
            for (scope, rows) in [("class", &by_class), ("app", &by_app)] {
                for (k, s) in rows {
                    let row = [
                        scope.to_string(),
                        k.clone(),
                        s.episodes.to_string(),
                        n(s.detection_p50),
                        n(s.detection_p95),
                        n(s.resolution_p50),
                        n(s.resolution_p95),
                    ];
                    writeln!(out, "{}", row.iter().map(|c| csv_field(c)).collect::<Vec<_>>().join(","))?;
                }
            }
        }
        HistoryFormat::Table => {
            for (title, rows) in [("CLASS", &by_class), ("APP", &by_app)] {
                writeln!(
                    out,
                    "{:<32} {:>8} {:>12} {:>12} {:>12} {:>12}",
                    title, "EPISODES", "DETECT p50", "DETECT p95", "RESOLVE p50", "RESOLVE p95"
                )?;
                for (k, s) in rows {
                    writeln!(
                        out,
                        "{:<32} {:>8} {:>12} {:>12} {:>12} {:>12}",
                        k,
                        s.episodes,
                        secs(s.detection_p50),
                        secs(s.detection_p95),
                        secs(s.resolution_p50),
                        secs(s.resolution_p95)
                    )?;
                }
                writeln!(out)?;
            }
            writeln!(
                out,
                "detection: the change (audit request, else managed-fields write) to Argo CD reporting it; resolution: reported to resolved"
            )?;
        }
    }
    Ok(())
}

/// Prints episodes in one of the `history` formats.
pub fn write_history(episodes: &[Episode], format: HistoryFormat, now: DateTime<Utc>, out: &mut dyn Write) -> std::io::Result<()> {
    let time = |t: Option<DateTime<Utc>>| t.map(|t| t.to_rfc3339_opts(chrono::SecondsFormat::Secs, true)).unwrap_or_default();
    let managers = |e: &Episode| -> String {
        let mut m: Vec<String> = e
            .attribution
            .iter()
            .map(|a| match &a.actor {
                Some(who) => format!("{} ({})", who.display(), a.manager),
                None => a.manager.clone(),
            })
            .collect();
        for a in e.attempts.iter().filter(|a| a.decision == crate::drift::audit::Decision::Denied) {
            m.push(format!("{} (refused)", a.actor.display()));
        }
        // Nobody known: say why (a spoke that did not answer, a kind not permitted).
        if m.is_empty() {
            for r in &e.resources {
                if let Some(nr) = r.attribution.as_ref().and_then(|a| a.not_read.as_ref()) {
                    let why = serde_json::to_value(nr.reason).ok().and_then(|v| v.as_str().map(str::to_string)).unwrap_or_default();
                    m.push(format!("(not read: {why})"));
                }
            }
        }
        m.dedup();
        m.join(";")
    };
    // Delivered notifications, and those that never reached their destination.
    let sent = |e: &Episode| e.notifications.iter().filter(|n| n.failed.is_none()).count();
    let failed = |e: &Episode| e.notifications.len() - sent(e);
    let resources = |e: &Episode| -> String {
        e.resources.iter().map(|r| format!("{} {}/{}", r.object.kind, r.object.namespace, r.object.name)).collect::<Vec<_>>().join(";")
    };
    match format {
        HistoryFormat::Json => {
            let v: Vec<Value> = episodes.iter().map(|e| e.record(now)).collect();
            writeln!(out, "{}", serde_json::to_string_pretty(&v).unwrap_or_default())?;
        }
        HistoryFormat::Csv => {
            writeln!(
                out,
                "id,app,project,cluster,opened,resolved,duration_seconds,state,severity,direction,classes,resources,managers,revision,notifications,notifications_failed"
            )?;
            for e in episodes {
                let row = [
                    e.id.clone(),
                    format!("{}/{}", e.namespace, e.name),
                    e.project.clone(),
                    e.cluster.clone(),
                    time(Some(e.opened_at)),
                    time(e.resolved_at),
                    e.duration_secs(now).to_string(),
                    if e.is_open() { "open".into() } else { "resolved".into() },
                    e.severity.as_str().into(),
                    e.direction.to_string(),
                    e.classes.iter().cloned().collect::<Vec<_>>().join(";"),
                    resources(e),
                    managers(e),
                    e.revision.clone(),
                    sent(e).to_string(),
                    failed(e).to_string(),
                ];
                writeln!(out, "{}", row.iter().map(|c| csv_field(c)).collect::<Vec<_>>().join(","))?;
            }
        }
        HistoryFormat::Table => {
            writeln!(
                out,
                "{:<20} {:<28} {:<9} {:<10} {:<8} {:<8} {:<28} {:<20} SENT",
                "OPENED", "APP", "STATE", "DURATION", "SEVERITY", "DIRECTION", "CLASSES", "CHANGED BY"
            )?;
            for e in episodes {
                let classes = e.classes.iter().cloned().collect::<Vec<_>>().join(",");
                writeln!(
                    out,
                    "{:<20} {:<28} {:<9} {:<10} {:<8} {:<8} {:<28} {:<20} {}",
                    time(Some(e.opened_at)),
                    format!("{}/{}", e.namespace, e.name),
                    if e.is_open() { "open" } else { "resolved" },
                    human_duration(e.duration_secs(now)),
                    e.severity.as_str(),
                    e.direction,
                    classes,
                    managers(e),
                    match failed(e) {
                        0 => sent(e).to_string(),
                        f => format!("{} ({f} failed)", sent(e)),
                    }
                )?;
            }
            writeln!(out, "{} episode(s)", episodes.len())?;
        }
    }
    Ok(())
}

fn csv_field(s: &str) -> String {
    if s.contains([',', '"', '\n']) { format!("\"{}\"", s.replace('"', "\"\"")) } else { s.to_string() }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_are_nearest_rank() {
        let v: Vec<i64> = (1..=20).collect();
        assert_eq!((percentile(&v, 50), percentile(&v, 95)), (Some(10), Some(19)));
        assert_eq!(percentile(&[7], 95), Some(7));
        assert_eq!(percentile(&[], 50), None);
    }

    #[test]
    fn since_takes_a_duration_or_a_time_and_csv_quotes() {
        let now = DateTime::parse_from_rfc3339("2026-03-02T12:00:00Z").unwrap().with_timezone(&Utc);
        assert_eq!(crate::duration::parse_time("--since", "24h", now).unwrap(), now - chrono::Duration::hours(24));
        assert_eq!(crate::duration::parse_time("--since", "2026-03-01T00:00:00Z", now).unwrap().to_rfc3339(), "2026-03-01T00:00:00+00:00");
        assert!(crate::duration::parse_time("--since", "yesterday", now).unwrap_err().to_string().starts_with("--since: "));
        let window = |s: &str, u: &str| crate::duration::parse_window(("--since", Some(s)), ("--until", Some(u)), now);
        assert_eq!(window("2h", "1h").unwrap(), (Some(now - chrono::Duration::hours(2)), Some(now - chrono::Duration::hours(1))));
        assert_eq!(window("1h", "2h").unwrap_err().to_string(), "--until is before --since");
        assert!(window("1h", "soon").unwrap_err().to_string().starts_with("--until: "), "named by its own flag");
        assert_eq!(csv_field("a,b"), "\"a,b\"");
        assert_eq!(csv_field("say \"hi\""), "\"say \"\"hi\"\"\"");
    }
}
