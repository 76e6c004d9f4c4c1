//! `driftwatch import`: a corpus of Argo CD notifications configurations in the styles
//! the Argo CD docs show, each with golden outputs (`tests/import/corpus/<case>/expected`,
//! rewritten with `UPDATE_GOLDEN=1 cargo test --test import`); what an imported template
//! renders, against text written by hand from Go's semantics; the command's report and
//! exit codes. The catalog round trip is in `catalog_parity.rs`. `import --flux` is in
//! `import/flux.rs`.

#[path = "import/flux.rs"]
mod flux;

use std::path::{Path, PathBuf};
use std::process::Command;

use driftwatch::config;
use driftwatch::import::{self, Report};

fn corpus() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/import/corpus")
}

/// The input files of a case: every YAML file beside `expected/`.
fn inputs(case: &Path) -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> =
        std::fs::read_dir(case).unwrap().map(|e| e.unwrap().path()).filter(|p| p.extension().is_some_and(|e| e == "yaml")).collect();
    files.sort();
    files
}

/// Every file under `dir`, relative, sorted.
fn tree(dir: &Path) -> Vec<String> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            let name = p.file_name().unwrap().to_string_lossy().to_string();
            out.extend(tree(&p).into_iter().map(|f| format!("{name}/{f}")));
        } else {
            out.push(p.file_name().unwrap().to_string_lossy().to_string());
        }
    }
    out.sort();
    out
}

/// Imports a case into a fresh directory; paths in the output are relative to the case.
fn run_case(case: &Path) -> (tempfile::TempDir, Report) {
    let dir = tempfile::tempdir().unwrap();
    let report = import::import(&inputs(case), dir.path(), false).unwrap_or_else(|e| panic!("{}: {e}", case.display()));
    let prefix = format!("{}/", case.display());
    for f in tree(dir.path()) {
        let p = dir.path().join(&f);
        let text = std::fs::read_to_string(&p).unwrap().replace(&prefix, "");
        std::fs::write(&p, text).unwrap();
    }
    let json = serde_json::to_string_pretty(&report).unwrap().replace(&prefix, "");
    std::fs::write(dir.path().join("report.json"), json + "\n").unwrap();
    (dir, report)
}

#[test]
fn the_corpus_imports_to_its_golden_outputs() {
    let update = std::env::var_os("UPDATE_GOLDEN").is_some();
    let mut cases: Vec<PathBuf> = std::fs::read_dir(corpus()).unwrap().map(|e| e.unwrap().path()).collect();
    cases.sort();
    assert!(cases.len() >= 10, "{cases:?}");
    for case in cases {
        let (dir, _) = run_case(&case);
        let expected = case.join("expected");
        if update {
            let _ = std::fs::remove_dir_all(&expected);
            for f in tree(dir.path()) {
                let to = expected.join(&f);
                std::fs::create_dir_all(to.parent().unwrap()).unwrap();
                std::fs::copy(dir.path().join(&f), to).unwrap();
            }
            continue;
        }
        assert_eq!(tree(dir.path()), tree(&expected), "{}: the files written", case.display());
        for f in tree(&expected) {
            let got = std::fs::read_to_string(dir.path().join(&f)).unwrap();
            let want = std::fs::read_to_string(expected.join(&f)).unwrap();
            assert_eq!(got, want, "{}: {f} differs from its golden copy (UPDATE_GOLDEN=1 rewrites them)", case.display());
        }
    }
}

