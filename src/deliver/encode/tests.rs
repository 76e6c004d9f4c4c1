//! The payload of every destination kind, rendered from templates through its encoder:
//! fields, defaults, JSON fields, errors.

use std::collections::BTreeMap;

use serde_json::{Value, json};

use crate::deliver::kinds::encoder;
use crate::deliver::kinds::{TemplateDef, section_fields};
use crate::model::{App, DestinationKind, Severity};
use crate::source::SourceFile;
use crate::template::{MAX_FIELD_BYTES, RenderContext, RenderError, Rendered, Target, TemplateSet};

fn set(yaml: &str) -> TemplateSet {
    let file = SourceFile::new("t.yaml", yaml.to_string());
    let def: TemplateDef = file.parse("template t").unwrap();
    TemplateSet::compile(&[("t".to_string(), def, file)]).map(|(s, _)| s).unwrap_or_else(|e| panic!("{e:?}"))
}

fn app() -> App {
    App::from_value(json!({
        "apiVersion": "argoproj.io/v1alpha1", "kind": "Application",
        "metadata": {"name": "web", "namespace": "argocd"},
        "status": {"sync": {"status": "OutOfSync"}, "conditions": [{"type": "SyncError", "message": "bad \"quote\""}]}
    }))
    .unwrap()
}

fn render(s: &TemplateSet, kind: DestinationKind, service: &str) -> Result<Value, RenderError> {
    render_full(s, kind, service).map(|r| r.payload)
}

fn render_full(s: &TemplateSet, kind: DestinationKind, service: &str) -> Result<Rendered, RenderError> {
    let app = app();
    let ctx_map: BTreeMap<String, String> = [("argocdUrl".to_string(), "https://cd.example.com".to_string())].into();
    let mut ctx = RenderContext::new(&app, &ctx_map);
    s.render("t", &mut ctx, &Target { trigger: "on-x", kind, service, recipient: "ops", resolved: false }, &app, encoder(kind))
}

