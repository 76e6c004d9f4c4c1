//! The translation end to end: Go template text in, handlebars that renders what Go
//! renders.

use super::*;
use serde_json::json;

fn t(src: &str) -> String {
    to_handlebars(src).unwrap_or_else(|e| panic!("{src}: {e}")).text
}

/// Translates and renders with driftwatch's handlebars setup.
fn render(src: &str, data: serde_json::Value) -> String {
    let hbs = t(src);
    crate::template::render_text(&hbs, &data).unwrap_or_else(|e| panic!("{src} -> {hbs}: {e}"))
}

fn app() -> serde_json::Value {
    json!({
        "app": {"metadata": {"name": "guestbook", "labels": {"app.kubernetes.io/name": "gb"}},
                "spec": {"sources": [{"repoURL": "https://a.example/x.git"}, {"repoURL": "git@b.example:org/y.git"}]},
                "status": {"sync": {"status": "OutOfSync", "revision": "0123456789abcdef"},
                           "conditions": [{"type": "SyncError", "message": "boom"}, {"type": "Warn", "message": "meh"}],
                           "operationState": {"phase": "Failed", "message": "a \"quoted\" failure"}}},
        "context": {"argocdUrl": "https://argocd.example.com"},
        "serviceType": "slack",
        "recipient": "ops"
    })
}

#[test]
fn paths_conditions_and_trim_markers() {
    assert_eq!(t("{{.app.metadata.name}}"), "{{app.metadata.name}}");
    assert_eq!(t("{{if eq .serviceType \"slack\"}}:x:{{end}}"), "{{#if (eq serviceType \"slack\")}}:x:{{/if}}");
    assert_eq!(render("a  {{- .app.metadata.name -}}  \n b", app()), "aguestbookb");
    assert_eq!(
        render("{{if eq .app.status.sync.status \"Synced\"}}ok{{else if .app.status.operationState}}op{{else}}no{{end}}", app()),
        "op"
    );
    assert_eq!(render("{{/* a comment */}}x{{- /* trimmed */ -}} y", app()), "xy");
    assert_eq!(render("{{ if and (ne .serviceType \"email\") (eq .recipient \"ops\") }}yes{{ end }}", app()), "yes");
    assert_eq!(render("{{if eq .serviceType \"x\" \"slack\"}}multi{{end}}", app()), "multi");
}

