//! The web view (`/ui`): the fleet's open drift episodes and an Application's story,
//! read-only. The page, its script and its style are compiled into the binary (no CDN:
//! it works air-gapped) and carry no data, so they are served without the token; the
//! data comes from `/ui/api/fleet` and `/ui/api/app`, behind the operations token like
//! `/history`. The script writes everything with `textContent` (names, annotations and
//! messages are the cluster's), and the page's Content-Security-Policy allows only its
//! own script, so injected markup could not run even if it were written.
//!
//! Cost per request: the fleet reads the open-episode summaries (one small entry per
//! Application with an open episode, never the history) and returns one page of them;
//! an Application's story reads its own episodes by the by-Application index, at most
//! `limit`.

use std::collections::BTreeMap;
use std::sync::Arc;

use axum::extract::{RawQuery, State};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use chrono::{DateTime, Utc};
use serde_json::{Value, json};

use super::{SharedState, each_store, newest, stores};
use crate::model::Severity;
use crate::state::Store;
use crate::state::{HistoryQuery, OpenEpisode};

const INDEX: &str = include_str!("ui/index.html");
const SCRIPT: &str = include_str!("ui/app.js");
const STYLE: &str = include_str!("ui/app.css");
const CSP: &str = "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; img-src 'self' data:; base-uri 'none'; form-action 'none'; frame-ancestors 'none'";

/// Fleet rows per page unless asked, and at most; the furthest offset.
const DEFAULT_PAGE: usize = 50;
const MAX_PAGE: usize = 500;
const MAX_OFFSET: usize = 1_000_000;
/// Episodes (and operations, exceptions) of an Application's story unless asked, and at most.
const DEFAULT_STORY: usize = 100;
const MAX_STORY: usize = 1000;
/// Rows of the per-project and per-cluster breakdowns (the rest are summed in one).
const MAX_BREAKDOWN: usize = 20;
/// The longest filter value taken (an Application's `namespace/name` is at most 317).
const MAX_VALUE: usize = 400;

fn asset(body: &'static str, content_type: &'static str) -> Response {
    (
        StatusCode::OK,
        [
            (header::CONTENT_TYPE, content_type),
            (header::CONTENT_SECURITY_POLICY, CSP),
            (header::X_CONTENT_TYPE_OPTIONS, "nosniff"),
            (header::REFERRER_POLICY, "no-referrer"),
        ],
        body,
    )
        .into_response()
}

pub(super) async fn index() -> Response {
    asset(INDEX, "text/html; charset=utf-8")
}

pub(super) async fn script() -> Response {
    asset(SCRIPT, "text/javascript; charset=utf-8")
}

pub(super) async fn style() -> Response {
    asset(STYLE, "text/css; charset=utf-8")
}

fn plain(status: StatusCode, msg: String) -> Response {
    (status, [(header::CONTENT_TYPE, "text/plain")], msg).into_response()
}

/// Why a web-view request's query was refused (answered 400 with this text).
#[derive(Debug)]
pub(super) struct BadQuery(String);

impl From<String> for BadQuery {
    fn from(message: String) -> Self {
        BadQuery(message)
    }
}

