//! `trigger.<name>`: conditions through [`super::expr`], with `send`, `oncePer` and
//! the fields of old argocd-notifications triggers.

use serde_json::{Map, Value, json};

use super::marks::Marks;
use super::read::{Entry, embedded};
use super::{Out, Refusal, commented, display, expr, yaml};

/// An expr expression as rhai that compiles.
fn translate_expr(src: &str) -> Result<String, Refusal> {
    let rhai = expr::to_rhai(src)?;
    crate::trigger::compiles(&rhai)
        .map_err(|e| Refusal::new(0, format!("the translation does not compile ({e}); please report this as a driftwatch bug")))?;
    Ok(rhai)
}

pub(super) fn trigger(e: &Entry, name: &str, out: &mut Out) {
    let item = format!("trigger {name}");
    let conditions = match conditions(e, &item, out) {
        Ok(conditions) => conditions,
        Err(reason) => {
            out.report.triggers.todo += 1;
            let line = out.todo(e, &item, &reason);
            out.triggers.insert(name.to_string(), format!("{line}\n{}[]\n", commented(&display(&e.value))));
            return;
        }
    };
    let mut text = format!("# Imported by `driftwatch import` from {}:{} ({}).\n", e.file, e.line, e.key);
    let mut marks = Marks::new(e);
    let mut written = Vec::new();
    for (i, c) in conditions.iter().enumerate() {
        let at = format!("{item}[{i}]");
        match c.as_object() {
            Some(c) => written.push(condition(out, &mut marks, &at, c)),
            None => marks.mark(out, &at, "a condition must be a map"),
        }
        // Each condition, with its TODO comments above it.
        text.push_str(&marks.take_comments());
    }
    text.push_str(&yaml::to_yaml(&Value::Array(written)));
    if marks.todo {
        out.report.triggers.todo += 1;
    } else {
        out.report.triggers.converted += 1;
    }
    out.triggers.insert(name.to_string(), text);
}

/// The trigger's list of conditions (a map is read as a list of one, with a note), or
/// why it has none.
fn conditions(e: &Entry, item: &str, out: &mut Out) -> Result<Vec<Value>, String> {
    match embedded(&e.value)? {
        Value::Array(items) => Ok(items),
        Value::Object(m) => {
            out.note(e, item, "written as a map; Argo CD expects a list of conditions (imported as a list of one)");
            Ok(vec![Value::Object(m)])
        }
        _ => Err("not a list of conditions".to_string()),
    }
}

/// One condition (`at`: `trigger <name>[<i>]`): its `when`, `description`, `send` and
/// `oncePer`, each translated or marked; the fields driftwatch does not read noted.
fn condition(out: &mut Out, marks: &mut Marks<'_>, at: &str, c: &Map<String, Value>) -> Value {
    let mut cond = Map::new();
    cond.insert("when".into(), when(out, marks, at, c.get("when").or_else(|| c.get("condition"))));
    if let Some(d) = c.get("description").and_then(Value::as_str) {
        cond.insert("description".into(), json!(d));
    }
    cond.insert("send".into(), Value::Array(send(out, marks, at, c)));
    if let Some(rhai) = once_per(out, marks, at, c.get("oncePer")) {
        cond.insert("oncePer".into(), json!(rhai));
    }
    for k in c.keys() {
        if !matches!(k.as_str(), "when" | "condition" | "description" | "send" | "template" | "oncePer") {
            let reason = match k.as_str() {
                "enabled" | "name" | "title" => "a field of old argocd-notifications triggers; not needed".to_string(),
                _ => format!("`{k}` is not a trigger field Argo CD knows; left out"),
            };
            out.note(marks.e, &format!("{at}.{k}"), &reason);
        }
    }
    Value::Object(cond)
}

/// The condition's `when` as rhai; `false` where Argo CD would never send (empty or
/// missing) or where it could not be translated (marked).
fn when(out: &mut Out, marks: &mut Marks<'_>, at: &str, when: Option<&Value>) -> Value {
    let path = format!("{at}.when");
    match when {
        Some(Value::Bool(b)) => json!(b),
        Some(Value::String(src)) if src.trim().is_empty() => {
            // notifications-engine compiles an empty condition as `false`.
            out.note(marks.e, &path, "empty: Argo CD evaluates it as false, so the condition never sends");
            json!(false)
        }
        Some(Value::String(src)) => marks.translated(out, &path, src, translate_expr(src)).map_or(json!(false), |rhai| json!(rhai)),
        None | Some(Value::Null) => {
            out.note(marks.e, at, "has no `when`: Argo CD evaluates it as false, so the condition never sends");
            json!(false)
        }
        Some(_) => {
            marks.mark(out, &path, "not an expression");
            json!(false)
        }
    }
}

/// The templates the condition sends (`send`, and old triggers' `template`), those the
/// source does not define left out and marked.
fn send(out: &mut Out, marks: &mut Marks<'_>, at: &str, c: &Map<String, Value>) -> Vec<Value> {
    let path = format!("{at}.send");
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
        out.note(marks.e, &path, "empty: the condition sends nothing, as in Argo CD");
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
            let reason = format!(
                "sends template {name:?}, which the source does not define (Argo CD logs an error each time it would send it), left out of `send`: define it and add it back, or leave it out"
            );
            marks.mark(out, &path, &reason);
        }
    }
    kept
}

/// The condition's `oncePer` as rhai, if it has one that translates (one that does
/// not is marked).
fn once_per(out: &mut Out, marks: &mut Marks<'_>, at: &str, once_per: Option<&Value>) -> Option<String> {
    let path = format!("{at}.oncePer");
    match once_per {
        Some(Value::String(src)) if !src.trim().is_empty() => marks.translated(out, &path, src, translate_expr(src)),
        Some(other) if !other.is_null() && other.as_str().is_none() => {
            marks.mark(out, &path, "not an expression");
            None
        }
        _ => None,
    }
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
