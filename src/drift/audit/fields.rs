//! What a request body sets: the fields of a JSON/merge/strategic-merge body or of a
//! JSON patch, as `managedFields`-style paths with their values (credentials masked),
//! walked within bounds that fail closed (a body not read to the end is a security
//! write, [`NOT_ALL_READ`]).

use serde_json::Value;

use super::{MAX_SET_FIELDS, MAX_VALUE_CHARS, SetField, clip};
use crate::drift::mask::{MASKED, Masker, harmless};

/// The fields a request body sets, as paths (`spec.template.spec.containers[app].securityContext.privileged`,
/// list items by `name` where they have one, as `managedFields` paths are) with their
/// values, credential-looking values masked; at most [`MAX_SET_FIELDS`] (`truncated`
/// says when cut). `metadata.managedFields`, `status` and the resource version are not
/// changes and are left out.
pub fn set_fields(body: &Value, mask: &Masker) -> (Vec<SetField>, bool) {
    if body.as_object().is_some_and(serde_json::Map::is_empty) || body.is_null() {
        // `-p '{}'`: nothing set.
        return (Vec::new(), false);
    }
    let mut sink = Sink::new(mask);
    sink.walk(body, String::new(), Shown::Text, false, 0);
    sink.finish()
}

/// At most this many nodes of one request body are walked; past it what the write set
/// is not all known, and it is taken as a security write ([`NOT_ALL_READ`]).
pub const MAX_WALK_NODES: usize = 100_000;

/// The field a write gets when its body was not walked to the end.
pub const NOT_ALL_READ: &str = "(request: not all read)";

/// The fields found so far, and the masking rules. Past [`MAX_SET_FIELDS`] the walk
/// goes on, keeping only fields that may be security fields (up to as many again):
/// padding a write with harmless fields does not push a security field out of sight.
struct Sink<'m> {
    out: Vec<SetField>,
    truncated: bool,
    nodes: usize,
    mask: &'m Masker,
}

impl<'m> Sink<'m> {
    fn new(mask: &'m Masker) -> Sink<'m> {
        Sink { out: Vec::new(), truncated: false, nodes: 0, mask }
    }

    /// Keeps a field: any within [`MAX_SET_FIELDS`], past it one that may be a
    /// security field.
    fn push(&mut self, f: SetField) {
        if self.out.len() < MAX_SET_FIELDS {
            self.out.push(f);
            return;
        }
        self.truncated = true;
        if self.out.len() < 2 * MAX_SET_FIELDS && crate::drift::classes::may_be_security_field(&f.path) {
            self.out.push(f);
        } else if self.out.len() >= 2 * MAX_SET_FIELDS {
            // Past what may be kept at all: what it set is not all known (padding with
            // look-alike fields must not push the real ones out of sight).
            self.not_all_read();
        }
    }

    /// Marks the write as not all read, once: a security write (`drift::classify`).
    fn not_all_read(&mut self) {
        if !self.out.iter().any(|f| f.path == NOT_ALL_READ) {
            self.out.push(SetField { path: NOT_ALL_READ.to_string(), value: "(over the bound)".to_string() });
        }
    }

    /// Whether the walk may go on (counts a node); past [`MAX_WALK_NODES`] the write
    /// is marked not all read, once.
    fn step(&mut self) -> bool {
        self.nodes += 1;
        if self.nodes == MAX_WALK_NODES + 1 {
            self.truncated = true;
            self.not_all_read();
        }
        self.nodes <= MAX_WALK_NODES
    }

    fn finish(self) -> (Vec<SetField>, bool) {
        (self.out, self.truncated)
    }
}

/// The fields a JSON patch (RFC 6902, `kubectl patch --type=json`) sets: each op's
/// `path` as a field path like [`set_fields`]' (a list index named by the item's `name`
/// in `after`, the object the write left, where it has one), an `add` or `replace`
/// value walked as a merge patch's would be, `remove` as "(removed)", `move`/`copy` as
/// "(moved)"/"(copied)"; `test` sets nothing. What is no change for [`set_fields`]
/// (status, managedFields, the resource version) is none here either.
pub fn json_patch_fields(ops: &[Value], after: Option<&Value>, mask: &Masker) -> (Vec<SetField>, bool) {
    let mut sink = Sink::new(mask);
    for op in ops {
        if !sink.step() {
            break;
        }
        let (Some(kind), Some(pointer)) = (op.get("op").and_then(Value::as_str), op.get("path").and_then(Value::as_str)) else {
            continue;
        };
        // A `move` takes its value away from `from`: that field is removed (a status
        // field too: `status.resources` moved away empties what driftwatch reads).
        if kind == "move"
            && let Some(from) = op.get("from").and_then(Value::as_str)
        {
            match patched(from, after, mask) {
                Some((path, shown)) => sink
                    .push(SetField { path, value: if shown == Shown::Masked { MASKED.to_string() } else { "(moved away)".to_string() } }),
                None if from == "/status" || from.starts_with("/status/") => {
                    let path = from.trim_start_matches('/').splitn(3, '/').take(2).collect::<Vec<_>>().join(".");
                    sink.push(SetField { path: clip(&path, 72), value: "(moved away)".to_string() });
                }
                None => {}
            }
        }
        let Some((path, shown)) = patched(pointer, after, mask) else { continue };
        let keyed = pointer_to_field_path(pointer, after, mask).2;
        let mark = |text: &str, sink: &mut Sink| {
            sink.push(SetField { path: path.clone(), value: if shown == Shown::Masked { MASKED.to_string() } else { text.to_string() } })
        };
        match (kind, op.get("value")) {
            ("add" | "replace", Some(v)) => {
                // A map or a list set whole replaces what was there: the place itself is
                // a field written (`add /metadata/annotations {…}` drops every other
                // annotation), besides what the value holds.
                if (v.is_object() || v.is_array()) && !keyed {
                    mark("(replaced)", &mut sink);
                }
                sink.walk(v, path.clone(), shown, keyed, 1)
            }
            ("remove", _) => mark("(removed)", &mut sink),
            ("move", _) => mark("(moved)", &mut sink),
            ("copy", _) => mark("(copied)", &mut sink),
            _ => {}
        }
    }
    sink.finish()
}

/// A JSON patch's pointer as a field path and how its values show; `None` for what is
/// no change of the object's own (its status, the API server's metadata).
fn patched(pointer: &str, after: Option<&Value>, mask: &Masker) -> Option<(String, Shown)> {
    let mut segments = pointer.split('/').skip(1);
    let (first, second) = (segments.next().unwrap_or_default(), segments.next().unwrap_or_default());
    if not_a_change("", first) || not_a_change(first, second) {
        return None;
    }
    let (path, shown, _) = pointer_to_field_path(pointer, after, mask);
    Some((path, shown))
}

/// How the values at a place of a request are shown, weakest first (places combine by
/// the strongest).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Shown {
    /// Their text, credential-shaped parts masked.
    Text,
    /// Masked unless harmless by shape (`drift::mask::harmless`), or a flag (its text
    /// masked): the values of an env list item, or a command-line word, whose name or
    /// neighbour is not known (a refused JSON patch, whose response is a `Status`,
    /// gives no object to look them up in).
    UnlessHarmless,
    /// `(masked)`: under a credential's name.
    Masked,
}