impl std::fmt::Display for BadQuery {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// What every web-view data request starts from: its query, parsed, when it was asked,
/// and the stores that answer it.
struct ViewRequest<Q> {
    query: Q,
    now: DateTime<Utc>,
    stores: Vec<Arc<Store>>,
}

/// Why a web-view data request is refused before anything is read.
enum Refused {
    /// The query does not parse: 400.
    Query(BadQuery),
    /// This replica does not lead: 503 (the leader holds the history).
    NotLeading,
}

impl IntoResponse for Refused {
    fn into_response(self) -> Response {
        match self {
            Refused::Query(e) => plain(StatusCode::BAD_REQUEST, format!("{e}\n")),
            Refused::NotLeading => plain(StatusCode::SERVICE_UNAVAILABLE, "not leading: the leader holds the history\n".into()),
        }
    }
}

impl<Q> ViewRequest<Q> {
    fn of(shared: &SharedState, query: Option<&str>, parse: fn(&str, DateTime<Utc>) -> Result<Q, BadQuery>) -> Result<Self, Refused> {
        let now = Utc::now();
        let query = parse(query.unwrap_or_default(), now).map_err(Refused::Query)?;
        let stores = stores(shared).ok_or(Refused::NotLeading)?;
        Ok(ViewRequest { query, now, stores })
    }
}

fn json_response(v: &Value) -> Response {
    (StatusCode::OK, [(header::CONTENT_TYPE, "application/json"), (header::CACHE_CONTROL, "no-store")], v.to_string()).into_response()
}

/// The query's parameters, each once and among `known`, none longer than [`MAX_VALUE`]
/// nor holding a control character.
fn params(query: &str, known: &[&str]) -> Result<BTreeMap<String, String>, String> {
    let mut out = BTreeMap::new();
    for (k, v) in form_urlencoded::parse(query.as_bytes()) {
        if !known.contains(&k.as_ref()) {
            return Err(format!("unknown parameter {k:?} ({})", known.join(", ")));
        }
        if v.len() > MAX_VALUE || v.chars().any(char::is_control) {
            return Err(format!("parameter {k}: longer than {MAX_VALUE} bytes or a control character"));
        }
        if out.insert(k.into_owned(), v.into_owned()).is_some() {
            return Err("a parameter given twice".into());
        }
    }
    Ok(out)
}

fn number(p: &BTreeMap<String, String>, key: &str, default: usize, max: usize, min: usize) -> Result<usize, String> {
    match p.get(key).filter(|v| !v.is_empty()) {
        None => Ok(default),
        Some(v) => match v.parse::<usize>() {
            Ok(n) if (min..=max).contains(&n) => Ok(n),
            _ => Err(format!("{key} {v:?}: expected a number from {min} to {max}")),
        },
    }
}

/// `since` and `until` (an empty one is absent).
fn window(p: &BTreeMap<String, String>, now: DateTime<Utc>) -> Result<crate::duration::Window, String> {
    let end = |key| p.get(key).map(String::as_str).filter(|v| !v.is_empty());
    crate::duration::parse_window(("since", end("since")), ("until", end("until")), now).map_err(|e| e.to_string())
}

/// What the fleet request asks.
#[derive(Debug, PartialEq)]
pub(super) struct FleetQuery {
    class: Option<String>,
    project: Option<String>,
    cluster: Option<String>,
    severity: Option<Severity>,
    since: Option<DateTime<Utc>>,
    until: Option<DateTime<Utc>>,
    limit: usize,
    offset: usize,
}

pub(super) fn fleet_query(query: &str, now: DateTime<Utc>) -> Result<FleetQuery, BadQuery> {
    let p = params(query, &["class", "project", "cluster", "severity", "since", "until", "limit", "offset"])?;
    let s = |k: &str| p.get(k).filter(|v| !v.is_empty()).cloned();
    let severity = match s("severity") {
        None => None,
        Some(sev) => Some(Severity::parse(&sev).ok_or_else(|| format!("severity {sev:?}: expected critical, error, warning or info"))?),
    };
    let (since, until) = window(&p, now)?;
    Ok(FleetQuery {
        class: s("class"),
        project: s("project"),
        cluster: s("cluster"),
        severity,
        since,
        until,
        limit: number(&p, "limit", DEFAULT_PAGE, MAX_PAGE, 1)?,
        offset: number(&p, "offset", 0, MAX_OFFSET, 0)?,
    })
}

/// The severities, most severe first: the columns of a breakdown.
const SEVERITIES: [Severity; 4] = [Severity::Critical, Severity::Error, Severity::Warning, Severity::Info];

/// Open episodes per project or per cluster, by severity: the [`MAX_BREAKDOWN`] ranked
/// by their counts from critical down (then the most in all), and the rest summed as
/// `others`.
fn breakdown<'a>(open: &[&'a OpenEpisode], key: impl Fn(&'a OpenEpisode) -> &'a str) -> Value {
    let mut by: BTreeMap<&str, [u64; 4]> = BTreeMap::new();
    for &ep in open {
        let row = by.entry(key(ep)).or_default();
        if let Some(i) = SEVERITIES.iter().position(|s| *s == ep.severity) {
            row[i] += 1;
        }
    }
    let mut rows: Vec<(&str, [u64; 4])> = by.into_iter().collect();
    rows.sort_by(|a, b| (b.1, b.1.iter().sum::<u64>()).cmp(&(a.1, a.1.iter().sum::<u64>())).then(a.0.cmp(b.0)));
    let row = |name: &str, n: &[u64; 4]| {
        let mut v = json!({"name": name, "total": n.iter().sum::<u64>()});
        for (s, c) in SEVERITIES.iter().zip(n) {
            v[s.as_str()] = json!(c);
        }
        v
    };
    let shown: Vec<Value> = rows.iter().take(MAX_BREAKDOWN).map(|(name, n)| row(name, n)).collect();
    let mut rest = [0u64; 4];
    for (_, n) in rows.iter().skip(MAX_BREAKDOWN) {
        for (r, c) in rest.iter_mut().zip(n) {
            *r += c;
        }
    }
    json!({"rows": shown, "others": rows.len().saturating_sub(MAX_BREAKDOWN), "othersCounts": row("", &rest)})
}

