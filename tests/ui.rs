//! The web view (`/ui`) in a real browser: headless Chromium (Debian's package; the test
//! script installs it when missing) loads the page from `driftwatch run` against the
//! fake API server, with the operations token, over a state file seeded by a replay of
//! `examples/production`. The page shows the open episodes oldest first with no script
//! error, per project and per cluster; a filter and a time range (the URL fragment the
//! filter menus set) change what is shown; an Application's story shows its timeline,
//! what changed and who, the notifications sent and one refused; a cluster name that is
//! markup (`<img src=x onerror=…>`) is shown as text, never run.

mod common;

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use common::AppBuilder;
use common::apiserver::FakeApiServer;
use common::daemon::{Daemon, replay_production, wait_for};
use common::receiver::{Mode, Scripted};

const TOKEN: &str = "ui-e2e-operations-token-0123456789";
const XSS: &str = "<img src=x onerror=document.title='pwned'>";

/// GET with the operations token (or none): status and body.
fn get_auth(addr: &str, path: &str, token: Option<&str>) -> (u16, String) {
    common::receiver::get_as(addr, path, token).unwrap_or_default()
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

/// An OutOfSync Application with one OutOfSync resource of `kind`.
fn drifted(name: &str, project: &str, cluster: &str, kind: (&str, &str)) -> serde_json::Value {
    AppBuilder::new(name)
        .field("/spec/project", project.into())
        .field("/spec/destination/name", cluster.into())
        .field(
            "/status/resources",
            serde_json::json!([{"group": kind.0, "version": "v1", "kind": kind.1, "namespace": name, "name": name, "status": "OutOfSync"}]),
        )
        .out_of_sync()
        .healthy()
        .build()
}

#[test]
fn the_web_view_shows_the_fleet_and_a_story_escaped_in_a_real_browser() {
    let dir = tempfile::tempdir().unwrap();
    // The seeded story: what the real pipeline records for a replay of examples/production.
    replay_production(env!("CARGO_BIN_EXE_driftwatch"), &dir.path().join("state.redb"));
    let api = FakeApiServer::start();
    api.kubeconfig(&dir.path().join("kubeconfig"));
    // A receiver that refuses every notification for good (400): the outcome the story shows.
    let refusing = Scripted::start(Mode::Status(400));
    std::fs::create_dir(dir.path().join("secrets")).unwrap();
    std::fs::write(dir.path().join("secrets/ops-token"), TOKEN).unwrap();
    std::fs::write(dir.path().join("secrets/slack-token"), "xoxb-ui-test").unwrap();
    std::fs::write(
        dir.path().join("driftwatch.yaml"),
        format!(
            "context: {{argocdUrl: https://argocd.example.com}}\nsecretsFile: secrets\noperations: {{token: $ops-token}}\n\
             history: {{maxAge: 3650d}}\n\
             services:\n  chat:\n    type: slack\n    token: $slack-token\n    apiUrl: http://127.0.0.1:{}\n\
             routes:\n  - name: all\n    triggers: [on-out-of-sync]\n    recipients: [chat:drift]\n",
            refusing.port
        ),
    )
    .unwrap();
    api.apply(drifted("web", "default", "prod-eu-1", ("rbac.authorization.k8s.io", "Role")));
    let d = Daemon::start(dir.path());
    wait_for("web's episode", Duration::from_secs(30), || get_auth(&d.admin, "/ui/api/fleet", Some(TOKEN)).1.contains("\"total\":1"));
    api.apply(drifted("api", "payments", XSS, ("", "ConfigMap")));
    wait_for("two open episodes", Duration::from_secs(30), || get_auth(&d.admin, "/ui/api/fleet", Some(TOKEN)).1.contains("\"total\":2"));
    wait_for("web's refused notification in its story", Duration::from_secs(30), || {
        get_auth(&d.admin, "/ui/api/app?app=argocd%2Fweb", Some(TOKEN)).1.contains("\"failed\":\"")
    });
    assert_eq!(get_auth(&d.admin, "/ui/api/fleet", None).0, 401);
    assert_eq!(get_auth(&d.admin, "/ui/api/fleet?limit=100000", Some(TOKEN)).0, 400);
    assert_eq!(get_auth(&d.admin, "/ui/api/fleet?since=1h&until=2h", Some(TOKEN)).0, 400, "until before since");
    assert_eq!(get_auth(&d.admin, "/ui/api/app?app=web", Some(TOKEN)).0, 400);

    let profile = tempfile::tempdir().unwrap();
    let base = format!("http://{}/ui#token={TOKEN}", d.admin);
    let (fleet, log) = dom(&base, profile.path());
    assert_eq!(element(&fleet, "errors"), "", "script errors:\n{log}");
    assert!(!log.contains("Uncaught"), "{log}");
    assert_eq!(element(&fleet, "status"), "", "{fleet}");
    let all = rows(&fleet);
    assert_eq!(all.len(), 2, "the open episodes only, not the replayed resolved ones: {fleet}");
    assert!(all[0].contains("argocd/web") && all[1].contains("argocd/api"), "oldest first: {all:?}");
    assert!(all[0].contains(">rbac<"), "its class: {all:?}");
    assert!(fleet.contains("2 open episode(s)"), "{fleet}");
    // Per project and per cluster.
    let projects = element(&fleet, "by-project");
    assert!(projects.contains(">default<") && projects.contains(">payments<"), "{projects}");
    assert!(element(&fleet, "by-cluster").contains(">prod-eu-1<"), "{fleet}");
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
    // A time range that ends before they opened: nothing.
    let (none, _) = dom(&format!("http://{}/ui#token={TOKEN}&until=2026-01-01T00:00:00Z", d.admin), profile.path());
    assert!(none.contains("0 open episode(s)") && none.contains("nothing drifted"), "{none}");

    // The seeded story: deployments, the live drift with what changed and who, its
    // escalation and resolution, the notifications sent, and a link to Argo CD.
    let story_url = format!("http://{}/ui#token={TOKEN}&app=argocd%2Fpayments-api", d.admin);
    let (story, log) = dom(&story_url, profile.path());
    assert_eq!(element(&story, "errors"), "", "{log}");
    assert!(element(&story, "story-title").contains("argocd/payments-api"));
    let steps = element(&story, "steps");
    for step in [">deployed<", ">opened<", ">escalated<", ">resolved<"] {
        assert!(steps.contains(step), "{step} in {steps}");
    }
    // (The rest of the page from the episodes' list on: `element` would stop at the
    // first change's closing `</div>`.)
    let episodes = &story[story.find("id=\"story-episodes\"").unwrap()..];
    assert_eq!(episodes.matches("<details").count(), 3, "{episodes}");
    assert!(
        episodes.contains("spec.template.spec.containers[api].securityContext.privileged: (not set) → true by kubectl-edit"),
        "{episodes}"
    );
    assert!(episodes.contains("sent on-live-drift to chat:drift"), "{episodes}");
    assert!(story.contains("href=\"https://argocd.example.com/applications/argocd/payments-api\""), "{story}");
    // The time range narrows the story to the live drift's episode.
    let (narrow, _) = dom(&format!("{story_url}&since=2026-03-02T03:10:00Z&until=2026-03-02T03:30:00Z"), profile.path());
    let narrow_eps = &narrow[narrow.find("id=\"story-episodes\"").unwrap()..];
    assert_eq!(narrow_eps.matches("<details").count(), 1, "{narrow_eps}");
    assert!(narrow_eps.contains("critical"), "{narrow_eps}");

    // A notification the destination refused is shown failed, with why.
    let (web, _) = dom(&format!("http://{}/ui#token={TOKEN}&app=argocd%2Fweb", d.admin), profile.path());
    let web_eps = &web[web.find("id=\"story-episodes\"").unwrap()..];
    assert!(web_eps.contains("failed on-out-of-sync to chat:drift") && web_eps.contains("400"), "{web_eps}");

    // Without the token the page asks for it, and shows no data.
    let fresh = tempfile::tempdir().unwrap();
    let (locked, _) = dom(&format!("http://{}/ui", d.admin), fresh.path());
    assert!(locked.contains("id=\"login\"") && !locked.contains("id=\"login\" hidden"), "{locked}");
    assert!(rows(&locked).is_empty() && !locked.contains("argocd/web"), "{locked}");

    // UI_SCREENSHOTS=DIR: the fleet and the seeded story as PNGs (docs/images), over a
    // fleet that looks like one (the markup cluster name above is this test's, not a
    // documentation's).
    if let Ok(shots) = std::env::var("UI_SCREENSHOTS") {
        api.delete("applications", "argocd", "api");
        let fleet = [
            ("payments-ledger", "payments", "prod-eu-1", ("apps", "Deployment")),
            ("payments-worker", "payments", "prod-eu-1", ("", "ConfigMap")),
            ("checkout", "shop", "prod-us-2", ("networking.k8s.io", "NetworkPolicy")),
            ("catalog", "shop", "prod-us-2", ("apps", "Deployment")),
            ("ingress-nginx", "platform", "prod-eu-1", ("rbac.authorization.k8s.io", "ClusterRole")),
            ("cert-manager", "platform", "prod-us-2", ("admissionregistration.k8s.io", "ValidatingWebhookConfiguration")),
            ("search", "shop", "staging-eu-1", ("apps", "StatefulSet")),
        ];
        for (name, project, cluster, kind) in fleet {
            // Live drift (the deployed revision is Git's): a person's change, as most are.
            let mut app = drifted(name, project, cluster, kind);
            app["status"]["history"] = serde_json::json!([{"id": 1, "revision": app["status"]["sync"]["revision"].clone()}]);
            api.apply(app);
        }
        wait_for("the documentation's fleet", Duration::from_secs(30), || {
            get_auth(&d.admin, "/ui/api/fleet", Some(TOKEN)).1.contains(&format!("\"total\":{}", fleet.len() + 1))
        });
        for (file, url, height) in [("ui-fleet.png", base.clone(), 720), ("ui-story.png", story_url.clone(), 1300)] {
            let _ = Command::new(chromium())
                .args(["--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars", &format!("--window-size=1280,{height}")])
                .arg(format!("--user-data-dir={}", profile.path().display()))
                .args(["--virtual-time-budget=10000", &format!("--screenshot={shots}/{file}"), &url])
                .status();
        }
    }
    assert!(d.stop().success());
}
