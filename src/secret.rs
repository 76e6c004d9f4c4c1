//! `$key` secret references in service configuration, and the redactor that keeps
//! their values out of everything driftwatch prints or stores.
//!
//! Values come from a secrets file (a YAML/JSON map, or a mounted Kubernetes Secret
//! directory with one file per key) and from `DRIFTWATCH_SECRET_<KEY>` environment
//! variables (key upper-cased, `-` and `.` as `_`).

use std::collections::BTreeMap;
use std::fmt;
use std::path::Path;

/// A secret value. Its `Debug` and `Display` never show the value.
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(String);

impl Secret {
    /// A secret obtained at run time (an installation token), never configured.
    pub fn new(value: String) -> Secret {
        Secret(value)
    }

    pub fn expose(&self) -> &str {
        &self.0
    }

    /// Whether an `Authorization` header value is `Bearer <this secret>`, compared in
    /// constant time (the length is not secret: tokens are fixed-length random strings).
    pub fn is_bearer(&self, authorization: Option<&[u8]>) -> bool {
        let Some(given) = authorization.and_then(|h| h.strip_prefix(b"Bearer ")) else { return false };
        let want = self.0.as_bytes();
        given.len() == want.len() && given.iter().zip(want).fold(0u8, |acc, (a, b)| acc | (a ^ b)) == 0
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Secret(***)")
    }
}

impl fmt::Display for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("***")
    }
}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum SecretError {
    /// Names the key and every place it was looked for.
    #[error("secret ${key} is not set: {looked}")]
    Missing { key: String, looked: String },
    #[error("secrets file {path}: {message}")]
    File { path: String, message: String },
}

/// Secret values by key.
#[derive(Clone, Default)]
pub struct Secrets {
    values: BTreeMap<String, Secret>,
    /// Where they were loaded from ("the secrets file ..."), for error messages.
    source: Option<String>,
}

impl fmt::Debug for Secrets {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Secrets").field("keys", &self.values.keys().collect::<Vec<_>>()).finish()
    }
}

fn env_name(key: &str) -> String {
    let mut s = String::from("DRIFTWATCH_SECRET_");
    s.extend(key.chars().map(|c| if c.is_ascii_alphanumeric() { c.to_ascii_uppercase() } else { '_' }));
    s
}

fn is_key_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.')
}

impl Secrets {
    pub fn from_map<K: Into<String>, V: Into<String>>(map: impl IntoIterator<Item = (K, V)>) -> Secrets {
        Secrets { values: map.into_iter().map(|(k, v)| (k.into(), Secret(v.into()))).collect(), source: None }
    }

    /// Loads a secrets file (YAML/JSON map of strings) or directory (one file per key,
    /// as Kubernetes mounts a Secret).
    pub fn load(path: &Path) -> Result<Secrets, SecretError> {
        let err = |message: String| SecretError::File { path: path.display().to_string(), message };
        if path.is_dir() {
            let mut values = BTreeMap::new();
            for entry in std::fs::read_dir(path).map_err(|e| err(e.to_string()))? {
                let entry = entry.map_err(|e| err(e.to_string()))?;
                let name = entry.file_name().to_string_lossy().to_string();
                // Kubernetes' `..data` symlink farm: only plain key files count.
                if name.starts_with('.') || !entry.path().is_file() {
                    continue;
                }
                let value = std::fs::read_to_string(entry.path()).map_err(|e| err(e.to_string()))?;
                values.insert(name, Secret(value.trim_end_matches('\n').to_string()));
            }
            return Ok(Secrets { values, source: Some(format!("the secrets directory {}", path.display())) });
        }
        let text = std::fs::read_to_string(path).map_err(|e| err(e.to_string()))?;
        // Never echo the parser's snippet: it would contain secret values.
        let map: BTreeMap<String, String> = serde_saphyr::from_str(&text).map_err(|e| {
            let line = e.location().map(|l| format!(" at line {}", l.line())).unwrap_or_default();
            err(format!("expected a mapping of key: value strings{line}"))
        })?;
        Ok(Secrets { source: Some(format!("the secrets file {}", path.display())), ..Secrets::from_map(map) })
    }

    /// The value of `key`: the loaded secrets first, then the environment.
    pub fn get(&self, key: &str) -> Result<Secret, SecretError> {
        if let Some(v) = self.values.get(key) {
            return Ok(v.clone());
        }
        std::env::var(env_name(key)).map(Secret).map_err(|_| self.missing(key))
    }

    /// The error for an unset `key`, naming where it was looked for.
    fn missing(&self, key: &str) -> SecretError {
        let env = env_name(key);
        let looked = match &self.source {
            Some(source) => format!("no key {key:?} in {source}, and no environment variable {env}"),
            None => format!("no secretsFile is configured, and no environment variable {env}"),
        };
        SecretError::Missing { key: key.to_string(), looked }
    }

    /// Replaces every `$key` in `s` with its value (`$$` is a literal `$`).
    pub fn resolve(&self, s: &str) -> Result<Secret, SecretError> {
        let mut out = String::with_capacity(s.len());
        let mut rest = s;
        while let Some(i) = rest.find('$') {
            out.push_str(&rest[..i]);
            let after = &rest[i + 1..];
            if let Some(r) = after.strip_prefix('$') {
                out.push('$');
                rest = r;
                continue;
            }
            let end = after.find(|c: char| !is_key_char(c)).unwrap_or(after.len());
            if end == 0 {
                out.push('$');
                rest = after;
                continue;
            }
            out.push_str(self.get(&after[..end])?.expose());
            rest = &after[end..];
        }
        out.push_str(rest);
        Ok(Secret(out))
    }

