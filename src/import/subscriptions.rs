//! `subscriptions`: recipients and triggers checked against what the source and the
//! catalog define.

use serde_json::{Map, Value, json};

use super::read::{Entry, embedded};
use super::{Out, commented, display, yaml};

pub(super) fn subscriptions(e: &Entry, out: &mut Out) {
    let list = match embedded(&e.value) {
        Ok(Value::Array(a)) => a,
        _ => {
            out.report.subscriptions.todo += 1;
            let mut line = out.todo(e, "subscriptions", "not a list of subscriptions");
            line.push('\n');
            line.push_str(&commented(&display(&e.value)));
            out.config_todos.push(line);
            return;
        }
    };
    let mut converted = Vec::new();
    for (i, s) in list.iter().enumerate() {
        let Some(m) = s.as_object() else {
            out.report.subscriptions.todo += 1;
            let line = out.todo(e, &format!("subscriptions[{i}]"), "not a map");
            out.config_todos.push(line);
            continue;
        };
        let mut sub = Map::new();
        let mut bad = Vec::new();
        // Argo CD's recipients are `service:recipient`; one without a service names none.
        let recipients: Vec<&str> = match m.get("recipients") {
            Some(Value::Array(a)) => a.iter().filter_map(Value::as_str).collect(),
            Some(Value::String(r)) => vec![r.as_str()],
            _ => Vec::new(),
        };
        let triggers: Vec<Value> = match m.get("triggers") {
            Some(Value::Array(a)) => a.clone(),
            Some(Value::String(t)) => vec![json!(t)],
            _ => Vec::new(),
        };
        if let Some(reason) = out.unknown_triggers(&triggers) {
            out.report.subscriptions.todo += 1;
            let mut line = out.todo(e, &format!("subscriptions[{i}]"), &reason);
            line.push('\n');
            line.push_str(&commented(&yaml::to_yaml(s)));
            out.config_todos.push(line);
            continue;
        }
        let unnamed: Vec<&str> = recipients.iter().copied().filter(|r| !r.contains(':')).collect();
        let unknown: Vec<&str> = recipients
            .iter()
            .filter_map(|r| r.split_once(':').map(|(s, _)| s))
            .filter(|s| !out.source_services.contains(*s) && crate::model::DestinationKind::parse(s).is_none())
            .collect();
        if !unnamed.is_empty() || !unknown.is_empty() {
            out.report.subscriptions.todo += 1;
            let reason = if !unnamed.is_empty() {
                format!(
                    "recipient(s) {} name no service (Argo CD's form is `service:recipient`, e.g. `email:{}`)",
                    unnamed.join(", "),
                    unnamed[0]
                )
            } else {
                format!(
                    "service(s) {} are not configured in the source (Argo CD logs an error each time it would send): configure them, or remove the recipients",
                    unknown.join(", ")
                )
            };
            let mut line = out.todo(e, &format!("subscriptions[{i}]"), &reason);
            line.push('\n');
            line.push_str(&commented(&yaml::to_yaml(s)));
            out.config_todos.push(line);
            continue;
        }
        for (k, v) in m {
            match (k.as_str(), v) {
                ("recipients" | "triggers", Value::Array(_)) => {
                    sub.insert(k.clone(), v.clone());
                }
                ("recipients" | "triggers", Value::String(one)) => {
                    sub.insert(k.clone(), json!([one]));
                }
                ("selector", Value::String(sel)) => {
                    sub.insert("selector".into(), json!(sel));
                }
                _ => bad.push(k.clone()),
            }
        }
        if bad.is_empty() {
            out.report.subscriptions.converted += 1;
            converted.push(Value::Object(sub));
        } else {
            out.report.subscriptions.todo += 1;
            let mut line = out.todo(e, &format!("subscriptions[{i}]"), &format!("fields driftwatch does not have: {}", bad.join(", ")));
            line.push('\n');
            line.push_str(&commented(&yaml::to_yaml(s)));
            out.config_todos.push(line);
        }
    }
    if !converted.is_empty() {
        let all = out.config.entry("subscriptions").or_insert_with(|| json!([]));
        if let Some(a) = all.as_array_mut() {
            a.extend(converted);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn convert(subs: &str, defined: &[&str]) -> Out {
        let mut entries: Vec<Entry> =
            defined.iter().map(|k| Entry { file: "cm.yaml".into(), line: 1, key: k.to_string(), value: Value::Null }).collect();
        let e = Entry { file: "cm.yaml".into(), line: 5, key: "subscriptions".into(), value: Value::String(subs.into()) };
        entries.push(e.clone());
        let mut out = Out::new(&super::super::read::Input { entries, ..Default::default() });
        subscriptions(&e, &mut out);
        out
    }

    #[test]
    fn a_subscription_converts_when_its_services_and_triggers_exist() {
        let out = convert("- recipients: [gmail:a@b.c]\n  triggers: [on-x, on-deployed]\n", &["service.email.gmail", "trigger.on-x"]);
        assert_eq!(out.report.subscriptions.converted, 1, "{:?}", out.report.todos);
        assert_eq!(out.config["subscriptions"][0]["triggers"], json!(["on-x", "on-deployed"]));
    }

    #[test]
    fn a_name_nothing_defines_is_marked() {
        let out = convert("- recipients: [gmail:a@b.c]\n  triggers: [on-typo]\n- recipients: [a@b.c]\n", &["service.email.gmail"]);
        let reasons: Vec<&str> = out.report.todos.iter().map(|t| t.reason.as_str()).collect();
        assert_eq!(reasons.len(), 2, "{reasons:?}");
        assert!(reasons[0].contains("\"on-typo\""), "{reasons:?}");
        assert!(reasons[1].contains("name no service"), "{reasons:?}");
        assert!(!out.config.contains_key("subscriptions"));
    }
}