/// The fleet page: the open episodes matching the filters, oldest first, one page of
/// them, and the matching ones per project and per cluster by severity; the counts (by
/// severity, class, project, cluster) are of every open episode, for the filters'
/// choices.
pub(super) fn fleet(open: Vec<OpenEpisode>, q: &FleetQuery, now: DateTime<Utc>, argocd_url: &str) -> Value {
    let mut counts: [BTreeMap<&str, u64>; 4] = Default::default();
    for ep in &open {
        *counts[0].entry(ep.severity.as_str()).or_default() += 1;
        for c in &ep.classes {
            *counts[1].entry(c).or_default() += 1;
        }
        *counts[2].entry(&ep.project).or_default() += 1;
        *counts[3].entry(&ep.cluster).or_default() += 1;
    }
    let mut matching: Vec<&OpenEpisode> = open
        .iter()
        .filter(|ep| {
            q.class.as_ref().is_none_or(|c| ep.classes.contains(c))
                && q.project.as_ref().is_none_or(|p| *p == ep.project)
                && q.cluster.as_ref().is_none_or(|c| *c == ep.cluster)
                && q.severity.is_none_or(|s| s == ep.severity)
                && q.since.is_none_or(|t| ep.opened_at >= t)
                && q.until.is_none_or(|t| ep.opened_at <= t)
        })
        .collect();
    matching.sort_by(|a, b| (a.opened_at, &a.id).cmp(&(b.opened_at, &b.id)));
    let total = matching.len();
    let (by_project, by_cluster) = (breakdown(&matching, |e| e.project.as_str()), breakdown(&matching, |e| e.cluster.as_str()));
    let page: Vec<Value> = matching
        .iter()
        .skip(q.offset)
        .take(q.limit)
        .map(|ep| {
            let mut v = serde_json::to_value(ep).unwrap_or(Value::Null);
            let secs = (now - ep.opened_at).num_seconds().max(0);
            if let Some(m) = v.as_object_mut() {
                m.insert("duration".into(), json!(crate::duration::human_duration(secs)));
            }
            v
        })
        .collect();
    let [severity, class, project, cluster] = counts;
    json!({
        "total": total,
        "counts": {"severity": severity, "class": class, "project": project, "cluster": cluster},
        "episodes": page,
        "byProject": by_project,
        "byCluster": by_cluster,
        "argocdUrl": argocd_url,
    })
}

