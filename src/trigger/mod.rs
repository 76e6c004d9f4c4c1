//! Turns an Application into condition results by evaluating rhai triggers (the only
//! module that knows rhai).
//!
//! Semantics follow Argo CD's notifications engine: each condition of a trigger is
//! evaluated on its own; a result counts only if it is boolean `true`; a runtime error
//! counts as false and is reported once per distinct error; `oncePer` is evaluated only
//! when `when` is true, and its value stringified (`()` as `<nil>`).

pub mod convert;
pub mod engine;
pub mod reads;

use std::collections::HashSet;
use std::hash::{Hash, Hasher};
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

use rhai::{AST, Dynamic, Engine, Scope};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use chrono::{DateTime, Utc};

use crate::drift::Drift;
use crate::drift::episode::Episode;
use crate::source::{At, ConfigDuration, ConfigError, SourceFile};

/// `when` as written: a rhai expression, or a YAML boolean (`when: true` in on-created).
#[derive(Debug, Clone, Deserialize)]
#[serde(untagged)]
pub enum WhenSource {
    Bool(bool),
    Expr(String),
}

impl WhenSource {
    pub fn text(&self) -> String {
        match self {
            WhenSource::Bool(b) => b.to_string(),
            WhenSource::Expr(s) => s.clone(),
        }
    }
}

/// One condition of a trigger as written in a trigger file.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ConditionDef {
    /// The rhai condition; the notification is sent while it evaluates to `true`.
    pub when: At<WhenSource>,
    /// A rhai expression; the notification is sent once per distinct value of it.
    #[serde(rename = "oncePer", default)]
    pub once_per: Option<At<String>>,
    /// Templates to render and send when the condition holds.
    #[serde(default)]
    pub send: Vec<String>,
    /// Free text, shown by `trigger run`.
    #[serde(default)]
    pub description: Option<String>,
    /// When the condition turns false after it was notified, send a resolve: PagerDuty
    /// `resolve` with the same `dedup_key`, Slack updates the original message, other
    /// destinations get the template rendered with `resolved` true. The trigger re-arms.
    #[serde(default)]
    pub resolve: bool,
    /// Hold-down: notify only once the condition has held this long without a break
    /// (`30s`, `2m`, `1h30m`).
    #[serde(rename = "for", default)]
    pub hold: Option<At<ConfigDuration>>,
    /// Notify again every this long while the condition keeps holding (`4h`).
    #[serde(default)]
    pub repeat: Option<At<ConfigDuration>>,
}

/// A trigger file: a list of conditions.
pub type TriggerDef = Vec<ConditionDef>;

/// A compiled condition.
#[derive(Debug, Clone)]
pub struct Condition {
    pub index: usize,
    pub when_text: String,
    when: Compiled,
    once_per: Option<(String, AST)>,
    pub send: Vec<String>,
    pub description: Option<String>,
    pub resolve: bool,
    pub hold: Option<std::time::Duration>,
    pub repeat: Option<std::time::Duration>,
    /// Stable identity of the condition in dedup keys: `[index].<hash of when>`, as
    /// Argo CD forms it, so editing a condition re-arms it.
    pub key: String,
    /// Whether its result can change with time alone (it calls `now()` or reads an
    /// episode's duration), decided from the compiled script: only then does the daemon
    /// re-evaluate on a schedule.
    pub reads_clock: bool,
    /// What its scripts read of `app`, `drift` and `episode`.
    pub reads: reads::Reads,
}

/// Fields of the episode view computed from the current time.
const CLOCK_FIELDS: &[&str] = &["durationSeconds", "duration"];

/// Whether a compiled script reads the clock: a call of `now`, or an access (`.x` or
/// `["x"]`) of a field in [`CLOCK_FIELDS`].
fn reads_clock(ast: &AST) -> bool {
    use rhai::{ASTNode, Expr};
    let mut found = false;
    ast.walk(&mut |path: &[ASTNode]| {
        if let Some(ASTNode::Expr(e)) = path.last() {
            found |= match e {
                Expr::FnCall(f, _) | Expr::MethodCall(f, _) => f.name.as_str() == "now",
                Expr::Property(p, _) => CLOCK_FIELDS.contains(&p.2.as_str()),
                Expr::StringConstant(s, _) => CLOCK_FIELDS.contains(&s.as_str()),
                _ => false,
            };
        }
        !found
    });
    found
}