    /// Resolves every value of a header map (values may reference secrets).
    pub fn resolve_map(
        &self,
        map: &std::collections::BTreeMap<String, String>,
    ) -> Result<std::collections::BTreeMap<String, String>, SecretError> {
        map.iter().map(|(k, v)| Ok((k.clone(), self.resolve(v)?.expose().to_string()))).collect()
    }

    /// Every `$key` referenced in `s`.
    pub fn references(s: &str) -> Vec<String> {
        let mut out = Vec::new();
        let mut rest = s;
        while let Some(i) = rest.find('$') {
            let after = &rest[i + 1..];
            if let Some(r) = after.strip_prefix('$') {
                rest = r;
                continue;
            }
            let end = after.find(|c: char| !is_key_char(c)).unwrap_or(after.len());
            if end > 0 {
                out.push(after[..end].to_string());
            }
            rest = &after[end..];
        }
        out
    }

    /// A redactor for every value these secrets hold, plus the given extra values
    /// (secrets resolved from the environment).
    pub fn redactor(&self, extra: impl IntoIterator<Item = Secret>) -> Redactor {
        let mut needles: Vec<String> = self.values.values().map(|s| s.0.clone()).chain(extra.into_iter().map(|s| s.0)).collect();
        // Very short values would redact ordinary words; a secret that short is not one.
        needles.retain(|n| n.len() >= 4);
        needles.sort_by_key(|n| std::cmp::Reverse(n.len()));
        needles.dedup();
        Redactor { needles }
    }
}

/// Replaces secret values in text with `***`.
#[derive(Clone, Default)]
pub struct Redactor {
    needles: Vec<String>,
}

impl fmt::Debug for Redactor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Redactor({} values)", self.needles.len())
    }
}

pub const REDACTED: &str = "***";

impl Redactor {
    pub fn redact(&self, s: &str) -> String {
        let mut out = s.to_string();
        for n in &self.needles {
            if out.contains(n.as_str()) {
                out = out.replace(n.as_str(), REDACTED);
            }
        }
        out
    }

    /// Redacts every string (keys included) inside a JSON value.
    pub fn redact_json(&self, v: &mut serde_json::Value) {
        use serde_json::Value;
        if self.needles.is_empty() {
            return;
        }
        match v {
            Value::String(s) => *s = self.redact(s),
            Value::Array(items) => items.iter_mut().for_each(|i| self.redact_json(i)),
            Value::Object(map) => {
                let old = std::mem::take(map);
                for (k, mut val) in old {
                    self.redact_json(&mut val);
                    map.insert(self.redact(&k), val);
                }
            }
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn references_resolve_and_never_print() {
        let s = Secrets::from_map([("slack-token", "xoxb-123456"), ("pw", "hunter22")]);
        assert_eq!(s.resolve("Bearer $slack-token").unwrap().expose(), "Bearer xoxb-123456");
        assert_eq!(s.resolve("$$literal $pw").unwrap().expose(), "$literal hunter22");
        assert_eq!(
            s.resolve("$nope").unwrap_err().to_string(),
            "secret $nope is not set: no secretsFile is configured, and no environment variable DRIFTWATCH_SECRET_NOPE"
        );
        assert_eq!(format!("{:?} {}", s.get("pw").unwrap(), s.get("pw").unwrap()), "Secret(***) ***");
        assert!(!format!("{s:?}").contains("hunter22"));
        assert_eq!(Secrets::references("a $x-y b $$c $z"), ["x-y", "z"]);
    }

    #[test]
    fn environment_fallback() {
        // A name no other test uses: the environment is process-wide.
        // SAFETY: this test is the only one touching this variable.
        unsafe { std::env::set_var("DRIFTWATCH_SECRET_ENV_ONLY_KEY", "from-env-value") };
        let s = Secrets::default();
        assert_eq!(s.get("env-only.key").unwrap().expose(), "from-env-value");
    }

    #[test]
    fn redactor_scrubs_json_everywhere() {
        let s = Secrets::from_map([("t", "xoxb-secret-value")]);
        let r = s.redactor([]);
        let mut v = serde_json::json!({"a": "token xoxb-secret-value", "xoxb-secret-value": ["xoxb-secret-value"]});
        r.redact_json(&mut v);
        assert_eq!(v, serde_json::json!({"a": "token ***", "***": ["***"]}));
    }

    #[test]
    fn bad_secrets_file_does_not_echo_values() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("s.yaml");
        std::fs::write(&p, "token: [xoxb-very-secret\n").unwrap();
        let e = Secrets::load(&p).unwrap_err().to_string();
        assert!(!e.contains("xoxb-very-secret"), "{e}");
        let d = dir.path().join("mounted");
        std::fs::create_dir(&d).unwrap();
        std::fs::write(d.join("slack-token"), "xoxb-1\n").unwrap();
        assert_eq!(Secrets::load(&d).unwrap().get("slack-token").unwrap().expose(), "xoxb-1");
    }
}