/// What `check` says of an import: nothing but its TODO marks, and once a person
/// resolves them (here: deletes the marks, keeping the placeholders) it passes.
#[test]
fn every_output_passes_check_once_its_todos_are_resolved() {
    let mut cases: Vec<PathBuf> = std::fs::read_dir(corpus()).unwrap().map(|e| e.unwrap().path()).collect();
    cases.sort();
    for case in cases {
        let (dir, report) = run_case(&case);
        let cfg = dir.path().join("driftwatch.yaml");
        match config::load(Some(&cfg)) {
            Ok(_) => assert!(report.complete(), "{}: TODOs reported but check passes", case.display()),
            Err(errors) => {
                assert!(!report.complete(), "{}: {errors:?}", case.display());
                for e in &errors {
                    assert_eq!(e.key, "import", "{}: only TODO marks fail: {e}", case.display());
                    let pos = e.pos.as_ref().expect("a TODO names its place");
                    let text = std::fs::read_to_string(&*pos.file).unwrap();
                    let line = text.lines().nth(pos.line as usize - 1).unwrap();
                    assert!(line.contains("TODO(import)"), "{e}: {line}");
                }
                assert_eq!(errors.len(), report.todos.len(), "{}: one error per TODO: {errors:?}", case.display());
                for f in tree(dir.path()) {
                    let p = dir.path().join(&f);
                    let text = std::fs::read_to_string(&p).unwrap();
                    let resolved: String = text.lines().filter(|l| !l.contains("TODO(import)")).map(|l| format!("{l}\n")).collect();
                    std::fs::write(&p, resolved).unwrap();
                }
                if let Err(e) = config::load(Some(&cfg)) {
                    panic!("{}: still fails once the TODOs are resolved: {e:?}", case.display());
                }
            }
        }
    }
}

#[test]
fn what_each_case_reports() {
    let case = |name: &str| run_case(&corpus().join(name)).1;
    let r = case("slack-attachments");
    assert!(r.complete(), "{:?}", r.todos);
    assert_eq!((r.triggers.converted, r.templates.converted, r.services.converted, r.subscriptions.converted), (2, 2, 1, 2));

    let r = case("teams-cards");
    assert!(r.complete(), "Teams converts: {:?}", r.todos);
    assert_eq!((r.services.converted, r.templates.converted), (1, 1));

    let r = case("awssqs");
    let items: Vec<&str> = r.todos.iter().map(|t| t.item.as_str()).collect();
    assert_eq!(items, ["service awssqs", "template app-sync-failed.awssqs"], "{r:?}");
    assert!(r.todos.iter().all(|t| t.file.ends_with("awssqs/argocd-notifications-cm.yaml") && t.line > 1), "{r:?}");

    let r = case("github-status");
    assert!(r.notes.iter().any(|n| n.reason.contains("repo server")), "{r:?}");
    assert!(r.complete(), "GitHub converts: {:?}", r.todos);
    assert_eq!((r.services.converted, r.templates.converted), (1, 1));

    let r = case("legacy-and-mistakes");
    let reasons: Vec<String> = r.todos.iter().map(|t| format!("{}: {}", t.item, t.reason)).collect();
    let has = |s: &str| reasons.iter().any(|r| r.contains(s));
    assert!(has("templates.app-oops: Argo CD ignores this key; did you mean `template.app-oops`?"), "{reasons:#?}");
    assert!(has("trigger on-weird[0].when: the function `sprintf` is not translated"), "{reasons:#?}");
    assert!(has("template my.alert.message: `{{template}}` (named templates) is not translated"), "{reasons:#?}");
    assert!(has("service bogus: unknown service type `bogus`"), "{reasons:#?}");
    assert!(r.notes.iter().any(|n| n.item == "trigger on-image-changed" && n.reason.contains("map")), "{:?}", r.notes);
    let weird = r.todos.iter().find(|t| t.item == "trigger on-weird[0].when").unwrap();
    assert_eq!(weird.line, 15, "the line of the condition itself, under its key on line 14");

    let r = case("chat-services");
    assert!(r.complete(), "{:?}", r.todos);
    assert_eq!((r.services.converted, r.templates.converted, r.subscriptions.converted), (5, 1, 1));

    let r = case("kubectl-dump");
    assert!(r.complete() && r.triggers.converted == 1 && r.templates.converted == 1, "{r:?}");
}

#[test]
fn secrets_skeleton_has_keys_never_values() {
    let (dir, _) = run_case(&corpus().join("slack-attachments"));
    let text = std::fs::read_to_string(dir.path().join("secrets.yaml")).unwrap();
    assert!(text.contains("slack-token") && text.contains("slack-signing-secret"), "{text}");
    assert!(!text.contains("xoxb") && !text.contains("not-a-real"), "{text}");
    let (dir, _) = run_case(&corpus().join("helm-values"));
    let text = std::fs::read_to_string(dir.path().join("secrets.yaml")).unwrap();
    assert!(text.contains("slack-token") && !text.contains("xoxb"), "{text}");
}