#[derive(Debug, Clone)]
enum Compiled {
    Const(bool),
    Script(AST),
}

/// A compiled trigger.
#[derive(Debug, Clone)]
pub struct Trigger {
    pub name: String,
    pub conditions: Vec<Condition>,
}

impl Trigger {
    /// What its conditions read of a pass's values.
    pub fn reads(&self) -> reads::Reads {
        let mut out = reads::Reads::default();
        self.conditions.iter().for_each(|c| out.merge(&c.reads));
        out
    }
}

/// What one condition decided for one Application.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ConditionResult {
    pub index: usize,
    pub when: String,
    /// True only when the condition evaluated to boolean `true`.
    pub result: bool,
    /// The `oncePer` value, when the condition has one and fired.
    #[serde(rename = "oncePer")]
    pub once_per: Option<String>,
    pub send: Vec<String>,
    /// The condition's identity in dedup keys.
    #[serde(skip)]
    pub key: String,
    /// Whether the condition is marked `resolve: true`.
    #[serde(skip)]
    pub resolve: bool,
    /// The condition's `for:` hold-down and `repeat:` interval.
    #[serde(skip)]
    pub hold: Option<std::time::Duration>,
    #[serde(skip)]
    pub repeat: Option<std::time::Duration>,
    /// Why the condition counts as false, when it failed at run time.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// Errors already reported, so a broken condition on 500 Applications logs once, not
/// once per evaluation. Bounded: forgotten wholesale when full, so at worst an error is
/// reported again.
#[derive(Default)]
struct SeenErrors {
    seen: HashSet<u64>,
}

const MAX_SEEN_ERRORS: usize = 4096;

/// The shared rhai engine plus runtime-error bookkeeping.
pub struct TriggerEngine {
    engine: Engine,
    seen: Mutex<SeenErrors>,
    /// Count of runtime errors (every occurrence), for metrics.
    pub runtime_errors: AtomicU64,
}

/// Whether a condition compiles with the trigger engine; for `driftwatch import` to check
/// what it wrote.
pub fn compiles(src: &str) -> Result<(), CompileError> {
    static ENGINE: std::sync::OnceLock<Engine> = std::sync::OnceLock::new();
    ENGINE.get_or_init(engine::build).compile_expression(src).map(|_| ()).map_err(|e| CompileError(e.to_string()))
}

/// A condition that does not compile: rhai's message (no rhai type leaves this module).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct CompileError(pub String);

impl Default for TriggerEngine {
    fn default() -> Self {
        TriggerEngine::new()
    }
}

/// One Application converted to rhai, shared by every condition of a pass.
pub struct AppScope {
    scope: Scope<'static>,
}

impl AppScope {
    /// `nil` and `null` (both `()`, as Argo CD's expressions write it) and `app`.
    fn of(app: Dynamic) -> AppScope {
        let mut scope = Scope::new();
        scope.push_constant("nil", ());
        scope.push_constant("null", ());
        scope.push_constant_dynamic("app", app);
        AppScope { scope }
    }
}

impl TriggerEngine {
    pub fn new() -> Self {
        TriggerEngine { engine: engine::build(), seen: Mutex::new(SeenErrors::default()), runtime_errors: AtomicU64::new(0) }
    }

    /// Converts an Application (or a Flux or Fleet unit) once for a whole evaluation
    /// pass: `app`, and `unit` read from it.
    pub fn prepare(&self, app: &serde_json::Value) -> AppScope {
        let mut scope = AppScope::of(convert::to_dynamic(app));
        let unit = crate::unit::Unit::read(app).unwrap_or_default();
        scope
            .scope
            .push_constant_dynamic("unit", convert::to_dynamic(&unit.view_masked(&|s| crate::drift::mask::BUILT_IN.text(s).into_owned())));
        scope
    }