pub(super) async fn fleet_handler(State(shared): State<SharedState>, RawQuery(query): RawQuery) -> Response {
    let ViewRequest { query: q, now, stores } = match ViewRequest::of(&shared, query.as_deref(), fleet_query) {
        Ok(r) => r,
        Err(refused) => return refused.into_response(),
    };
    let url = shared.argocd_url();
    match each_store(stores, |s| s.history().open_episodes()).await {
        Ok(per_shard) => json_response(&fleet(per_shard.into_iter().flatten().collect(), &q, now, &url)),
        Err(e) => plain(StatusCode::INTERNAL_SERVER_ERROR, format!("{e}\n")),
    }
}

/// An Application's story request: `app=<namespace>/<name>` (required), `since`,
/// `until`, `limit`.
pub(super) fn story_query(query: &str, now: DateTime<Utc>) -> Result<HistoryQuery, BadQuery> {
    let p = params(query, &["app", "since", "until", "limit"])?;
    let app = p.get("app").cloned().unwrap_or_default();
    let valid = app.split_once('/').is_some_and(|(ns, name)| !ns.is_empty() && !name.is_empty() && !name.contains('/'));
    if !valid {
        return Err(format!("app {app:?}: expected <namespace>/<name>").into());
    }
    let (since, until) = window(&p, now)?;
    Ok(HistoryQuery { app: Some(app), since, until, limit: Some(number(&p, "limit", DEFAULT_STORY, MAX_STORY, 1)?), class: None })
}

