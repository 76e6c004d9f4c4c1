//! The Grafana destination: its requests, and the compliance harness (success, retry, permanent, timeout, `Retry-After`, no secret leaked).

use super::*;
use crate::deliver::ecs::tests::sample;
use crate::deliver::testkit::{HttpReceiver, Reply, check_http_kind, maker};
use crate::model::DestinationKind;
use crate::secret::Secrets;

const KEY: &str = "glsa_SECRET_grafana_3";

fn notification() -> crate::model::Notification {
    let mut n = sample(DestinationKind::Grafana, "grafana");
    n.destination.recipient = "deploy|prod".into();
    n.payload = serde_json::json!({"message": "guestbook synced to a1b2c3d\n"});
    n
}

#[test]
fn the_annotation_carries_the_tags() {
    let now = chrono::DateTime::parse_from_rfc3339("2026-03-02T03:12:00Z").unwrap().with_timezone(&chrono::Utc);
    let a = annotation(&notification(), now);
    assert_eq!(a["tags"], serde_json::json!(["deploy", "prod", "argocd", "app:guestbook", "trigger:on-out-of-sync"]));
    assert_eq!(a["time"], 1_772_421_120_000i64);
    assert_eq!(a["text"], "guestbook synced to a1b2c3d");
    assert_eq!(a["isRegion"], false);
}

#[tokio::test]
async fn compliance() {
    let rx = HttpReceiver::start(Reply::new(200, r#"{"message":"Annotation added","id":1}"#)).await;
    let secrets = Secrets::from_map([("grafana-key", KEY)]);
    let make = maker::<super::Grafana>(serde_json::json!({"apiUrl": format!("{}/api", rx.url()), "apiKey": "$grafana-key"}));
    let r = &check_http_kind(
        &rx,
        &make,
        &notification(),
        &secrets,
        KEY,
        Reply::new(200, "{}"),
        Reply::new(400, r#"{"message":"bad request data"}"#),
    )
    .await;
    assert_eq!((r.method.as_str(), r.path.as_str()), ("POST", "/api/annotations"));
    assert_eq!(r.headers["authorization"], format!("Bearer {KEY}"));
}
