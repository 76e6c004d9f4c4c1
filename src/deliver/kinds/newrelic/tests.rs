//! The New Relic destination: its requests, and the compliance harness (success, retry, permanent, timeout, `Retry-After`, no secret leaked).

use super::*;
use crate::deliver::ecs::tests::sample;
use crate::deliver::testkit::{HttpReceiver, Reply, check_http_kind, maker};
use crate::model::DestinationKind;
use crate::secret::Secrets;

const KEY: &str = "NRAK-SECRET0000000000000000";

fn notification() -> crate::model::Notification {
    let mut n = sample(DestinationKind::Newrelic, "newrelic");
    n.destination.recipient = "123456789".into();
    n.payload = serde_json::json!({"message": "guestbook synced\n", "changelog": "Synced by Argo CD", "user": "argocd"});
    n
}

#[test]
fn the_marker_defaults_to_the_synced_revision() {
    assert_eq!(
        deployment(&notification()),
        serde_json::json!({"deployment": {"revision": "a1b2c3d", "description": "guestbook synced", "changelog": "Synced by Argo CD", "user": "argocd"}})
    );
}

#[tokio::test]
async fn compliance() {
    let rx = HttpReceiver::start(Reply::new(201, r#"{"deployment":{"id":1}}"#)).await;
    let secrets = Secrets::from_map([("nr-key", KEY)]);
    let make = maker::<super::Newrelic>(serde_json::json!({"apiURL": rx.url(), "apiKey": "$nr-key"}));
    let r = &check_http_kind(
        &rx,
        &make,
        &notification(),
        &secrets,
        KEY,
        Reply::new(201, "{}"),
        Reply::new(422, r#"{"error":{"title":"revision is required"}}"#),
    )
    .await;
    assert_eq!((r.method.as_str(), r.path.as_str()), ("POST", "/v2/applications/123456789/deployments.json"));
    assert_eq!(r.headers["x-api-key"], KEY);
}
