//! The web view (`/ui`) in a real browser: headless Chromium (Debian's package; the test
//! script installs it when missing) loads the page from `driftwatch run` against the
//! fake API server, with the operations token. The page shows the seeded episodes
//! oldest first with no script error, a filter (the URL fragment the filter menus set)
//! changes what is shown, an Application's story shows its timeline, and a cluster name
//! that is markup (`<img src=x onerror=…>`) is shown as text, never run.

mod common;

use std::io::{Read, Write};
use std::path::Path;
use std::process::Command;
use std::time::Duration;

use common::AppBuilder;
use common::apiserver::FakeApiServer;
use common::daemon::{Daemon, wait_for};

const TOKEN: &str = "ui-e2e-operations-token-0123456789";
const XSS: &str = "<img src=x onerror=document.title='pwned'>";

/// GET with the operations token: status and body.
fn get_auth(addr: &str, path: &str, token: Option<&str>) -> (u16, String) {
    let mut s = std::net::TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let auth = token.map(|t| format!("Authorization: Bearer {t}\r\n")).unwrap_or_default();
    write!(s, "GET {path} HTTP/1.1\r\nHost: {addr}\r\n{auth}Connection: close\r\n\r\n").unwrap();
    let mut resp = String::new();
    s.read_to_string(&mut resp).unwrap();
    let status = resp.split_whitespace().nth(1).and_then(|c| c.parse().ok()).unwrap_or(0);
    (status, resp.split_once("\r\n\r\n").map(|(_, b)| b.to_string()).unwrap_or_default())
}

fn chromium() -> String {
    std::env::var("CHROMIUM").unwrap_or_else(|_| "/usr/bin/chromium".into())
}

/// The page's DOM once its script has run (virtual time: the fetches settle before the
/// dump, with no wall-clock wait), and what the browser logged.
fn dom(url: &str, profile: &Path) -> (String, String) {
    let out = Command::new(chromium())
        .args(["--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--enable-logging=stderr", "--v=0"])
        .arg(format!("--user-data-dir={}", profile.display()))
        .args(["--virtual-time-budget=10000", "--dump-dom", url])
        .output()
        .unwrap_or_else(|e| panic!("{}: {e} (scripts/test.sh installs Debian's chromium)", chromium()));
    assert!(out.status.success(), "chromium failed: {}", String::from_utf8_lossy(&out.stderr));
    (String::from_utf8_lossy(&out.stdout).into_owned(), String::from_utf8_lossy(&out.stderr).into_owned())
}

/// The text of the element with `id` in a dumped DOM (its first line of markup).
fn element<'a>(dom: &'a str, id: &str) -> &'a str {
    let start = dom.find(&format!("id=\"{id}\"")).unwrap_or_else(|| panic!("no #{id} in\n{dom}"));
    let rest = &dom[start..];
    let open_end = rest.find('>').unwrap() + 1;
    let tag = dom[..start].rsplit('<').next().unwrap().split_whitespace().next().unwrap();
    let close = rest.find(&format!("</{tag}>")).unwrap_or(rest.len());
    &rest[open_end..close]
}

fn rows(dom: &str) -> Vec<String> {
    let body = element(dom, "episodes");
    body.split("<tr>").skip(2).map(|r| r.to_string()).collect()
}

#[test]
fn the_web_view_shows_the_fleet_and_a_story_escaped_in_a_real_browser() {
    let dir = tempfile::tempdir().unwrap();
    let api = FakeApiServer::start();
    api.kubeconfig(&dir.path().join("kubeconfig"));
    std::fs::create_dir(dir.path().join("secrets")).unwrap();
    std::fs::write(dir.path().join("secrets/ops-token"), TOKEN).unwrap();
    std::fs::write(
        dir.path().join("driftwatch.yaml"),
        "context: {argocdUrl: https://argocd.example.com}\nsecretsFile: secrets\noperations: {token: $ops-token}\n",
    )
    .unwrap();
    api.apply(AppBuilder::new("web").out_of_sync().healthy().build());
    let d = Daemon::start(dir.path());
    wait_for("web's episode", Duration::from_secs(30), || get_auth(&d.admin, "/ui/api/fleet", Some(TOKEN)).1.contains("\"total\":1"));
    api.apply(
        AppBuilder::new("api")
            .field("/spec/project", "payments".into())
            .field("/spec/destination/name", XSS.into())
            .out_of_sync()
            .healthy()
            .build(),
    );
    wait_for("two open episodes", Duration::from_secs(30), || get_auth(&d.admin, "/ui/api/fleet", Some(TOKEN)).1.contains("\"total\":2"));
    assert_eq!(get_auth(&d.admin, "/ui/api/fleet", None).0, 401);
    assert_eq!(get_auth(&d.admin, "/ui/api/fleet?limit=100000", Some(TOKEN)).0, 400);
    assert_eq!(get_auth(&d.admin, "/ui/api/app?app=web", Some(TOKEN)).0, 400);

    let profile = tempfile::tempdir().unwrap();
    let base = format!("http://{}/ui#token={TOKEN}", d.admin);
    let (fleet, log) = dom(&base, profile.path());
    assert_eq!(element(&fleet, "errors"), "", "script errors:\n{log}");
    assert!(!log.contains("Uncaught"), "{log}");
    assert_eq!(element(&fleet, "status"), "", "{fleet}");
    let all = rows(&fleet);
    assert_eq!(all.len(), 2, "{fleet}");
    assert!(all[0].contains("argocd/web") && all[1].contains("argocd/api"), "oldest first: {all:?}");
    assert!(fleet.contains("2 open episode(s)"), "{fleet}");
    // The cluster name is text: escaped in the DOM, no <img> element made, nothing ran.
    assert!(all[1].contains("&lt;img src=x onerror=document.title='pwned'&gt;"), "{all:?}");
    assert!(!fleet.contains("<img"), "{fleet}");
    assert!(!fleet.contains("<title>pwned"), "{fleet}");

    // The project filter: only payments' episode.
    let (filtered, _) = dom(&format!("http://{}/ui#token={TOKEN}&project=payments", d.admin), profile.path());
    let only = rows(&filtered);
    assert_eq!(only.len(), 1, "{filtered}");
    assert!(only[0].contains("argocd/api"), "{only:?}");
    assert!(filtered.contains("1 open episode(s)"), "{filtered}");

    // An Application's story: its timeline and a link to Argo CD.
    let (story, log) = dom(&format!("http://{}/ui#token={TOKEN}&app=argocd%2Fweb", d.admin), profile.path());
    assert_eq!(element(&story, "errors"), "", "{log}");
    let steps = element(&story, "steps");
    assert!(steps.contains(">opened<"), "{story}");
    assert!(story.contains("href=\"https://argocd.example.com/applications/argocd/web\""), "{story}");
    assert!(element(&story, "story-title").contains("argocd/web"));

    // Without the token the page asks for it, and shows no data.
    let fresh = tempfile::tempdir().unwrap();
    let (locked, _) = dom(&format!("http://{}/ui", d.admin), fresh.path());
    assert!(locked.contains("id=\"login\"") && !locked.contains("id=\"login\" hidden"), "{locked}");
    assert!(rows(&locked).is_empty() || !locked.contains("argocd/web"), "{locked}");

    if let Ok(shot) = std::env::var("UI_SCREENSHOT") {
        let _ = Command::new(chromium())
            .args(["--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars", "--window-size=1280,640"])
            .arg(format!("--user-data-dir={}", profile.path().display()))
            .args(["--virtual-time-budget=10000", &format!("--screenshot={shot}"), &base])
            .status();
    }
    assert!(d.stop().success());
}
