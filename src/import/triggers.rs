//! `trigger.<name>`: conditions through [`super::expr`], with `send`, `oncePer` and
//! the fields of old argocd-notifications triggers.

use serde_json::{Map, Value, json};

use super::read::{Entry, embedded};
use super::{Out, Refusal, commented, display, expr, yaml};

/// The line of `needle` within an entry's value, as a line of the source file.
fn inner_line(e: &Entry, needle: &str) -> usize {
    let Value::String(s) = &e.value else { return e.line };
    let first = needle.lines().next().unwrap_or("").trim();
    if first.is_empty() {
        return e.line;
    }
    s.lines().position(|l| l.contains(first)).map_or(e.line, |i| e.line + i + 1)
}

/// The line of `e`'s file that holds byte `at` of `src`, a text inside the entry.
pub(super) fn line_at(e: &Entry, src: &str, at: usize) -> usize {
    inner_line(e, src) + src.get(..at).map_or(0, |before| before.matches('\n').count())
}

/// An expr expression as rhai that compiles.
fn translate_expr(src: &str) -> Result<String, Refusal> {
    let rhai = expr::to_rhai(src)?;
    crate::trigger::compiles(&rhai)
        .map_err(|e| Refusal::new(0, format!("the translation does not compile ({e}); please report this as a driftwatch bug")))?;
    Ok(rhai)
}

