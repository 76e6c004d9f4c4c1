//! The Alertmanager destination: its requests, and the compliance harness (success, retry, permanent, timeout, `Retry-After`, no secret leaked).

use super::*;
use crate::deliver::ecs::tests::sample;
use crate::deliver::kind::Spec;
use crate::deliver::testkit::{HttpReceiver, Reply, check_http_kind, maker};
use crate::model::{Action, DestinationKind};
use crate::secret::Secrets;

const TOKEN: &str = "am-token-SECRET-7";

fn notification() -> crate::model::Notification {
    let mut n = sample(DestinationKind::Alertmanager, "alertmanager");
    n.payload = serde_json::json!({"message": "guestbook drifted\nRole edited by kubectl-edit",
        "labels": {"team": "platform", "empty": ""}, "annotations": {"runbook_url": "https://runbooks/drift"}});
    n
}

#[test]
fn an_alert_fires_and_resolves_with_the_same_labels() {
    let now = chrono::DateTime::parse_from_rfc3339("2026-03-02T03:12:00Z").unwrap().with_timezone(&chrono::Utc);
    let fire = alerts(&notification(), "https://argocd.example.com", now);
    let a = &fire[0];
    assert_eq!(a["labels"]["alertname"], "on-out-of-sync");
    assert_eq!(a["labels"]["application"], "guestbook");
    assert_eq!(a["labels"]["team"], "platform");
    assert!(a["labels"].get("empty").is_none(), "an empty label is left out, as Alertmanager drops it");
    assert_eq!(a["annotations"]["summary"], "guestbook drifted");
    assert_eq!(a["annotations"]["runbook_url"], "https://runbooks/drift");
    assert_eq!(a["generatorURL"], "https://argocd.example.com/applications/argocd/guestbook");
    assert_eq!(a["startsAt"], "2026-03-02T03:12:00Z");
    let mut r = notification();
    r.action = Action::Resolve;
    let resolved = alerts(&r, "", now);
    assert_eq!(resolved[0]["labels"], a["labels"], "the same labels identify the same alert");
    assert_eq!(resolved[0]["endsAt"], "2026-03-02T03:12:00Z");
    assert!(resolved[0].get("startsAt").is_none());
}

#[tokio::test]
async fn compliance() {
    let rx = HttpReceiver::start(Reply::new(200, "")).await;
    let secrets = Secrets::from_map([("am-token", TOKEN)]);
    let target = rx.url().trim_start_matches("http://").to_string();
    let make = maker::<super::Alertmanager>(serde_json::json!({"targets": [target], "bearerToken": "$am-token"}));
    let r = &check_http_kind(
        &rx,
        &make,
        &notification(),
        &secrets,
        TOKEN,
        Reply::new(200, ""),
        Reply::new(400, "{\"code\":400,\"message\":\"bad alert\"}"),
    )
    .await;
    assert_eq!((r.method.as_str(), r.path.as_str()), ("POST", "/api/v2/alerts"));
    assert_eq!(r.headers["authorization"], format!("Bearer {TOKEN}"));
    assert!(Spec::<super::Alertmanager>::parse(serde_json::json!({"targets": []})).is_err());
}

/// One target down: the next one takes the alert.
#[tokio::test]
async fn a_second_target_takes_the_alert_when_the_first_is_down() {
    let down = HttpReceiver::start(Reply::new(503, "down")).await;
    let up = HttpReceiver::start(Reply::new(200, "")).await;
    let s = Spec::<super::Alertmanager>::parse(serde_json::json!({"targets": [down.url(), up.url()]})).unwrap();
    let state = std::sync::Arc::new(crate::state::Store::in_memory().unwrap());
    let env = crate::deliver::testkit::env(state, Secrets::default());
    let svc = s.build("alertmanager", &env).unwrap();
    let outcome = svc.deliverer.deliver(std::slice::from_ref(&notification())).await;
    assert_eq!(outcome, crate::deliver::outcome::Outcome::Delivered);
    assert_eq!((down.requests().len(), up.requests().len()), (1, 1));
}