    /// As [`TriggerEngine::prepare`], with the unit the object is (`unit`: one shape
    /// for every engine) and what the pass found: `drift` and `episode` (the open or
    /// last resolved one, seen at `now`; `()` when there is none). Only what `reads`
    /// says the scripts to be run read is converted.
    pub fn prepare_pass(
        &self,
        app: &serde_json::Value,
        unit: &crate::unit::Unit,
        drift: &Drift,
        episode: Option<&Episode>,
        now: DateTime<Utc>,
        reads: &reads::Reads,
    ) -> AppScope {
        let mut scope = AppScope::of(reads.app.convert(app));
        // The views are built only when a script reads them.
        scope.scope.push_constant_dynamic(
            "unit",
            reads.unit.convert_with(|| unit.view_masked(&|s| crate::drift::mask::BUILT_IN.text(s).into_owned())),
        );
        scope.scope.push_constant_dynamic("drift", reads.drift.convert_with(|| drift.view()));
        let episode = reads.episode.convert_with(|| episode.map_or(serde_json::Value::Null, |e| e.view(now)));
        scope.scope.push_constant_dynamic("episode", episode);
        scope
    }

    /// Compiles a trigger file's conditions; every error names file, line and column.
    pub fn compile(&self, name: &str, def: &TriggerDef, file: &SourceFile) -> Result<Trigger, Vec<ConfigError>> {
        let mut errors = Vec::new();
        let mut conditions = Vec::new();
        if def.is_empty() {
            errors.push(ConfigError::new(file.pos_at_start(), format!("trigger {name}"), "a trigger needs at least one condition"));
        }
        for (index, c) in def.iter().enumerate() {
            let key_path = format!("trigger {name}[{index}]");
            let when = match &c.when.value {
                WhenSource::Bool(b) => Some(Compiled::Const(*b)),
                WhenSource::Expr(src) => match self.compile_expr(src) {
                    Ok(ast) => Some(Compiled::Script(ast)),
                    Err((msg, line, col)) => {
                        errors.push(ConfigError::new(
                            file.pos_in_scalar(&c.when.referenced, src, line, col).or_else(|| file.pos(&c.when.referenced)),
                            format!("{key_path}.when"),
                            msg,
                        ));
                        None
                    }
                },
            };
            let once_per = match &c.once_per {
                None => Some(None),
                Some(src) => match self.compile_expr(&src.value) {
                    Ok(ast) => Some(Some((src.value.clone(), ast))),
                    Err((msg, line, col)) => {
                        errors.push(ConfigError::new(
                            file.pos_in_scalar(&src.referenced, &src.value, line, col).or_else(|| file.pos(&src.referenced)),
                            format!("{key_path}.oncePer"),
                            msg,
                        ));
                        None
                    }
                },
            };
            // `send: []` is accepted, as Argo CD accepts it: the condition sends nothing
            // (`config` warns about it).
            let mut duration = |d: &Option<At<ConfigDuration>>, key: &str| -> Option<std::time::Duration> {
                let d = d.as_ref()?;
                if d.value.0.is_zero() {
                    errors.push(ConfigError::new(file.pos(&d.referenced), format!("{key_path}.{key}"), "must be more than zero"));
                    return None;
                }
                Some(d.value.0)
            };
            let hold = duration(&c.hold, "for");
            let repeat = duration(&c.repeat, "repeat");
            if let (Some(when), Some(once_per)) = (when, once_per) {
                let when_text = c.when.value.text();
                let scripts: Vec<&AST> = match &when {
                    Compiled::Script(ast) => Some(ast),
                    Compiled::Const(_) => None,
                }
                .into_iter()
                .chain(once_per.as_ref().map(|(_, ast)| ast))
                .collect();
                let reads_clock = scripts.iter().any(|ast| reads_clock(ast));
                let mut reads = reads::Reads::default();
                scripts.iter().for_each(|ast| reads.merge(&reads::Reads::of(ast)));
                conditions.push(Condition {
                    index,
                    key: condition_key(index, &when_text),
                    when_text,
                    when,
                    once_per,
                    send: c.send.clone(),
                    description: c.description.clone(),
                    resolve: c.resolve,
                    hold,
                    repeat,
                    reads_clock,
                    reads,
                });
            }
        }
        if errors.is_empty() { Ok(Trigger { name: name.to_string(), conditions }) } else { Err(errors) }
    }

