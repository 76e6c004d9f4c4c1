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
    collect_refs(&Value::Object(cfg.clone()), &mut refs);
    let mut svc = Map::new();
    let mut unknown: Vec<String> = Vec::new();
    let copy = |svc: &mut Map<String, Value>, from: &str, to: &str| {
        if let Some(v) = cfg.get(from) {
            svc.insert(to.into(), v.clone());
        }
    };
    let converted = match kind {
        "slack" => {
            for (from, to) in [("token", "token"), ("username", "username"), ("icon", "icon"), ("apiURL", "apiUrl")] {
                copy(&mut svc, from, to);
            }
            for k in cfg.keys() {
                match k.as_str() {
                    "token" | "username" | "icon" | "apiURL" => {}
                    "signingSecret" => {
                        out.note(e, &format!("{item}.signingSecret"), "used by Argo CD for incoming Slack requests only; not needed")
                    }
                    other => unknown.push(other.into()),
                }
            }
            true
        }
        "email" => {
            svc.insert("type".into(), json!("email"));
            for f in ["host", "port", "from", "username", "password"] {
                copy(&mut svc, f, f);
            }
            let port = cfg.get("port").and_then(|p| p.as_u64().or_else(|| p.as_str().and_then(|s| s.parse().ok())));
            // Argo CD (gomail) uses implicit TLS on 465 and STARTTLS elsewhere.
            svc.insert("tls".into(), json!(if port == Some(465) { "implicit" } else { "starttls" }));
            for k in cfg.keys() {
                match k.as_str() {
                    "host" | "port" | "from" | "username" | "password" => {}
                    "html" => out.note(e, &format!("{item}.html"), "driftwatch sends an HTML part when the template has `email.html`"),
                    other => unknown.push(other.into()),
                }
            }
            true
        }
        "webhook" => {
            svc.insert("type".into(), json!("webhook"));
            copy(&mut svc, "url", "url");
            copy(&mut svc, "basicAuth", "basicAuth");
            copy(&mut svc, "insecureSkipVerify", "insecureSkipVerify");
            if let Some(h) = cfg.get("headers").and_then(Value::as_array) {
                let mut headers = Map::new();
                for hd in h {
                    if let (Some(n), Some(v)) = (hd.get("name").and_then(Value::as_str), hd.get("value")) {
                        headers.insert(n.into(), json!(display(v)));
                    }
                }
                svc.insert("headers".into(), Value::Object(headers));
            }
            for k in cfg.keys() {
                match k.as_str() {
                    "url" | "basicAuth" | "insecureSkipVerify" | "headers" => {}
                    "retryWaitMin" | "retryWaitMax" | "retryMax" => {
                        out.note(e, &format!("{item}.{k}"), "driftwatch retries with its own backoff (see `retry:` in destinations.md)")
                    }
                    other => unknown.push(other.into()),
                }
            }
            true
        }
        k @ ("teams" | "opsgenie" | "alertmanager" | "googlechat" | "github" | "telegram" | "mattermost" | "grafana" | "webex"
        | "teams-workflows" | "pushover" | "newrelic" | "rocketchat") => {
            let allowed: &[&str] = match k {
                "rocketchat" => &["serverUrl", "email", "password"],
                "teams-workflows" => &["recipientUrls"],
                "newrelic" => &["apiURL", "apiKey"],
                "telegram" | "webex" | "pushover" => &["token"],
                "mattermost" => &["apiURL", "token", "insecureSkipVerify"],
                "grafana" => &["apiUrl", "apiKey", "insecureSkipVerify"],
                "github" => &["appID", "installationID", "privateKey", "enterpriseBaseURL"],
                "teams" => &["recipientUrls"],
                "opsgenie" => &["apiUrl", "apiKeys"],
                "alertmanager" => &["targets", "scheme", "apiPath", "basicAuth", "bearerToken", "insecureSkipVerify"],
                _ => &["webhooks"],
            };
            svc.insert("type".into(), json!(k));
            for (key, v) in &cfg {
                if allowed.contains(&key.as_str()) {
                    svc.insert(key.clone(), v.clone());
                } else {
                    unknown.push(key.clone());
                }
            }
            true
        }
        "pagerdutyv2" => {
            svc.insert("type".into(), json!("pagerduty"));
            copy(&mut svc, "serviceKeys", "routingKeys");
            for k in cfg.keys() {
                if k != "serviceKeys" {
                    unknown.push(k.clone());
                }
            }
            true
        }
        _ => false,
    };
    if !converted {
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
    }
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
