//! The GitHub destination: its requests, and the compliance harness (success, retry, permanent, timeout, `Retry-After`, no secret leaked).

use super::*;
use crate::deliver::ecs::tests::sample;
use crate::deliver::kind::Spec;
use crate::deliver::testkit::{HttpReceiver, Reply, check_http_kind, maker};
use crate::model::DestinationKind;
use crate::secret::Secrets;

const TOKEN: &str = "ghp_SECRET_token_123";
/// A throwaway RSA key for the App tests (generated for them; it signs nothing else).
const KEY_PEM: &str = include_str!(concat!(env!("CARGO_MANIFEST_DIR"), "/tests/data/keys/github-app-test-key.pem"));

fn notification() -> crate::model::Notification {
    let mut n = sample(DestinationKind::Github, "github");
    n.payload = serde_json::json!({
        "message": "Application guestbook is now running a1b2c3d.\nmore",
        "repoURL": "git@github.com:argoproj/argocd-example-apps.git", "revision": "a1b2c3d4e5",
        "status": {"state": "success", "label": "continuous-delivery/guestbook", "targetURL": "https://argocd.example.com/applications/guestbook"}
    });
    n
}

#[test]
fn repositories_from_git_urls() {
    let r = |u: &str| repo_of(u).map(|r| format!("{}/{}", r.owner, r.name));
    assert_eq!(r("https://github.com/argoproj/argo-cd.git").as_deref(), Some("argoproj/argo-cd"));
    assert_eq!(r("https://github.com/argoproj/argo-cd/").as_deref(), Some("argoproj/argo-cd"));
    assert_eq!(r("git@github.com:org/repo.git").as_deref(), Some("org/repo"));
    assert_eq!(r("ssh://git@github.example.com:22/team/app.git").as_deref(), Some("team/app"));
    assert_eq!(r("not a url"), None);
    assert_eq!(r("https://github.com/only-owner"), None);
}

/// Review L-c: the repository and revision come from what whoever may patch the
/// Application writes, and go into an API path carrying the App's token: a name that
/// is not GitHub's (`..`, `%2e%2e`, a slash) and a revision that is not a SHA are
/// refused; `repositories` bounds where anything is written. (Before: `..` and any
/// revision reached the path.)
#[test]
fn a_written_repository_or_revision_cannot_steer_the_api_path() {
    for url in ["https://github.com/../x", "https://github.com/o/..", "https://github.com/%2e%2e/x", "https://github.com/o/a b"] {
        assert_eq!(repo_of(url), None, "{url}");
    }
    assert!(payload::commit_sha("4f5e6d7c8b9a0f1e2d3c4b5a6978877665544332"));
    for rev in ["../../../x", "main", "4f5e6d7/../x", ""] {
        assert!(!payload::commit_sha(rev), "{rev}");
    }
    let repo = repo_of("https://github.com/team-a/app.git").unwrap();
    assert!(payload::allowed(&repo, &[]));
    assert!(payload::allowed(&repo, &["team-a/*".into()]));
    assert!(payload::allowed(&repo, &["Team-A/App".into()]));
    assert!(!payload::allowed(&repo, &["team-b/*".into(), "team-a/other".into()]));
}

#[test]
fn bodies_for_status_deployment_and_comment() {
    let n = notification();
    let s = payload::status(&n).unwrap().unwrap();
    assert_eq!(
        s,
        serde_json::json!({"state": "success", "context": "continuous-delivery/guestbook",
        "description": "Application guestbook is now running a1b2c3d.", "target_url": "https://argocd.example.com/applications/guestbook"})
    );
    let mut bad = n.clone();
    bad.payload["status"]["state"] = serde_json::json!("green");
    assert!(payload::status(&bad).unwrap().unwrap_err().0.contains("green"));
    let mut d = n.clone();
    d.payload["deployment"] =
        serde_json::json!({"state": "success", "environment": "prod", "environmentURL": "https://gb.example.com", "autoMerge": true});
    let (create, status) = payload::deployment(&d, "a1b2c3d4e5").unwrap().unwrap();
    assert_eq!(
        (create["ref"].as_str(), create["environment"].as_str(), create["auto_merge"].as_bool()),
        (Some("a1b2c3d4e5"), Some("prod"), Some(true))
    );
    assert_eq!(create["required_contexts"], serde_json::json!([]));
    assert_eq!(status["environment_url"], "https://gb.example.com");
    let mut c = n.clone();
    c.payload["pullRequestComment"] = serde_json::json!({"content": "deployed", "commentTag": "cd/guestbook"});
    assert_eq!(
        payload::comment(&c),
        Some(("deployed\n<!-- argocd-notifications cd/guestbook -->".to_string(), Some("cd/guestbook".to_string())))
    );
}