pub(super) fn trigger(e: &Entry, name: &str, out: &mut Out) {
    let item = format!("trigger {name}");
    let parsed = match embedded(&e.value) {
        Ok(v) => v,
        Err(reason) => {
            out.report.triggers.todo += 1;
            let line = out.todo(e, &item, &reason);
            out.triggers.insert(name.to_string(), format!("{line}\n{}[]\n", commented(&display(&e.value))));
            return;
        }
    };
    let conditions = match parsed {
        Value::Array(items) => items,
        Value::Object(m) => {
            out.note(e, &item, "written as a map; Argo CD expects a list of conditions (imported as a list of one)");
            vec![Value::Object(m)]
        }
        _ => {
            out.report.triggers.todo += 1;
            let line = out.todo(e, &item, "not a list of conditions");
            out.triggers.insert(name.to_string(), format!("{line}\n{}[]\n", commented(&display(&e.value))));
            return;
        }
    };
    let mut text = format!("# Imported by `driftwatch import` from {}:{} ({}).\n", e.file, e.line, e.key);
    let mut todo = false;
    let mut written = Vec::new();
    for (i, c) in conditions.iter().enumerate() {
        let Some(c) = c.as_object() else {
            todo = true;
            text.push_str(&out.todo(e, &format!("{item}[{i}]"), "a condition must be a map"));
            text.push('\n');
            continue;
        };
        let mut cond = Map::new();
        let mut comments = String::new();
        let when = c.get("when").or_else(|| c.get("condition"));
        match when {
            Some(Value::Bool(b)) => {
                cond.insert("when".into(), json!(b));
            }
            Some(Value::String(src)) if src.trim().is_empty() => {
                // notifications-engine compiles an empty condition as `false`.
                out.note(e, &format!("{item}[{i}].when"), "empty: Argo CD evaluates it as false, so the condition never sends");
                cond.insert("when".into(), json!(false));
            }
            Some(Value::String(src)) => match translate_expr(src) {
                Ok(rhai) => {
                    cond.insert("when".into(), json!(rhai));
                }
                Err(refused) => {
                    todo = true;
                    let at = Entry { line: line_at(e, src, refused.at), ..e.clone() };
                    comments.push_str(&out.todo(&at, &format!("{item}[{i}].when"), &refused.reason));
                    comments.push('\n');
                    comments.push_str(&commented(src));
                    cond.insert("when".into(), json!(false));
                }
            },
            None | Some(Value::Null) => {
                out.note(e, &format!("{item}[{i}]"), "has no `when`: Argo CD evaluates it as false, so the condition never sends");
                cond.insert("when".into(), json!(false));
            }
            Some(_) => {
                todo = true;
                comments.push_str(&out.todo(e, &format!("{item}[{i}].when"), "not an expression"));
                comments.push('\n');
                cond.insert("when".into(), json!(false));
            }
        }
        if let Some(d) = c.get("description").and_then(Value::as_str) {
            cond.insert("description".into(), json!(d));
        }
        let mut send: Vec<Value> = match c.get("send") {
            Some(Value::Array(a)) => a.clone(),
            Some(Value::String(s)) => vec![json!(s)],
            _ => Vec::new(),
        };
        if let Some(t) = c.get("template").and_then(Value::as_str) {
            // Old argocd-notifications trigger items named one template.
            send.push(json!(t));
        }
        if send.is_empty() {
            // Argo CD accepts it and sends nothing; so does driftwatch (check warns).
            out.note(e, &format!("{item}[{i}].send"), "empty: the condition sends nothing, as in Argo CD");
        }
        let mut kept = Vec::new();
        for t in send {
            let name = t.as_str().unwrap_or_default();
            let builtin = crate::config::catalog::TEMPLATES.iter().any(|(n, _, _)| *n == name);
            if out.source_templates.contains(name) || builtin {
                kept.push(t);
            } else {
                // Argo CD logs an error when it would send it and carries on; driftwatch
                // refuses a configuration naming a template that does not exist. Left out
                // of `send`, named in the mark.
                todo = true;
                let reason = format!(
                    "sends template {name:?}, which the source does not define (Argo CD logs an error each time it would send it), left out of `send`: define it and add it back, or leave it out"
                );
                comments.push_str(&out.todo(e, &format!("{item}[{i}].send"), &reason));
                comments.push('\n');
            }
        }
        cond.insert("send".into(), Value::Array(kept));
        match c.get("oncePer") {
            Some(Value::String(src)) if !src.trim().is_empty() => match translate_expr(src) {
                Ok(rhai) => {
                    cond.insert("oncePer".into(), json!(rhai));
                }
                Err(refused) => {
                    todo = true;
                    let at = Entry { line: line_at(e, src, refused.at), ..e.clone() };
                    comments.push_str(&out.todo(&at, &format!("{item}[{i}].oncePer"), &refused.reason));
                    comments.push('\n');
                    comments.push_str(&commented(src));
                }
            },
            Some(other) if !other.is_null() && other.as_str().is_none() => {
                todo = true;
                comments.push_str(&out.todo(e, &format!("{item}[{i}].oncePer"), "not an expression"));
                comments.push('\n');
            }
            _ => {}
        }
        for k in c.keys() {
            if !matches!(k.as_str(), "when" | "condition" | "description" | "send" | "template" | "oncePer") {
                let reason = match k.as_str() {
                    "enabled" | "name" | "title" => "a field of old argocd-notifications triggers; not needed".to_string(),
                    _ => format!("`{k}` is not a trigger field Argo CD knows; left out"),
                };
                out.note(e, &format!("{item}[{i}].{k}"), &reason);
            }
        }
        text.push_str(&comments);
        written.push(Value::Object(cond));
        let _ = i;
    }
    // Each condition, with its TODO comments above it.
    let body = yaml::to_yaml(&Value::Array(written));
    text.push_str(&body);
    if todo {
        out.report.triggers.todo += 1;
    } else {
        out.report.triggers.converted += 1;
    }
    out.triggers.insert(name.to_string(), text);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn convert(yaml: &str) -> Out {
        let e = Entry { file: "cm.yaml".into(), line: 10, key: "trigger.t".into(), value: Value::String(yaml.into()) };
        let input = super::super::read::Input { entries: vec![e.clone()], ..Default::default() };
        let mut out = Out::new(&input);
        trigger(&e, "t", &mut out);
        out
    }

    #[test]
    fn a_condition_converts_with_its_send_and_once_per() {
        let out = convert(
            "- when: app.status.sync.status == 'OutOfSync'\n  send: [app-sync-status-unknown]\n  oncePer: app.status.sync.revision\n",
        );
        assert_eq!(out.report.triggers.converted, 1);
        let text = &out.triggers["t"];
        assert!(text.contains("when: app.status.sync.status == \"OutOfSync\""), "{text}");
        assert!(text.contains("oncePer: app.status.sync.revision"), "{text}");
    }

    #[test]
    fn a_refused_condition_is_marked_at_the_line_of_the_construct() {
        let out = convert("- when: |\n    app.x == 1 and\n    sprintf('%d', 1) == '1'\n  send: [app-deployed]\n");
        assert_eq!(out.report.triggers.todo, 1);
        let todo = &out.report.todos[0];
        // Line 10 is the key; the value's lines follow it, `sprintf` on its third.
        assert_eq!((todo.line, todo.reason.as_str()), (13, "the function `sprintf` is not translated"), "{todo:?}");
    }

    #[test]
    fn what_argo_cd_runs_as_nothing_converts_with_a_note() {
        let out = convert("- send: [app-deployed]\n- when: ''\n  send: []\n");
        assert!(out.report.todos.is_empty(), "{:?}", out.report.todos);
        assert_eq!(out.report.notes.len(), 3, "{:?}", out.report.notes);
        assert_eq!(out.triggers["t"].matches("when: false").count(), 2);
    }
}