#[test]
fn range_with_variables_and_root() {
    let src = "{{range $i, $c := .app.status.conditions}}{{if $i}}, {{end}}{{$c.type}}={{.message}} on {{$.app.metadata.name}}{{end}}";
    assert_eq!(render(src, app()), "SyncError=boom on guestbook, Warn=meh on guestbook");
    // The catalog's repository list, with trim markers inside a JSON string.
    let src = r#""value": {{- if .app.spec.source }} "{{ .app.spec.source.repoURL }}" {{- else if .app.spec.sources }} "{{- range $index, $source := .app.spec.sources }}{{ if $index }}\n{{ end }}:arrow_heading_up: {{ $source.repoURL }}{{- end }}" {{- end }},"#;
    assert_eq!(render(src, app()), r#""value": ":arrow_heading_up: https://a.example/x.git\n:arrow_heading_up: git@b.example:org/y.git","#);
    assert_eq!(render("{{range .app.status.missing}}x{{else}}none{{end}}", app()), "none");
    let nested = "{{range $s := .app.spec.sources}}{{range $.app.status.conditions}}{{$s.repoURL}}:{{.type}} {{end}}{{end}}";
    assert_eq!(
        render(nested, app()),
        "https://a.example/x.git:SyncError https://a.example/x.git:Warn git@b.example:org/y.git:SyncError git@b.example:org/y.git:Warn "
    );
    assert_eq!(render("{{with .app.status.operationState}}{{.phase}}: {{$.app.metadata.name}}{{end}}", app()), "Failed: guestbook");
    assert_eq!(render("{{with .app.status.nothing}}x{{else}}empty{{end}}", app()), "empty");
    assert_eq!(render("{{with $op := .app.status.operationState}}{{$op.phase}}/{{.phase}}{{end}}", app()), "Failed/Failed");
    let vars = "{{$name := .app.metadata.name}}{{$url := printf \"%s/applications/%s\" .context.argocdUrl $name}}{{range .app.status.conditions}}{{$name}}:{{$url}} {{end}}";
    assert_eq!(
        render(vars, app()),
        "guestbook:https://argocd.example.com/applications/guestbook guestbook:https://argocd.example.com/applications/guestbook "
    );
}

/// Handlebars drops a line holding only a block tag ("standalone"); Go keeps it.
#[test]
fn block_tags_alone_on_a_line_keep_their_lines() {
    let d = json!({"x": [1, 2], "app": {"a": true}});
    assert_eq!(render("A\n{{range .x}}\n- {{.}}\n{{end}}\nB\n", d.clone()), "A\n\n- 1\n\n- 2\n\nB\n");
    assert_eq!(render("A\n  {{if .app.a}}\n  yes\n  {{else}}\n  no\n  {{end}}\nB", d.clone()), "A\n  \n  yes\n  \nB");
    assert_eq!(render("{{with .app}}\n{{.a}}\n{{end}}\n", d), "\ntrue\n\n");
}

#[test]
fn the_first_flag_idiom() {
    let src = "{{$first := true}}{{range .app.status.conditions}}{{if not $first}}, {{end}}{{$first = false}}{{.type}}{{end}}";
    assert_eq!(render(src, app()), "SyncError, Warn");
    let src = "{{- $sep := \"\" -}}{{range .app.status.conditions}}{{$sep}}{{.type}}{{$sep = \"; \"}}{{end}}";
    assert_eq!(render(src, app()), "SyncError; Warn");
    assert!(to_handlebars("{{$n := 0}}{{$n = 1}}").unwrap_err().reason.contains("changes a variable"));
    assert!(to_handlebars("{{$f := true}}{{range .a}}{{$f = false}}{{end}}{{$f}}").unwrap_err().reason.contains("after a range"));
}

#[test]
fn functions_sprig_and_argo_calls() {
    let d = app();
    assert_eq!(render("{{.app.status.sync.revision | trunc 7}}", d.clone()), "0123456");
    assert_eq!(render("{{substr 0 7 .app.status.sync.revision}}", d.clone()), "0123456");
    assert_eq!(render("{{.app.status.missing | default \"none\"}}", d.clone()), "none");
    assert_eq!(render("{{toJson .app.status.operationState.message}}", d.clone()), r#""a \"quoted\" failure""#);
    assert_eq!(render("{{index .app.metadata.labels \"app.kubernetes.io/name\"}}", d.clone()), "gb");
    assert_eq!(render("{{len .app.status.conditions}}", d.clone()), "2");
    assert_eq!(render("{{ .app.metadata.name | upper | replace \"GUEST\" \"x\" }}", d.clone()), "xBOOK");
    assert_eq!(render("{{call .repo.RepoURLToHTTPS \"git@github.com:o/r.git\"}}", d.clone()), "https://github.com/o/r.git");
    assert_eq!(render("{{call .strings.ReplaceAll .app.metadata.name \"book\" \"\"}}", d.clone()), "guest");
    assert_eq!(
        render("{{(call .repo.GetCommitMetadata .app.status.sync.revision).Message}}", d.clone()),
        "[repo.GetCommitMetadata.Message: not available, driftwatch has no Argo CD repo server]"
    );
    assert_eq!(
        render("{{ (call .repo.GetAppDetails).Helm.GetParameterValueByName \"image.tag\" }}", d.clone()),
        "[repo.GetAppDetails.Helm.GetParameterValueByName: not available, driftwatch has no Argo CD repo server]"
    );
    let tr = to_handlebars("{{$c := call .repo.GetCommitMetadata .app.status.sync.revision}}{{$c.Author}}").unwrap();
    assert_eq!(tr.notes.len(), 1, "{tr:?}");
    assert_eq!(render("{{printf \"%s!\" .recipient}} {{\"lit\"}} {{42}}", d.clone()), "ops! lit 42");
    let mut t = d.clone();
    t["app"]["status"]["operationState"]["finishedAt"] = json!("2026-03-02T03:12:04Z");
    assert_eq!(
        render("{{ (call .time.Parse .app.status.operationState.finishedAt).UTC.Format \"15:04 Jan 2\" }}", t.clone()),
        "03:12 Mar 2"
    );
    assert_eq!(render("{{ $t := call .time.Parse .app.status.operationState.finishedAt }}{{ $t.Format \"2006-01-02\" }}", t), "2026-03-02");
}

#[test]
fn values_inside_json_strings_are_escaped() {
    let src = r#"[{"title": "{{.app.metadata.name}}", "n": {{len .app.status.conditions}}, "v": {{- if .app.spec.source }} "x" {{- else }} "{{range .app.status.conditions}}{{.message}};{{end}}" {{- end }}, "m": "{{.app.status.operationState.message}}"}]"#;
    let hbs = to_handlebars_in_json(src).unwrap().text;
    let text = crate::template::render_text(&hbs, &app()).unwrap();
    let v: serde_json::Value = serde_json::from_str(&text).unwrap_or_else(|e| panic!("{hbs}\n{text}\n{e}"));
    assert_eq!(v[0]["m"], "a \"quoted\" failure");
    assert_eq!(v[0]["n"], 2, "a value outside a string is as Go prints it");
    assert_eq!(v[0]["v"], "boom;meh;");
    assert_eq!(v[0]["title"], "guestbook");
}

#[test]
fn refusals_say_why() {
    assert!(to_handlebars("{{template \"x\" .}}").unwrap_err().reason.contains("named templates"));
    assert!(to_handlebars("{{if .a}}x").unwrap_err().reason.contains("not closed"));
    assert!(to_handlebars("{{end}}").unwrap_err().reason.contains("outside"));
    assert!(to_handlebars("{{frobnicate .a}}").unwrap_err().reason.contains("frobnicate"));
    assert!(to_handlebars("{{.a").unwrap_err().reason.contains("not closed"));
    assert!(to_handlebars("{{$x}}").unwrap_err().reason.contains("not defined"));
    assert!(to_handlebars(&"{{if .a}}".repeat(10_000)).unwrap_err().reason.contains("nested deeper"));
    assert!(to_handlebars(&format!("{{{{{}}}}}", "(".repeat(10_000))).unwrap_err().reason.contains("parentheses"));
}