/// The lists whose items are env vars, named by `name`.
fn env_list(segment: &str) -> bool {
    matches!(segment, "env")
}

/// The lists whose items are command-line words.
fn word_list(segment: &str) -> bool {
    matches!(segment, "args" | "command")
}

/// A JSON pointer (`/spec/template/spec/containers/0/securityContext`) as a field path
/// (`spec.template.spec.containers[app].securityContext`), following `after` to name
/// list items; how its values are shown (masked under a credential's name, or unless
/// harmless under an env item or command word not found in `after`); whether the last
/// segment is a list item named by its `name` (which is then no change of its own).
fn pointer_to_field_path(pointer: &str, after: Option<&Value>, mask: &Masker) -> (String, Shown, bool) {
    let mut path = String::new();
    let mut shown = Shown::Text;
    let mut keyed = false;
    let mut node = after;
    let mut parent = String::new();
    let mut unknown_item = false;
    let mut name_of_unknown = false;
    for raw in pointer.split('/').skip(1) {
        let seg = raw.replace("~1", "/").replace("~0", "~");
        name_of_unknown = std::mem::take(&mut unknown_item) && seg == "name";
        match node {
            Some(Value::Array(items)) => {
                let index = if seg == "-" { items.len().checked_sub(1) } else { seg.parse::<usize>().ok() };
                let item = index.and_then(|i| items.get(i));
                let name = item.and_then(|i| i.get("name")).and_then(Value::as_str);
                keyed = name.is_some();
                if name.is_some_and(|n| mask.name(n)) {
                    shown = Shown::Masked;
                }
                // `["--password", "hunter2"]`, `["-u", "deploy:hunter2"]`: the word before.
                let before = index.and_then(|i| i.checked_sub(1)).and_then(|i| items.get(i)).and_then(Value::as_str);
                if before.is_some_and(|f| mask.masks_next(f, item.and_then(Value::as_str).unwrap_or(":"))) {
                    shown = Shown::Masked;
                }
                if (item.is_none() || (name.is_none() && env_list(&parent))) && (env_list(&parent) || word_list(&parent)) {
                    shown = shown.max(Shown::UnlessHarmless);
                    unknown_item = true;
                }
                path.push_str(&format!("[{}]", name.unwrap_or(&seg)));
                node = item;
            }
            _ => {
                keyed = false;
                if seg.parse::<usize>().is_ok() || seg == "-" {
                    path.push_str(&format!("[{seg}]"));
                    // The object after the write is not known (or is the refusal's
                    // `Status`): an env item's name and a word's neighbour are not either.
                    if env_list(&parent) || word_list(&parent) {
                        shown = shown.max(Shown::UnlessHarmless);
                        unknown_item = true;
                    }
                } else {
                    if !path.is_empty() {
                        path.push('.');
                    }
                    path.push_str(&seg);
                    if mask.name(&seg) {
                        shown = Shown::Masked;
                    }
                }
                node = node.and_then(|n| n.get(&seg));
            }
        }
        parent = seg;
    }
    // `replace /env/0/name`: the name itself is shown (it is what tells the item).
    if name_of_unknown && shown == Shown::UnlessHarmless {
        shown = Shown::Text;
    }
    // A data key is looked at whole, without the reference exemption (`/data/key`).
    if mask.path(&path) {
        shown = Shown::Masked;
    }
    (path, shown, keyed)
}