#[test]
fn payload_per_destination_kind() {
    let s = set(r#"
message: "{{app.metadata.name}} is {{app.status.sync.status}} ({{serviceType}} {{recipient}} {{trigger}}) <{{context.argocdUrl}}|open>{{app.missing.field}}"
slack:
  attachments: |
    [{"title": {{json app.metadata.name}}, "fields": [{{#each app.status.conditions}}{{#if @index}},{{/if}}{"title": "{{json_escape type}}", "value": "{{json_escape message}}"}{{/each}}]}]
  groupingKey: "{{app.metadata.name}}"
email:
  subject: Drift in {{app.metadata.name}}
  html: "<b>{{app.metadata.name}}</b>"
pagerduty:
  severity: Critical
  component: "{{app.metadata.name}}"
  customDetails: |
    {"sync": {{json app.status.sync}}}
webhook:
  siem:
    method: put
    path: /events/{{app.metadata.name}}
    headers:
      X-App: "{{app.metadata.name}}"
    body: |
      {"app": {{json app.metadata.name}}}
"#);
    assert_eq!(
        render(&s, DestinationKind::Console, "console").unwrap(),
        json!({"message": "web is OutOfSync (console ops on-x) <https://cd.example.com|open>"})
    );
    let slack = render(&s, DestinationKind::Slack, "slack").unwrap();
    assert_eq!(slack["text"], "web is OutOfSync (slack ops on-x) <https://cd.example.com|open>");
    assert_eq!(slack["attachments"][0]["fields"][0], json!({"title": "SyncError", "value": "bad \"quote\""}));
    assert_eq!(slack["groupingKey"], "web");
    let email = render(&s, DestinationKind::Email, "email").unwrap();
    assert_eq!(email["subject"], "Drift in web");
    assert_eq!(email["html"], "<b>web</b>");
    assert!(email["body"].as_str().unwrap().starts_with("web is OutOfSync (email"));
    let pd = render(&s, DestinationKind::Pagerduty, "pagerduty").unwrap();
    assert_eq!(pd["severity"], "critical");
    assert_eq!(pd["source"], "argocd/web");
    assert_eq!(pd["component"], "web");
    assert_eq!(pd["custom_details"], json!({"sync": {"status": "OutOfSync"}}));
    let hook = render(&s, DestinationKind::Webhook, "siem").unwrap();
    assert_eq!(hook, json!({"method": "PUT", "path": "/events/web", "headers": {"X-App": "web"}, "body": "{\"app\": \"web\"}\n"}));
    assert_eq!(
        render(&s, DestinationKind::Webhook, "other").unwrap_err(),
        RenderError::NoWebhookField { template: "t".into(), service: "other".into() }
    );
}

#[test]
fn invalid_json_fields_name_template_and_field() {
    let s = set("message: x\nslack:\n  attachments: '[{\"title\": \"{{app.metadata.name}}\",]'\n");
    let e = render(&s, DestinationKind::Slack, "slack").unwrap_err();
    assert!(matches!(&e, RenderError::InvalidJson { template, field, .. } if template == "t" && field == "slack.attachments"), "{e}");
    assert!(e.to_string().starts_with("template t field slack.attachments did not render to valid JSON"), "{e}");
}

#[test]
fn pagerduty_summary_is_truncated_and_severity_checked() {
    let s = set(&format!("message: \"{}\"\n", "x".repeat(3000)));
    let pd = render(&s, DestinationKind::Pagerduty, "pagerduty").unwrap();
    assert_eq!(pd["summary"].as_str().unwrap().chars().count(), crate::deliver::kinds::pagerduty::payload::SUMMARY_MAX);
    assert_eq!(pd["severity"], "error");
    let s = set("message: x\npagerduty:\n  severity: \"{{app.metadata.name}}\"\n");
    let e = render(&s, DestinationKind::Pagerduty, "pagerduty").unwrap_err();
    assert!(e.to_string().contains("severity \"web\" is not one of"), "{e}");
}

#[test]
fn output_is_bounded() {
    let s = set("message: \"{{#each app.status.conditions}}{{/each}}x\"\nslack:\n  text: \"{{app.metadata.name}}\"\n");
    assert_eq!(render(&s, DestinationKind::Slack, "slack").unwrap()["text"], "web");
    // A body that would be enormous is cut to the limit, on a character boundary.
    let big = "é".repeat(MAX_FIELD_BYTES);
    let app = App::from_value(json!({"kind": "Application", "metadata": {"name": big}})).unwrap();
    let s = set("message: \"{{app.metadata.name}}{{app.metadata.name}}\"\n");
    let mut ctx = RenderContext::new(&app, &BTreeMap::new());
    let t = Target { trigger: "", kind: DestinationKind::Console, service: "console", recipient: "", resolved: false };
    let out = s.render("t", &mut ctx, &t, &app, encoder(t.kind)).unwrap();
    assert!(out.payload["message"].as_str().unwrap().len() <= MAX_FIELD_BYTES);
}

/// The bound applies while rendering: three nested loops over 300 items of 1 KiB would
/// build 27 GiB before a cut at the end; the render stops at the bound instead. A text
/// field is cut; a JSON field that passes the bound is refused.
#[test]
fn a_field_stops_rendering_at_its_bound() {
    let items: Vec<Value> = (0..300).map(|_| json!("x".repeat(1024))).collect();
    let app = App::from_value(json!({"kind": "Application", "metadata": {"name": "web", "annotations": {}}, "status": {"items": items}}))
        .unwrap();
    let loops =
        "{{#each app.status.items}}{{#each ../app.status.items}}{{#each ../../app.status.items}}{{this}}{{/each}}{{/each}}{{/each}}";
    let s = set(&format!("message: \"{loops}\"\n"));
    let mut ctx = RenderContext::new(&app, &BTreeMap::new());
    let t = Target { trigger: "", kind: DestinationKind::Console, service: "console", recipient: "", resolved: false };
    let out = s.render("t", &mut ctx, &t, &app, encoder(t.kind)).unwrap();
    assert_eq!(out.payload["message"].as_str().unwrap().len(), MAX_FIELD_BYTES);
    let s = set(&format!("message: m\nslack:\n  blocks: \"[{loops}]\"\n"));
    let t = Target { trigger: "", kind: DestinationKind::Slack, service: "slack", recipient: "", resolved: false };
    let e = s.render("t", &mut ctx, &t, &app, encoder(t.kind));
    assert!(matches!(e, Err(RenderError::TooLong { .. })), "{e:?}");
}

#[test]
fn else_if_chains_and_each_with_index() {
    let s = set(
        "message: \"{{#if app.nope}}a{{else if app.metadata.name}}b{{else}}c{{/if}} {{#each app.status.conditions}}{{@index}}={{type}}{{/each}}\"\n",
    );
    assert_eq!(render(&s, DestinationKind::Console, "console").unwrap()["message"], "b 0=SyncError");
}

#[test]
fn severity_resolved_and_siem_payloads() {
    let s = set("message: \"{{#if resolved}}resolved{{else}}firing{{/if}} {{app.metadata.name}}\"\nseverity: warning\n");
    let r = render_full(&s, DestinationKind::Splunk, "siem").unwrap();
    assert_eq!(r.payload, json!({"message": "firing web"}));
    assert_eq!(r.severity, Severity::Warning);
    assert_eq!(
        render(&s, DestinationKind::Pagerduty, "pd").unwrap()["severity"],
        "warning",
        "the template severity is PagerDuty's default"
    );
    let app = app();
    let mut ctx = RenderContext::new(&app, &BTreeMap::new());
    let t = Target { trigger: "on-x", kind: DestinationKind::Syslog, service: "s", recipient: "", resolved: true };
    assert_eq!(s.render("t", &mut ctx, &t, &app, encoder(t.kind)).unwrap().payload["message"], "resolved web");
    let bad = set("message: x\nseverity: loud\n");
    assert!(render(&bad, DestinationKind::Console, "c").unwrap_err().to_string().contains("severity \"loud\""));
}

/// The kinds with Argo CD's field names: Teams, Google Chat, Opsgenie, Alertmanager,
/// GitHub (with the repository and revision taken from the Application by default).
#[test]
fn payloads_of_the_argo_cd_named_kinds() {
    let s = set(r##"
message: "{{app.metadata.name}} drifted"
teams:
  title: "{{app.metadata.name}}"
  themeColor: "#FF0000"
  facts: '[{"name": "Sync", "value": "{{json_escape app.status.sync.status}}"}]'
googlechat:
  threadKey: "{{app.metadata.namespace}}/{{app.metadata.name}}"
  cardsV2: '[{"cardId": "c", "card": {"header": {"title": {{json app.metadata.name}}}}}]'
opsgenie:
  priority: P2
  tags: '["argocd", {{json app.metadata.name}}]'
  details: '{"sync": {{json app.status.sync.status}}}'
alertmanager:
  labels:
    team: platform
    app: "{{app.metadata.name}}"
  annotations:
    runbook: https://runbooks/{{app.metadata.name}}
  generatorURL: "{{context.argocdUrl}}/applications/{{app.metadata.name}}"
github:
  status:
    state: "{{#if resolved}}success{{else}}failure{{/if}}"
    label: cd/{{app.metadata.name}}
"##);
    let teams = render(&s, DestinationKind::Teams, "teams").unwrap();
    assert_eq!((teams["title"].as_str(), teams["themeColor"].as_str()), (Some("web"), Some("#FF0000")));
    assert_eq!(teams["facts"][0]["value"], "OutOfSync");
    let chat = render(&s, DestinationKind::Googlechat, "googlechat").unwrap();
    assert_eq!((chat["threadKey"].as_str(), chat["cardsV2"][0]["card"]["header"]["title"].as_str()), (Some("argocd/web"), Some("web")));
    let og = render(&s, DestinationKind::Opsgenie, "opsgenie").unwrap();
    assert_eq!(
        (og["priority"].as_str(), og["tags"][1].as_str(), og["details"]["sync"].as_str()),
        (Some("P2"), Some("web"), Some("OutOfSync"))
    );
    let am = render(&s, DestinationKind::Alertmanager, "alertmanager").unwrap();
    assert_eq!(am["labels"], json!({"app": "web", "team": "platform"}));
    assert_eq!(am["annotations"]["runbook"], "https://runbooks/web");
    assert_eq!(am["generatorURL"], "https://cd.example.com/applications/web");
    let gh = render(&s, DestinationKind::Github, "github").unwrap();
    assert_eq!(gh["status"], json!({"state": "failure", "label": "cd/web"}));
    assert_eq!((gh["repoURL"].as_str(), gh["revision"].as_str()), (Some(""), Some("")), "this Application has neither");
    // A template without a github section is not sent to a github service.
    let plain = set("message: hi\n");
    assert!(matches!(render(&plain, DestinationKind::Github, "github"), Err(RenderError::NoKindFields { kind: "github", .. })));
    // Argo CD's `pagerdutyv2:` is read as `pagerduty:`.
    let pd = set("message: m\npagerdutyv2:\n  summary: \"{{app.metadata.name}} down\"\n");
    assert_eq!(render(&pd, DestinationKind::Pagerduty, "pagerduty").unwrap()["summary"], "web down");
}

/// The kinds whose payload is the message plus their section: every field of the
/// section arrives under its own name, text trimmed and JSON parsed; a Teams workflow
/// reads the `teams` section.
#[test]
fn a_section_kind_carries_every_field_of_its_section() {
    for (kind, section) in [
        (DestinationKind::Pushover, "pushover"),
        (DestinationKind::Newrelic, "newrelic"),
        (DestinationKind::Teams, "teams"),
        (DestinationKind::TeamsWorkflows, "teams"),
        (DestinationKind::Opsgenie, "opsgenie"),
        (DestinationKind::Googlechat, "googlechat"),
        (DestinationKind::Telegram, "telegram"),
        (DestinationKind::Rocketchat, "rocketchat"),
        (DestinationKind::Mattermost, "mattermost"),
    ] {
        let fields: Vec<(&str, bool)> =
            section_fields().filter_map(|(p, json)| Some((p.strip_prefix(section)?.strip_prefix('.')?, json))).collect();
        assert!(!fields.is_empty(), "{section}");
        let mut yaml = format!("message: \"{{{{app.metadata.name}}}} drifted\"\n{section}:\n");
        for (name, k) in &fields {
            match k {
                true => yaml.push_str(&format!("  {name}: '[{{{{json app.metadata.name}}}}]'\n")),
                false => yaml.push_str(&format!("  {name}: |\n    {name} of {{{{app.metadata.name}}}}\n")),
            }
        }
        let out = render(&set(&yaml), kind, section).unwrap();
        assert_eq!(out["message"], "web drifted", "{kind:?}");
        for (name, k) in &fields {
            let want = match k {
                true => json!(["web"]),
                false => json!(format!("{name} of web")),
            };
            assert_eq!(out[*name], want, "{kind:?} {name}");
        }
        assert_eq!(out.as_object().unwrap().len(), fields.len() + 1, "{kind:?}: nothing else");
    }
}

/// Review M7: text from the cluster is escaped for the markup of what is actually sent
/// (Slack mrkdwn, an e-mail's HTML part), not only by a helper no template calls; the
/// template's own markup and other destinations are left as they are.
#[test]
fn cluster_text_is_escaped_for_each_destinations_markup() {
    let s = set(r#"
message: "<{{context.argocdUrl}}|{{app.metadata.annotations.note}}>"
email:
  subject: "{{app.metadata.annotations.note}}"
  html: "<p>{{app.metadata.annotations.note}}</p>"
"#);
    let note = "<!channel> <https://evil.example|Re-authenticate> & \"x\"";
    let app =
        App::from_value(json!({"kind": "Application", "metadata": {"name": "web", "namespace": "argocd", "annotations": {"note": note}}}))
            .unwrap();
    let ctx_map: BTreeMap<String, String> = [("argocdUrl".to_string(), "https://cd.example.com".to_string())].into();
    let out = |kind: DestinationKind| {
        let mut ctx = RenderContext::new(&app, &ctx_map);
        let t = Target { trigger: "on-x", kind, service: kind.as_str(), recipient: "ops", resolved: false };
        s.render("t", &mut ctx, &t, &app, encoder(kind)).unwrap().payload
    };
    let slack = out(DestinationKind::Slack);
    assert_eq!(slack["text"], "<https://cd.example.com|&lt;!channel&gt; &lt;https://evil.example|Re-authenticate&gt; &amp; \"x\">");
    let mail = out(DestinationKind::Email);
    assert_eq!(mail["html"], "<p>&lt;!channel&gt; &lt;https://evil.example|Re-authenticate&gt; &amp; &quot;x&quot;</p>");
    assert_eq!(mail["subject"], note, "a plain-text subject is not markup");
    assert_eq!(out(DestinationKind::Console)["message"], format!("<https://cd.example.com|{note}>"));
}

/// Review L-g: a field that renders to JSON (a Teams card's facts, a Google Chat card,
/// Slack attachments) written by a custom template without `json_escape`: a value from
/// the cluster with quotes cannot end its JSON string and add fields of its own. (Before:
/// the Teams facts gained an `injected` fact and the Slack attachment a field.)
#[test]
fn cluster_text_cannot_change_a_json_fields_structure() {
    let s = set(r#"
message: "m"
teams:
  facts: '[{"name": "note", "value": "{{app.metadata.annotations.note}}"}]'
googlechat:
  cardsV2: '[{"cardId": "c", "card": {"header": {"title": "{{app.metadata.annotations.note}}"}}}]'
slack:
  attachments: '[{"title": "{{app.metadata.annotations.note}}", "text": "{{json_escape app.metadata.annotations.note}}"}]'
"#);
    let note = r#"x", "name": "injected", "value": "https://evil.example"#;
    let app =
        App::from_value(json!({"kind": "Application", "metadata": {"name": "web", "namespace": "argocd", "annotations": {"note": note}}}))
            .unwrap();
    let ctx_map: BTreeMap<String, String> = BTreeMap::new();
    let out = |kind: DestinationKind| {
        let mut ctx = RenderContext::new(&app, &ctx_map);
        let t = Target { trigger: "on-x", kind, service: kind.as_str(), recipient: "ops", resolved: false };
        s.render("t", &mut ctx, &t, &app, encoder(kind)).unwrap().payload
    };
    let teams = serde_json::to_string(&out(DestinationKind::Teams)).unwrap();
    assert!(!teams.contains(r#""name":"injected""#), "{teams}");
    assert!(teams.contains("x\u{e022}, \u{e022}name\u{e022}: \u{e022}injected"), "kept as text: {teams}");
    let chat = serde_json::to_string(&out(DestinationKind::Googlechat)).unwrap();
    assert!(!chat.contains(r#""name":"injected""#), "{chat}");
    let slack = out(DestinationKind::Slack);
    assert_eq!(slack["attachments"][0].get("name"), None, "{slack}");
    // A template that escapes shows the text as it was.
    assert_eq!(slack["attachments"][0]["text"], note, "{slack}");
    // Text that arrives in the private-use characters the JSON fields hide `"` in is
    // not put back as markup (a second review: `\u{e03c}!channel\u{e03e}` became `<!channel>`).
    let sneaky = "\u{e03c}!channel\u{e03e}";
    let app = App::from_value(
        json!({"kind": "Application", "metadata": {"name": "web", "namespace": "argocd", "annotations": {"note": sneaky}}}),
    )
    .unwrap();
    let mut ctx = RenderContext::new(&app, &ctx_map);
    let t = Target { trigger: "on-x", kind: DestinationKind::Slack, service: "slack", recipient: "ops", resolved: false };
    let slack = s.render("t", &mut ctx, &t, &app, encoder(DestinationKind::Slack)).unwrap().payload;
    let sent = serde_json::to_string(&slack).unwrap();
    assert!(!sent.contains("<!channel>"), "{sent}");
}

/// Review M7 and issue 38 item 12: Markdown destinations (Teams, Teams Workflows,
/// Mattermost, Webex, Rocket.Chat) get cluster text with its link, image and emphasis
/// syntax escaped, angle brackets as entities and mentions broken; Google Chat gets its
/// `<url|text>` and `<users/all>` brackets replaced. The template's own markup stays.
#[test]
fn cluster_text_is_escaped_for_markdown_destinations() {
    let s = set(r#"
message: "[{{app.metadata.name}}]({{context.argocdUrl}}) by {{app.metadata.annotations.note}}"
"#);
    let note = "[Re-authenticate](https://evil.example) ![x](https://evil.example/p.png) @channel <at>all</at> <users/all> **now**";
    let app =
        App::from_value(json!({"kind": "Application", "metadata": {"name": "web", "namespace": "argocd", "annotations": {"note": note}}}))
            .unwrap();
    let ctx_map: BTreeMap<String, String> = [("argocdUrl".to_string(), "https://cd.example.com".to_string())].into();
    let message = |kind: DestinationKind| {
        let mut ctx = RenderContext::new(&app, &ctx_map);
        let t = Target { trigger: "on-x", kind, service: kind.as_str(), recipient: "ops", resolved: false };
        let payload = s.render("t", &mut ctx, &t, &app, encoder(kind)).unwrap().payload;
        serde_json::to_string(&payload).unwrap()
    };
    let escaped = r"\[Re-authenticate\]\(https://evil.example\) \!\[x\]\(https://evil.example/p.png\) @\u2060channel &lt;at&gt;all&lt;/at&gt; &lt;users/all&gt; \*\*now\*\*";
    for kind in [DestinationKind::Teams, DestinationKind::Mattermost, DestinationKind::Webex, DestinationKind::Rocketchat] {
        let sent = message(kind);
        // As JSON text: a backslash is doubled, the joiner is written as a character.
        let want = format!("[web](https://cd.example.com) by {escaped}").replace('\\', "\\\\").replace("\\\\u2060", "\u{2060}");
        assert!(sent.contains(&want), "{kind}: {sent}");
        assert!(!sent.contains("@channel") && !sent.contains("<at>"), "{kind}: {sent}");
    }
    let chat = message(DestinationKind::Googlechat);
    assert!(chat.contains("\u{2039}users/all\u{203a}") && !chat.contains("<users/all>"), "{chat}");
    assert!(chat.contains("[web](https://cd.example.com)"), "the template's own markup: {chat}");
}
