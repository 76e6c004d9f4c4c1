//! The Microsoft Teams destination: its requests, and the compliance harness (success, retry, permanent, timeout, `Retry-After`, no secret leaked).

use super::*;
use crate::deliver::ecs::tests::sample;
use crate::deliver::testkit::{HttpReceiver, Reply, Scenario, check_scenario, maker};
use crate::model::DestinationKind;
use crate::secret::Secrets;

const SECRET_PATH: &str = "webhookb2/SECRET-teams-path";

fn notification() -> crate::model::Notification {
    let mut n = sample(DestinationKind::Teams, "teams");
    n.destination.recipient = "ops".into();
    n.payload = serde_json::json!({
        "message": "Application guestbook has degraded.\nDetails follow.",
        "title": "guestbook degraded", "themeColor": "#FF0000",
        "facts": [{"name": "Sync Status", "value": "OutOfSync"}],
        "potentialAction": [{"@type": "OpenUri", "name": "Open", "targets": [{"os": "default", "uri": "https://argocd.example.com"}]}]
    });
    n
}

#[test]
fn a_message_card_from_the_fields() {
    let c = card(&notification());
    assert_eq!(c["@type"], "MessageCard");
    assert_eq!(c["title"], "guestbook degraded");
    assert_eq!(c["summary"], "guestbook degraded");
    assert_eq!(c["themeColor"], "FF0000");
    assert_eq!(c["text"], "Application guestbook has degraded.\nDetails follow.");
    assert_eq!(c["sections"][0]["facts"][0]["name"], "Sync Status");
    assert_eq!(c["potentialAction"][0]["name"], "Open");
    let mut whole = notification();
    whole.payload["template"] = serde_json::json!({"type": "message", "attachments": []});
    assert_eq!(card(&whole), serde_json::json!({"type": "message", "attachments": []}), "teams.template is the card");
    let mut bare = notification();
    bare.payload = serde_json::json!({"message": "only a message\nsecond line"});
    let c = card(&bare);
    assert_eq!((c["title"].as_str(), c["summary"].as_str()), (Some("only a message"), Some("only a message")));
    assert!(c.get("sections").is_none());
}

#[tokio::test]
async fn compliance() {
    let rx = HttpReceiver::start(Reply::new(200, "1")).await;
    let url = format!("{}/{SECRET_PATH}", rx.url());
    let secrets = Secrets::from_map([("teams-ops-url", url.as_str())]);
    let make = maker::<super::Teams>(serde_json::json!({"recipientUrls": {"ops": "$teams-ops-url"}}));
    for (scenario, replies) in [
        (Scenario::Success, vec![]),
        (Scenario::RetryableThenSuccess, vec![Reply::new(503, "busy")]),
        (Scenario::Permanent, vec![Reply::new(400, "Bad payload")]),
        (
            Scenario::Permanent,
            vec![
                Reply::new(200, "Webhook message delivery failed with error: Microsoft Teams endpoint returned HTTP error 403").rejected(),
            ],
        ),
        (Scenario::TimeoutThenSuccess, vec![Reply::new(200, "1").delayed(std::time::Duration::from_millis(1500))]),
        (Scenario::RateLimitedThenSuccess, vec![Reply::new(429, "slow down").header("Retry-After", "1")]),
    ] {
        rx.clear();
        rx.script(replies);
        check_scenario(scenario, &rx, &make, &notification(), &secrets, SECRET_PATH).await;
    }
    rx.clear();
    check_scenario(Scenario::Success, &rx, &make, &notification(), &secrets, SECRET_PATH).await;
    let r = &rx.requests()[0];
    assert_eq!((r.method.as_str(), r.path.as_str()), ("POST", format!("/{SECRET_PATH}").as_str()));
    let body: serde_json::Value = serde_json::from_str(&r.body).unwrap();
    assert_eq!(body["@type"], "MessageCard");
}