/// A template as Argo CD users write it, rendered after import, against the text Go's
/// text/template gives for the same Application (worked out by hand: trim markers eat
/// the whitespace and newline beside them; `range` over an empty list runs `else`; a
/// `$first` flag set in the loop separates items; `with` sets the dot; an action alone on
/// its line leaves the line's newline, which handlebars alone would drop).
#[test]
fn an_imported_template_renders_what_go_renders() {
    let dir = tempfile::tempdir().unwrap();
    let cm = dir.path().join("cm.yaml");
    std::fs::write(
        &cm,
        r#"data:
  template.report: |
    message: |
      {{- $name := .app.metadata.name -}}
      App {{ $name }} ({{ .app.status.sync.revision | trunc 7 }}):
      {{- range $i, $c := .app.status.conditions }}
        {{ $i }}. {{ $c.type }} on {{ $name }}
      {{- else }}
        no conditions
      {{- end }}
      Images: {{ $first := true }}{{ range .app.status.summary.images }}{{ if not $first }}, {{ end }}{{ $first = false }}{{ . }}{{ end }}
      {{ with .app.status.operationState }}{{ .phase | lower }}{{ else }}never synced{{ end }}
      {{- if eq .app.status.health.status "Healthy" }} healthy{{ else if eq .app.status.health.status "Degraded" }} degraded{{ else }} unknown{{ end }}
      Resources: {{ len .app.status.resources }}{{ if gt (len .app.status.resources) 1 }} (several){{ end }}
      {{ printf "%s/%s" .app.metadata.namespace $name | quote }}
      {{ if .app.status.summary.images }}
      has images
      {{ end }}
"#,
    )
    .unwrap();
    let report = import::import(&[cm], dir.path(), false).unwrap();
    assert!(report.complete(), "{report:?}");
    let app = |conditions: serde_json::Value, op: serde_json::Value| {
        serde_json::json!({
            "apiVersion": "argoproj.io/v1alpha1", "kind": "Application",
            "metadata": {"name": "guestbook", "namespace": "argocd"},
            "spec": {"project": "default", "destination": {"server": "https://kubernetes.default.svc"}},
            "status": {"sync": {"status": "Synced", "revision": "a1b2c3d4e5f6"}, "health": {"status": "Degraded"},
                       "conditions": conditions, "operationState": op,
                       "summary": {"images": ["nginx:1.25", "redis:7"]},
                       "resources": [{"kind": "Deployment", "name": "web"}, {"kind": "Service", "name": "web"}]}})
    };
    let render = |app: serde_json::Value| -> String {
        let f = dir.path().join("app.json");
        std::fs::write(&f, app.to_string()).unwrap();
        let o = Command::new(env!("CARGO_BIN_EXE_driftwatch"))
            .args(["template", "notify", "report"])
            .arg(&f)
            .arg("--config")
            .arg(dir.path().join("driftwatch.yaml"))
            .args(["-o", "json"])
            .output()
            .unwrap();
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
        v["notifications"][0]["payload"]["message"].as_str().unwrap_or_else(|| panic!("{v}")).to_string()
    };
    let conds = serde_json::json!([{"type": "SyncError", "message": "x"}, {"type": "OrphanedResourceWarning", "message": "y"}]);
    assert_eq!(
        render(app(conds, serde_json::json!({"phase": "Succeeded"}))),
        "App guestbook (a1b2c3d):\n  0. SyncError on guestbook\n  1. OrphanedResourceWarning on guestbook\nImages: nginx:1.25, redis:7\nsucceeded degraded\nResources: 2 (several)\n\"argocd/guestbook\"\n\nhas images\n\n"
    );
    assert_eq!(
        render(app(serde_json::json!([]), serde_json::Value::Null)),
        "App guestbook (a1b2c3d):\n  no conditions\nImages: nginx:1.25, redis:7\nnever synced degraded\nResources: 2 (several)\n\"argocd/guestbook\"\n\nhas images\n\n"
    );
}