pub(super) async fn app_handler(State(shared): State<SharedState>, RawQuery(query): RawQuery) -> Response {
    let ViewRequest { query: q, now, stores } = match ViewRequest::of(&shared, query.as_deref(), story_query) {
        Ok(r) => r,
        Err(refused) => return refused.into_response(),
    };
    let url = shared.argocd_url();
    let app = q.app.clone();
    let limit = q.limit.unwrap_or(DEFAULT_STORY);
    // An Application lives in one shard (its cluster's) and the others answer nothing;
    // one whose destination moved to another shard has its story in both.
    let read = move |s: &Store| {
        let episodes = s.history().episodes(&q)?;
        let ops = s.history().operations(&q, limit)?;
        let exceptions = s.history().break_glass_history(&q, limit)?;
        Ok((episodes, ops, exceptions))
    };
    match each_store(stores, read).await {
        Ok(per_shard) => {
            let (mut episodes, mut ops, mut exceptions) = (Vec::new(), Vec::new(), Vec::new());
            for (e, o, x) in per_shard {
                episodes.extend(e);
                ops.extend(o);
                exceptions.extend(x);
            }
            let episodes = newest(episodes, limit);
            let steps = crate::drift::story::timeline(&episodes, &ops, &exceptions);
            let records: Vec<Value> = episodes.iter().rev().map(|e| e.record(now)).collect();
            json_response(&json!({"app": app, "steps": steps, "episodes": records, "argocdUrl": url}))
        }
        Err(e) => plain(StatusCode::INTERNAL_SERVER_ERROR, format!("{e}\n")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn open(name: &str, min: i64, class: &str, project: &str) -> OpenEpisode {
        OpenEpisode {
            id: format!("argocd/{name}@{min}"),
            namespace: "argocd".into(),
            name: name.into(),
            unit_kind: String::new(),
            project: project.into(),
            cluster: "in-cluster".into(),
            opened_at: DateTime::from_timestamp(1_800_000_000 + min * 60, 0).unwrap(),
            severity: crate::model::Severity::Warning,
            classes: vec![class.into()],
            who: "alice".into(),
            break_glass: None,
        }
    }

    #[test]
    fn the_fleet_is_filtered_paged_oldest_first_and_counted_whole() {
        let now = DateTime::from_timestamp(1_800_100_000, 0).unwrap();
        let fleet_of = |q: &str| {
            let all = vec![open("c", 2, "rbac", "shop"), open("a", 0, "rbac", "shop"), open("b", 1, "config", "pay")];
            fleet(all, &fleet_query(q, now).unwrap(), now, "https://argocd.example.com")
        };
        let names =
            |v: &Value| v["episodes"].as_array().unwrap().iter().map(|e| e["name"].as_str().unwrap().to_string()).collect::<Vec<_>>();
        let v = fleet_of("");
        assert_eq!((v["total"].as_u64(), names(&v)), (Some(3), vec!["a".to_string(), "b".into(), "c".into()]));
        assert_eq!(v["counts"]["class"], json!({"config": 1, "rbac": 2}));
        let v = fleet_of("class=rbac&limit=1&offset=1");
        assert_eq!((v["total"].as_u64(), names(&v)), (Some(2), vec!["c".to_string()]));
        assert_eq!(v["counts"]["project"], json!({"pay": 1, "shop": 2}), "counts are of the whole fleet");
        assert_eq!(names(&fleet_of("project=pay")), ["b"]);
        // A time range: opened between since and until, both included.
        let range = |since: i64, until: i64| {
            let t = |min: i64| DateTime::from_timestamp(1_800_000_000 + min * 60, 0).unwrap().to_rfc3339().replace('+', "%2B");
            format!("since={}&until={}", t(since), t(until))
        };
        assert_eq!(names(&fleet_of(&range(1, 2))), ["b", "c"]);
        assert_eq!(names(&fleet_of(&range(0, 0))), ["a"]);
        // Per project and per cluster, by severity, of what matches.
        let v = fleet_of("class=rbac");
        assert_eq!(v["byProject"]["rows"], json!([{"name": "shop", "total": 2, "critical": 0, "error": 0, "warning": 2, "info": 0}]));
        assert_eq!(v["byCluster"]["rows"][0]["total"], 2);
        assert!(v["episodes"][0]["duration"].is_string());
    }

    /// The breakdowns rank by severity (critical first) and stay bounded however many
    /// projects there are.
    #[test]
    fn the_breakdowns_rank_the_most_severe_first_and_are_bounded() {
        let mut all: Vec<OpenEpisode> = (0..30).map(|i| open(&format!("w{i}"), i, "config", &format!("p{i:02}"))).collect();
        let mut crit = open("x", 40, "rbac", "p29");
        crit.severity = crate::model::Severity::Critical;
        all.push(crit);
        let b = breakdown(&all.iter().collect::<Vec<_>>(), |e| e.project.as_str());
        let rows = b["rows"].as_array().unwrap();
        assert_eq!(rows.len(), MAX_BREAKDOWN);
        assert_eq!((rows[0]["name"].as_str(), rows[0]["critical"].as_u64(), rows[0]["total"].as_u64()), (Some("p29"), Some(1), Some(2)));
        assert_eq!(rows[1]["name"], "p00", "then by name");
        assert_eq!((b["others"].as_u64(), b["othersCounts"]["warning"].as_u64()), (Some(10), Some(10)));
    }

    #[test]
    fn bad_parameters_are_refused() {
        let now = Utc::now();
        for bad in [
            "limit=0",
            "limit=501",
            "limit=x",
            "offset=-1",
            "severity=loud",
            "page=2",
            "since=soon",
            "until=later",
            "since=1h&until=2h",
            "class=a&class=b",
            "class=%0a",
        ] {
            assert!(fleet_query(bad, now).is_err(), "{bad}");
        }
        assert!(fleet_query(&format!("class={}", "x".repeat(MAX_VALUE + 1)), now).is_err());
        assert_eq!(fleet_query("limit=500&offset=10&severity=critical", now).unwrap().limit, 500);
        for bad in ["", "app=web", "app=/web", "app=a/b/c", "app=a/b&limit=1001", "app=a/b&x=1", "app=a/b&since=1h&until=2h"] {
            assert!(story_query(bad, now).is_err(), "{bad}");
        }
        assert_eq!(story_query("app=argocd%2Fweb", now).unwrap().app.as_deref(), Some("argocd/web"));
    }
}