    /// Compiles one expression; on failure the message and its 1-based line/column
    /// inside the expression.
    fn compile_expr(&self, src: &str) -> Result<AST, (String, usize, usize)> {
        self.engine.compile(src).map_err(|e| {
            let pos = e.position();
            let msg = e.err_type().to_string();
            (format!("invalid rhai: {msg}"), pos.line().unwrap_or(1), pos.position().unwrap_or(1))
        })
    }

    /// Evaluates every condition of `trigger` on the prepared Application.
    pub fn run(&self, trigger: &Trigger, app: &mut AppScope) -> Vec<ConditionResult> {
        trigger.conditions.iter().map(|c| self.run_condition(&trigger.name, c, app)).collect()
    }

    fn run_condition(&self, trigger: &str, c: &Condition, app: &mut AppScope) -> ConditionResult {
        let mut error = None;
        let result = match &c.when {
            Compiled::Const(b) => *b,
            Compiled::Script(ast) => match self.eval(ast, app) {
                Ok(v) => v.as_bool().unwrap_or(false),
                Err(e) => {
                    self.report(trigger, c.index, "when", &e);
                    error = Some(e);
                    false
                }
            },
        };
        let once_per = match (&c.once_per, result) {
            (Some((_, ast)), true) => match self.eval(ast, app) {
                Ok(v) => Some(engine::stringify(&v)),
                Err(e) => {
                    // Argo CD leaves the key empty when oncePer fails; so do we, and say so.
                    self.report(trigger, c.index, "oncePer", &e);
                    error = Some(e);
                    Some(String::new())
                }
            },
            _ => None,
        };
        ConditionResult {
            index: c.index,
            when: c.when_text.clone(),
            result,
            once_per,
            send: c.send.clone(),
            key: c.key.clone(),
            resolve: c.resolve,
            hold: c.hold,
            repeat: c.repeat,
            error,
        }
    }

    fn eval(&self, ast: &AST, app: &mut AppScope) -> Result<Dynamic, String> {
        // Variables a script declares must not leak into the next condition.
        let len = app.scope.len();
        let out = self.engine.eval_ast_with_scope::<Dynamic>(&mut app.scope, ast).map_err(|e| e.to_string());
        app.scope.rewind(len);
        out
    }

    /// How many distinct runtime errors have been reported (logged) so far.
    pub fn distinct_errors_reported(&self) -> usize {
        self.seen.lock().unwrap_or_else(|p| p.into_inner()).seen.len()
    }

    fn report(&self, trigger: &str, index: usize, part: &str, error: &str) {
        self.runtime_errors.fetch_add(1, Ordering::Relaxed);
        let mut h = std::collections::hash_map::DefaultHasher::new();
        (trigger, index, part, error).hash(&mut h);
        let fingerprint = h.finish();
        let first = {
            // A poisoned lock only means another evaluation panicked mid-insert; the set
            // is still usable.
            let mut seen = self.seen.lock().unwrap_or_else(|p| p.into_inner());
            if seen.seen.len() >= MAX_SEEN_ERRORS {
                seen.seen.clear();
            }
            seen.seen.insert(fingerprint)
        };
        if first {
            tracing::warn!(trigger, condition = index, part, %error, "trigger condition failed at run time; counted as false");
        }
    }
}

fn condition_key(index: usize, when: &str) -> String {
    let digest = Sha256::digest(when.as_bytes());
    let hex: String = digest.iter().take(8).map(|b| format!("{b:02x}")).collect();
    format!("[{index}].{hex}")
}

#[cfg(test)]
mod tests;