#[test]
fn the_command_reports_and_exits_as_documented() {
    let bin = env!("CARGO_BIN_EXE_driftwatch");
    let out = tempfile::tempdir().unwrap();
    let github = corpus().join("awssqs/argocd-notifications-cm.yaml");
    let o = Command::new(bin).arg("import").arg(&github).arg("--out").arg(out.path()).args(["-o", "json"]).output().unwrap();
    assert_eq!(o.status.code(), Some(3), "some items need a hand: {}", String::from_utf8_lossy(&o.stderr));
    let r: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(r["triggers"], serde_json::json!({"converted": 1, "todo": 0}));
    assert_eq!(r["templates"]["todo"], 1);
    assert_eq!(r["services"]["todo"], 1);
    let todo = &r["todos"][0];
    assert!(todo["file"].as_str().unwrap().ends_with("argocd-notifications-cm.yaml") && todo["line"].as_u64().unwrap() > 1, "{r}");
    assert!(todo["item"].is_string() && todo["reason"].is_string(), "{r}");

    // check fails naming the file and line of each mark.
    let o = Command::new(bin).args(["check", "--config"]).arg(out.path().join("driftwatch.yaml")).output().unwrap();
    assert_eq!(o.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert!(stderr.contains("templates/app-sync-failed.yaml:2:3: import: not converted by `driftwatch import`"), "{stderr}");

    // An existing driftwatch.yaml is not replaced without --force.
    let o = Command::new(bin).arg("import").arg(&github).arg("--out").arg(out.path()).output().unwrap();
    assert_eq!(o.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&o.stderr).contains("--force"));

    // Complete: exit 0.
    let clean = tempfile::tempdir().unwrap();
    let o = Command::new(bin).arg("import").arg(corpus().join("kubectl-dump/dump.yaml")).arg("--out").arg(clean.path()).output().unwrap();
    assert_eq!(o.status.code(), Some(0), "{}", String::from_utf8_lossy(&o.stdout));
    assert!(String::from_utf8_lossy(&o.stdout).contains("triggers         1 converted"));

    // Unreadable input: exit 2, with file, line and column.
    let bad = clean.path().join("bad.yaml");
    std::fs::write(&bad, "data:\n  trigger.x: [unclosed\n").unwrap();
    let o = Command::new(bin).arg("import").arg(&bad).arg("--out").arg(clean.path().join("o")).output().unwrap();
    assert_eq!(o.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert!(stderr.contains("bad.yaml:") && stderr.contains("not YAML"), "{stderr}");
    let not_argo = clean.path().join("deploy.yaml");
    std::fs::write(&not_argo, "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: x}\n").unwrap();
    let o = Command::new(bin).arg("import").arg(&not_argo).arg("--out").arg(clean.path().join("o")).output().unwrap();
    assert_eq!(o.status.code(), Some(2));
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("no Argo CD notifications configuration"),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
}

/// What Argo CD accepts and an import once wrote as converted although `check` then
/// refused it: an empty `send` converts (a condition that sends nothing, noted), so
/// does a condition without `when` (false, noted); a template the source does not
/// define, a recipient that names no service, a default trigger or a subscribed trigger
/// nobody defines are marked, each with its reason and source line.
#[test]
fn what_argo_cd_accepts_imports_to_something_check_accepts_or_a_todo() {
    let (dir, r) = run_case(&corpus().join("argo-accepts-these"));
    let reasons: Vec<String> = r.todos.iter().map(|t| format!("{}:{}: {}", t.item, t.line, t.reason)).collect();
    assert_eq!(r.todos.len(), 5, "{reasons:#?}");
    assert!(reasons.iter().any(|t| t.starts_with("defaultTriggers:") && t.contains("\"on-sync-failed-typo\"")), "{reasons:#?}");
    assert!(reasons.iter().any(|t| t.starts_with("subscriptions[3]:") && t.contains("\"on-deployed-typo\"")), "{reasons:#?}");
    assert!(r.notes.iter().any(|n| n.item == "trigger on-never[0]" && n.reason.contains("evaluates it as false")), "{:?}", r.notes);
    assert!(
        reasons.iter().any(|t| t.starts_with("subscriptions[2]:") && t.contains("pagerduty-oncall") && t.contains("not configured")),
        "{reasons:#?}"
    );
    assert!(
        reasons.iter().any(|t| t.starts_with("trigger on-missing-template[0].send:") && t.contains("\"app-sync-failed-custom\"")),
        "{reasons:#?}"
    );
    assert!(
        reasons.iter().any(|t| t.starts_with("subscriptions[0]:") && t.contains("someone@example.com") && t.contains("service:recipient")),
        "{reasons:#?}"
    );
    assert!(r.notes.iter().any(|n| n.item == "trigger on-degraded-quiet[0].send" && n.reason.contains("sends nothing")), "{:?}", r.notes);
    // The empty send itself passes check (with a warning): only the marks fail.
    let errors = config::load(Some(&dir.path().join("driftwatch.yaml"))).err().unwrap();
    assert_eq!(errors.len(), 5, "{errors:?}");
    assert!(errors.iter().all(|e| e.key == "import"), "{errors:?}");
}

/// Argo CD's reference data (`tests/data/argocd`, copied from argo-cd: the notifications
/// catalog as argo-cd keeps it, one file per trigger and template, and CRDs and sample
/// Applications that hold nothing to import). Each file alone, and the whole tree,
/// imports; an import that reports no TODO passes `check`; a file with nothing in it
/// is refused with the reason. The tree gives the conditions the catalog's ConfigMap
/// form gives.
#[test]
fn every_file_of_argo_cds_reference_data_imports_to_something_check_accepts() {
    let reference = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/argocd");
    let mut files = Vec::new();
    let mut dirs = vec![reference.clone()];
    while let Some(d) = dirs.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                dirs.push(p);
            } else if p.extension().is_some_and(|x| x == "yaml") {
                files.push(p);
            }
        }
    }
    files.sort();
    let (mut imported, mut refused) = (0, 0);
    for f in &files {
        let dir = tempfile::tempdir().unwrap();
        match import::import(std::slice::from_ref(f), dir.path(), false) {
            Ok(report) => {
                imported += 1;
                assert!(report.complete(), "{}: {:?}", f.display(), report.todos);
                if let Err(e) = config::load(Some(&dir.path().join("driftwatch.yaml"))) {
                    panic!("{}: reports no TODO but check refuses it: {e:?}", f.display());
                }
            }
            Err(e) => {
                refused += 1;
                assert!(e.0.contains("no Argo CD notifications configuration"), "{}: {e:?}", f.display());
                assert!(f.starts_with(reference.join("crds")) || f.starts_with(reference.join("samples")), "{}: {e:?}", f.display());
            }
        }
    }
    assert_eq!((imported, refused), (16, 5), "8 triggers and 8 templates import; the CRDs and samples hold none");

    let dir = tempfile::tempdir().unwrap();
    let report = import::import(std::slice::from_ref(&reference), dir.path(), false).unwrap();
    assert!(report.complete(), "{:?}", report.todos);
    assert_eq!((report.triggers.converted, report.templates.converted), (8, 8));
    assert!(report.notes.iter().filter(|n| n.reason.contains("nothing to import")).count() == 5, "{:?}", report.notes);
    let tree = config::load(Some(&dir.path().join("driftwatch.yaml"))).unwrap_or_else(|e| panic!("{e:?}"));
    let cm_dir = tempfile::tempdir().unwrap();
    let cm = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/import/argocd-catalog-cm.yaml");
    import::import(&[cm], cm_dir.path(), false).unwrap();
    let configmap = config::load(Some(&cm_dir.path().join("driftwatch.yaml"))).unwrap();
    for (name, t) in &configmap.triggers {
        let from_tree = tree.triggers.get(name).unwrap_or_else(|| panic!("{name}"));
        let whens = |t: &driftwatch::trigger::Trigger| t.conditions.iter().map(|c| c.when_text.clone()).collect::<Vec<_>>();
        assert_eq!(whens(from_tree), whens(t), "{name}");
    }
}