#[test]
fn the_app_jwt_is_signed_with_the_private_key() {
    use base64::Engine as _;
    let key = load_private_key(KEY_PEM).unwrap();
    let jwt = app_jwt(&key, "12345", 1_772_000_000).unwrap();
    let parts: Vec<&str> = jwt.split('.').collect();
    assert_eq!(parts.len(), 3);
    let b64 = base64::engine::general_purpose::URL_SAFE_NO_PAD;
    let claims: serde_json::Value = serde_json::from_slice(&b64.decode(parts[1]).unwrap()).unwrap();
    assert_eq!(claims, serde_json::json!({"iat": 1_771_999_940, "exp": 1_772_000_540, "iss": "12345"}));
    let public = ring::signature::UnparsedPublicKey::new(&ring::signature::RSA_PKCS1_2048_8192_SHA256, key.public().as_ref().to_vec());
    public.verify(format!("{}.{}", parts[0], parts[1]).as_bytes(), &b64.decode(parts[2]).unwrap()).expect("a valid RS256 signature");
    assert!(load_private_key("-----BEGIN RSA PRIVATE KEY-----\nAAAA\n-----END RSA PRIVATE KEY-----\n").is_err());
    assert!(Spec::<super::Github>::parse(serde_json::json!({"appID": 1})).is_err(), "half an App");
    assert!(
        Spec::<super::Github>::parse(serde_json::json!({"appID": 1, "installationID": 2, "privateKey": "$k"})).is_ok()
    );
}

#[tokio::test]
async fn compliance() {
    let rx = HttpReceiver::start(Reply::new(201, "{}")).await;
    let secrets = Secrets::from_map([("github-token", TOKEN)]);
    let make = maker::<super::Github>(serde_json::json!({"token": "$github-token", "enterpriseBaseURL": rx.url()}));
    let r = check_http_kind(
        &rx,
        &make,
        &notification(),
        &secrets,
        TOKEN,
        Reply::new(201, "{}"),
        Reply::new(422, r#"{"message":"No commit found for SHA"}"#),
    )
    .await;
    assert_eq!((r.method.as_str(), r.path.as_str()), ("POST", "/repos/argoproj/argocd-example-apps/statuses/a1b2c3d4e5"));
    assert_eq!(r.headers["authorization"], format!("Bearer {TOKEN}"));
    assert_eq!(r.headers["user-agent"], "driftwatch");
    assert_eq!(r.headers["accept"], "application/vnd.github+json");
}

/// As a GitHub App: the installation token is fetched once and reused; a status, a
/// deployment with its status, and the pull request's tagged comment updated.
#[tokio::test]
async fn as_an_app_status_deployment_and_comment() {
    let rx = HttpReceiver::start(Reply::new(201, "{}")).await;
    let secrets = Secrets::from_map([("gh-key", KEY_PEM)]);
    let s = Spec::<super::Github>::parse(serde_json::json!({"appID": 12345, "installationID": "678", "privateKey": "$gh-key", "enterpriseBaseURL": format!("{}/api/v3", rx.url())}),
    )
    .unwrap();
    let state = std::sync::Arc::new(crate::state::Store::in_memory().unwrap());
    let env = crate::deliver::testkit::env(state, secrets);
    let svc = s.build("github", &env).unwrap();
    let mut n = notification();
    n.payload["deployment"] = serde_json::json!({"state": "success", "environment": "production"});
    n.payload["pullRequestComment"] = serde_json::json!({"content": "guestbook deployed", "commentTag": "cd/guestbook"});
    rx.script(vec![
        Reply::new(201, r#"{"token":"ghs_installation_SECRET","expires_at":"2099-01-01T00:00:00Z"}"#),
        Reply::new(201, "{}"),
        Reply::new(201, r#"{"id": 42}"#),
        Reply::new(201, "{}"),
        Reply::new(200, r#"[{"number": 7}]"#),
        Reply::new(200, r#"[{"id": 1, "body": "other"}, {"id": 99, "body": "old\n<!-- argocd-notifications cd/guestbook -->"}]"#),
        Reply::new(200, "{}"),
        // The second notification: no new token.
        Reply::new(201, "{}"),
    ]);
    assert_eq!(svc.deliverer.deliver(std::slice::from_ref(&n)).await, crate::deliver::outcome::Outcome::Delivered);
    let mut only_status = notification();
    only_status.payload["status"]["state"] = serde_json::json!("failure");
    assert_eq!(svc.deliverer.deliver(std::slice::from_ref(&only_status)).await, crate::deliver::outcome::Outcome::Delivered);
    let reqs = rx.requests();
    let seen: Vec<String> = reqs.iter().map(|r| format!("{} {}", r.method, r.path)).collect();
    assert_eq!(
        seen,
        [
            "POST /api/v3/app/installations/678/access_tokens",
            "POST /api/v3/repos/argoproj/argocd-example-apps/statuses/a1b2c3d4e5",
            "POST /api/v3/repos/argoproj/argocd-example-apps/deployments",
            "POST /api/v3/repos/argoproj/argocd-example-apps/deployments/42/statuses",
            "GET /api/v3/repos/argoproj/argocd-example-apps/commits/a1b2c3d4e5/pulls",
            "GET /api/v3/repos/argoproj/argocd-example-apps/issues/7/comments?per_page=100",
            "PATCH /api/v3/repos/argoproj/argocd-example-apps/issues/comments/99",
            "POST /api/v3/repos/argoproj/argocd-example-apps/statuses/a1b2c3d4e5",
        ]
    );
    assert!(reqs[0].headers["authorization"].starts_with("Bearer ey"), "the App JWT");
    assert!(reqs[1..].iter().all(|r| r.headers["authorization"] == "Bearer ghs_installation_SECRET"), "the installation token");
    let patch: serde_json::Value = serde_json::from_str(&reqs[6].body).unwrap();
    assert_eq!(patch["body"], "guestbook deployed\n<!-- argocd-notifications cd/guestbook -->");
    let last: serde_json::Value = serde_json::from_str(&reqs[7].body).unwrap();
    assert_eq!(last["state"], "failure");
}
