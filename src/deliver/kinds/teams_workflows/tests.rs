//! The Teams workflow destination: its requests, and the compliance harness (success, retry, permanent, timeout, `Retry-After`, no secret leaked).

use super::*;
use crate::deliver::ecs::tests::sample;
use crate::deliver::testkit::{HttpReceiver, Reply, check_all_scenarios, maker};
use crate::model::DestinationKind;
use crate::secret::Secrets;

const SIG: &str = "sig=SECRET-workflow-signature";

fn notification() -> crate::model::Notification {
    let mut n = sample(DestinationKind::TeamsWorkflows, "teams-workflows");
    n.destination.recipient = "ops".into();
    n.payload = serde_json::json!({"message": "guestbook degraded\nmore", "facts": [{"name": "Sync", "value": "OutOfSync"}],
        "potentialAction": [{"@type": "OpenUri", "name": "Open", "targets": [{"os": "default", "uri": "https://argocd.example.com"}]}]});
    n
}

#[test]
fn an_adaptive_card_in_a_message() {
    let m = message(&notification());
    assert_eq!(m["type"], "message");
    let a = &m["attachments"][0];
    assert_eq!(a["contentType"], "application/vnd.microsoft.card.adaptive");
    let c = &a["content"];
    assert_eq!((c["type"].as_str(), c["version"].as_str()), (Some("AdaptiveCard"), Some("1.4")));
    assert_eq!(c["body"][0]["text"], "guestbook degraded");
    assert_eq!(c["body"][2]["facts"][0], serde_json::json!({"title": "Sync", "value": "OutOfSync"}));
    assert_eq!(c["actions"][0], serde_json::json!({"type": "Action.OpenUrl", "title": "Open", "url": "https://argocd.example.com"}));
}

#[tokio::test]
async fn compliance() {
    let rx = HttpReceiver::start(Reply::new(202, "")).await;
    let url = format!("{}/workflows/abc/triggers/manual/paths/invoke?api-version=2016-06-01&{SIG}", rx.url());
    let secrets = Secrets::from_map([("wf-url", url.as_str())]);
    let make = maker::<super::TeamsWorkflows>(serde_json::json!({"recipientUrls": {"ops": "$wf-url"}}));
    check_all_scenarios(
        &rx,
        &make,
        &notification(),
        &secrets,
        SIG,
        Reply::new(202, ""),
        Reply::new(400, r#"{"error":{"code":"InvalidRequestContent"}}"#),
    )
    .await;
}