/// Whether `key` under `parent` (a field path; empty at the top) is no change of the
/// object's own: its status and type, and what the API server keeps in `metadata`.
fn not_a_change(parent: &str, key: &str) -> bool {
    match parent {
        "" => matches!(key, "status" | "apiVersion" | "kind"),
        "metadata" => matches!(key, "managedFields" | "resourceVersion" | "uid" | "creationTimestamp" | "generation"),
        _ => false,
    }
}

impl Sink<'_> {
    /// `keyed`: `v` is a list item addressed by its `name` (which is then no change);
    /// `shown`: how the values below show (`Masked` under a credential's name).
    fn walk(&mut self, v: &Value, path: String, shown: Shown, keyed: bool, depth: usize) {
        if !self.step() {
            return;
        }
        let mask = self.mask;
        let leaf = |value: &str, sink: &mut Sink| {
            let shown = match shown {
                Shown::Masked => MASKED.to_string(),
                Shown::UnlessHarmless if !harmless(value) && !value.starts_with('-') => MASKED.to_string(),
                _ => clip(&mask.text(value), MAX_VALUE_CHARS),
            };
            sink.push(SetField { path: path.clone(), value: shown });
        };
        match v {
            Value::Object(m) if !m.is_empty() && depth < 32 => {
                // An env var (or any name/value pair) whose name looks like a credential;
                // an item whose place did not tell its name is told by its own.
                let name = m.get("name").and_then(Value::as_str);
                let shown = match name {
                    Some(n) if mask.name(n) => Shown::Masked,
                    Some(_) if shown == Shown::UnlessHarmless => Shown::Text,
                    _ => shown,
                };
                // A strategic merge patch's `$patch: delete` (or `replace`) on a map
                // removes (or replaces) it whole: the map itself is the field written.
                if let Some(directive) = m.get("$patch").and_then(Value::as_str)
                    && matches!(directive, "delete" | "replace")
                {
                    let text = if directive == "delete" { "(removed)" } else { "(replaced)" };
                    self.push(SetField { path: path.clone(), value: text.to_string() });
                }
                for (k, child) in m {
                    if not_a_change(&path, k) {
                        continue;
                    }
                    if k.starts_with("$setElementOrder") || k == "$patch" || k == "$retainKeys" || (keyed && k == "name") {
                        continue;
                    }
                    let p = if path.is_empty() { k.clone() } else { format!("{path}.{k}") };
                    let named = mask.name(k) || (p.starts_with("data.") && mask.path(&p));
                    let under = if named { Shown::Masked } else { shown };
                    self.walk(child, p, under, false, depth + 1);
                }
            }
            Value::Array(items) if !items.is_empty() && depth < 32 => {
                let env = path.ends_with(".env") || path == "env";
                for (i, item) in items.iter().enumerate() {
                    let name = item.get("name").and_then(Value::as_str);
                    let key = name.map_or_else(|| i.to_string(), str::to_string);
                    // `["--password", "hunter2"]`, `["-u", "deploy:hunter2"]`: the word before.
                    let before = i.checked_sub(1).and_then(|b| items[b].as_str());
                    let after_flag = before.is_some_and(|f| mask.masks_next(f, item.as_str().unwrap_or(":")));
                    let under = if after_flag || name.is_some_and(|n| mask.name(n)) {
                        Shown::Masked
                    } else if env && name.is_none() {
                        shown.max(Shown::UnlessHarmless)
                    } else {
                        shown
                    };
                    self.walk(item, format!("{path}[{key}]"), under, name.is_some(), depth + 1);
                }
            }
            Value::Object(_) | Value::Array(_) if depth >= 32 => leaf("(nested too deep)", self),
            Value::Bool(b) => self.push(SetField { path: path.clone(), value: b.to_string() }),
            Value::String(s) => leaf(s, self),
            Value::Null => self.push(SetField { path: path.clone(), value: "(removed)".into() }),
            other => leaf(&other.to_string(), self),
        }
    }
}
