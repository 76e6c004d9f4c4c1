//! `service.<kind>[.<name>]`: Argo CD's service settings as driftwatch's, secret
//! references kept.

use serde_json::{Map, Value, json};

use super::read::{Entry, embedded};
use super::templates::OTHER_KINDS;
use super::{Out, commented, display};

fn collect_refs(v: &Value, refs: &mut Vec<String>) {
    match v {
        Value::String(s) => {
            for part in s.split('$').skip(1) {
                let key: String = part.chars().take_while(|c| c.is_alphanumeric() || matches!(c, '-' | '_' | '.')).collect();
                if !key.is_empty() {
                    refs.push(key);
                }
            }
        }
        Value::Array(a) => a.iter().for_each(|x| collect_refs(x, refs)),
        Value::Object(m) => m.values().for_each(|x| collect_refs(x, refs)),
        _ => {}
    }
}

pub(super) fn service(e: &Entry, rest: &str, out: &mut Out) {
    let (kind, name) = rest.split_once('.').map_or((rest, rest), |(k, n)| (k, n));
    let item = format!("service {rest}");
    let cfg = match embedded(&e.value) {
        Ok(Value::Object(m)) => m,
        Ok(Value::Null) => Map::new(),
        Ok(_) | Err(_) => {
            out.report.services.todo += 1;
            let line = out.todo(e, &item, "not a map of settings");
            out.config_todos.push(line);
            return;
        }
    };
    let mut refs = Vec::new();
    cfg.values().for_each(|v| collect_refs(v, &mut refs));
    // The kind Argo CD's service type names, and its mapping, from the kind registry.
    let Some((dest, argo, convert)) = crate::deliver::kinds::argo_service(kind) else {
        out.report.services.todo += 1;
        let reason = if OTHER_KINDS.contains(&kind) {
            format!("driftwatch has no {kind} destination; subscriptions to `{name}` are reported until it is configured")
        } else {
            format!("unknown service type `{kind}`")
        };
        let mut line = out.todo(e, &item, &reason);
        line.push('\n');
        line.push_str(&commented(&display(&e.value)));
        out.config_todos.push(line);
        return;
    };
    let imported = convert(&argo, &cfg);
    let mut svc = Map::new();
    if argo.typed {
        svc.insert("type".into(), json!(dest.as_str()));
    }
    svc.extend(imported.settings);
    for (k, why) in &imported.notes {
        out.note(e, &format!("{item}.{k}"), why);
    }
    let unknown = imported.unknown;
    if !unknown.is_empty() {
        out.report.services.todo += 1;
        let line = out.todo(e, &item, &format!("settings driftwatch's {kind} service does not have: {}", unknown.join(", ")));
        out.config_todos.push(line);
    } else {
        out.report.services.converted += 1;
    }
    for r in refs {
        out.secret_refs.entry(r).or_insert_with(|| name.to_string());
    }
    let services = out.config.entry("services").or_insert_with(|| json!({}));
    if let Some(m) = services.as_object_mut() {
        m.insert(name.to_string(), Value::Object(svc));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every service type Argo CD's notifications engine has either converts to a
    /// registered kind or is one driftwatch says it does not have.
    #[test]
    fn every_argo_cd_service_type_is_known() {
        let argo = [
            "alertmanager",
            "awssqs",
            "email",
            "github",
            "gitlab",
            "googlechat",
            "grafana",
            "mattermost",
            "newrelic",
            "opsgenie",
            "pagerduty",
            "pagerdutyv2",
            "pushover",
            "rocketchat",
            "slack",
            "teams",
            "teams-workflows",
            "telegram",
            "webex",
            "webhook",
        ];
        for t in argo {
            assert!(crate::deliver::kinds::argo_service(t).is_some() || OTHER_KINDS.contains(&t), "{t}");
        }
    }

    #[test]
    fn a_service_converts_through_its_kind() {
        let e = Entry {
            file: "cm.yaml".into(),
            line: 3,
            key: "service.webhook.hook".into(),
            value: json!({"url": "https://x", "headers": [{"name": "X-A", "value": "$t"}], "retryMax": 3, "bogus": 1}),
        };
        let mut out = Out::new(&super::super::read::Input { entries: vec![e.clone()], ..Default::default() });
        service(&e, "webhook.hook", &mut out);
        assert_eq!(out.config["services"]["hook"], json!({"type": "webhook", "url": "https://x", "headers": {"X-A": "$t"}}));
        assert_eq!(out.report.todos.len(), 1, "bogus is marked");
        assert!(out.report.todos[0].reason.contains("bogus"));
        assert!(out.report.notes.iter().any(|n| n.item == "service webhook.hook.retryMax"), "{:?}", out.report.notes);
        assert_eq!(out.secret_refs.keys().collect::<Vec<_>>(), ["t"]);
    }
}
