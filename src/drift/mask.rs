//! Credential masking, by name and by shape, for every value driftwatch shows from a
//! cluster: the value diff (Git and live side), what an audited request set, and so
//! chat, pages, SIEM records, `/history`, `/ui` and the CLI, which all print those.
//!
//! - **By name**: a field, env var, list item or ConfigMap key whose name looks like a
//!   credential (`DB_PASSWORD`, `MYSQL_PWD`, `SENTRY_DSN`, `tls.key`, `KEY`, …) has its
//!   value masked whole. Kubernetes fields that only *name* a secret (`secretKeyRef`,
//!   `secretName`, a selector's `key`, …) are not credentials and stay readable.
//! - **By shape**: wherever a string sits, it is masked line by line and token by
//!   token (`text`): a line whose key names a credential by the rules above keeps its
//!   key (`DB_PASS=(masked)`, `password: (masked)`, `"auth": "(masked)"`,
//!   `Password=(masked);`), a URL's userinfo its user (`postgres://app:(masked)@db`),
//!   a command line its flags (`curl -u deploy:(masked)`, `--token (masked)`); PEM
//!   private keys, `Bearer`/`Basic` credentials, JWTs, well-known token formats and long
//!   random-looking tokens go whole; and whatever the operator adds (`diff.mask`).
//!   Harmless lines beside them (`LOG_LEVEL=debug`) are left as they are.
//! - **Recursively**: an object or list that holds a credential anywhere inside (a key
//!   or item name, a shaped value, a flag followed by its value) is summarised, never
//!   printed as JSON.
//!
//! Booleans are never masked: a bit is no credential, and `automountServiceAccountToken:
//! true` must stay visible.

use std::borrow::Cow;
use std::sync::LazyLock;

use regex::Regex;
use serde_json::Value;

/// What a masked value (or part of one) shows.
pub const MASKED: &str = "(masked)";
/// Nodes of one value looked at for credentials; past it the value counts as holding one.
const MAX_NODES: usize = 10_000;
const MAX_DEPTH: usize = 64;
/// The most patterns `diff.mask` may add, and the compiled size of each.
pub const MAX_PATTERNS: usize = 64;
pub const MAX_PATTERN_BYTES: usize = 1 << 20;

/// Words that make a name a credential's wherever they appear in it.
const FRAGMENTS: &[&str] = &[
    "password",
    "passwd",
    "passphrase",
    "secret",
    "token",
    "credential",
    "apikey",
    "privatekey",
    "accesskey",
    "secretkey",
    "authorization",
    "pgpass",
    "id_rsa",
    "id_ecdsa",
    "id_ed25519",
    "kubeconfig",
];
/// [`FRAGMENTS`] as they appear in a name without its separators (`ID_RSA` in
/// `SSH_IDRSA`), made once: a name is looked at for every field a pass reads.
static SQUASHED: std::sync::LazyLock<Vec<String>> = std::sync::LazyLock::new(|| FRAGMENTS.iter().map(|f| f.replace('_', "")).collect());
/// Words that make a name a credential's when they are a whole word of it
/// (`MYSQL_PWD`, `DB_PASS`, `SENTRY_DSN`, `tls.key`, `KEY`, `auth-header`).
const WORDS: &[&str] = &[
    "pwd",
    "pass",
    "pw",
    "key",
    "dsn",
    "auth",
    "private",
    "cert",
    "pem",
    "p12",
    "pfx",
    "jks",
    "cookie",
    "webhook",
    "salt",
    "otp",
    "signature",
];
/// Kubernetes field names that name or reference a secret without holding one.
const REFERENCES: &[&str] = &[
    "key",
    "keys",
    "secretName",
    "secretRef",
    "secretKeyRef",
    "secretProviderClass",
    "imagePullSecrets",
    "secrets",
    "serviceAccountToken",
    "automountServiceAccountToken",
    "expirationSeconds",
    "keySecret",
    "tokenSecretRef",
    "passwordSecretRef",
    "credentialsSecret",
    "privateKeySecretRef",
];

mod text;

/// A command-line flag (`--password`, `-token`), its name captured.
static FLAG: LazyLock<Regex> =
    LazyLock::new(|| Regex::new(r"^--?([A-Za-z0-9_\-]{2,})$").unwrap_or_else(|e| unreachable!("built-in flag pattern: {e}")));

/// Masking rules: the built-in ones and the operator's `diff.mask` patterns.
#[derive(Debug, Clone, Default)]
pub struct Masker {
    extra: Vec<Regex>,
}

/// The built-in rules alone.
pub static BUILT_IN: Masker = Masker { extra: Vec::new() };

impl PartialEq for Masker {
    fn eq(&self, other: &Masker) -> bool {
        self.extra.len() == other.extra.len() && self.extra.iter().zip(&other.extra).all(|(a, b)| a.as_str() == b.as_str())
    }
}

impl Masker {
    /// With the operator's patterns (each a regex: a value's matches are masked, and a
    /// name it matches masks the value whole).
    pub fn with_patterns(patterns: &[String]) -> Result<Masker, BadPattern> {
        Self::with_patterns_text(patterns).map_err(BadPattern)
    }

    /// [`with_patterns`], its refusal as text.
    fn with_patterns_text(patterns: &[String]) -> Result<Masker, String> {
        if patterns.len() > MAX_PATTERNS {
            return Err(format!("at most {MAX_PATTERNS} patterns"));
        }
        let extra = patterns
            .iter()
            .map(|p| regex::RegexBuilder::new(p).size_limit(MAX_PATTERN_BYTES).build().map_err(|e| format!("pattern {p:?}: {e}")))
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Masker { extra })
    }

    /// Whether a field, env var, list item or data key name looks like a credential's.
    pub fn name(&self, name: &str) -> bool {
        !REFERENCES.contains(&name) && self.names_one(name)
    }

    /// Whether a name looks like a credential's, the references among them too: a
    /// ConfigMap's data key `key` holds content, whatever a `secretKeyRef`'s `key` does.
    fn names_one(&self, name: &str) -> bool {
        let lower = name.to_ascii_lowercase();
        let squashed: String = lower.chars().filter(char::is_ascii_alphanumeric).collect();
        FRAGMENTS.iter().any(|f| lower.contains(f))
            || SQUASHED.iter().any(|f| squashed.contains(f.as_str()))
            || words(name).any(|w| WORDS.contains(&w.as_str()))
            || self.extra.iter().any(|r| r.is_match(name))
    }

    /// Whether any segment of a field path (`spec.template.spec.containers[app].env[DB_PASS].value`,
    /// `data.tls.key`) names a credential. Under `data`/`stringData`/`binaryData` the
    /// rest of the path is one key (`tls.key`), looked at whole and without the
    /// reference exemption: the exemption is for fields that *name* a key of a Secret
    /// (`secretKeyRef.key`, a selector's `key`, `secretName`), which never sit
    /// directly under an object's top-level `data`, where `key` or `secrets` is a file.
    pub fn path(&self, path: &str) -> bool {
        for top in ["data.", "stringData.", "binaryData."] {
            if let Some(key) = path.strip_prefix(top)
                && self.names_one(key)
            {
                return true;
            }
        }
        path.split(['.', '[', ']']).filter(|s| !s.is_empty() && s.parse::<f64>().is_err()).any(|s| self.name(s))
    }

    /// Whether a list item is a command-line flag naming a credential (`--password`),
    /// whose value is then the next item.
    pub fn flag(&self, s: &str) -> bool {
        FLAG.captures(s).and_then(|c| c.get(1)).is_some_and(|f| self.name(f.as_str()))
    }

    /// Whether, in a list of command-line words, `next` following `flag` is (or holds) a
    /// credential: a credential flag's value (`--password`, `hunter2`), or `user:pass`
    /// after `-u`/`--user` (curl, wget, httpie).
    pub fn masks_next(&self, flag: &str, next: &str) -> bool {
        self.flag(flag) || (matches!(flag, "-u" | "--user" | "--proxy-user") && next.contains(':'))
    }

    /// `s` with its credentials masked, line by line and token by token
    /// (`drift::mask::text` says which shapes), then the operator's patterns.
    pub fn text<'s>(&self, s: &'s str) -> Cow<'s, str> {
        let mut out = match text::mask(self, s) {
            Some(masked) => Cow::Owned(masked),
            None => Cow::Borrowed(s),
        };
        for re in &self.extra {
            if re.is_match(&out) {
                out = Cow::Owned(re.replace_all(&out, MASKED).into_owned());
            }
        }
        out
    }

    /// Whether `v` holds a credential anywhere: a credential-like key or item name, a
    /// credential-shaped string, or a credential flag followed by its value in a list.
    pub fn holds_credential(&self, v: &Value) -> bool {
        let mut budget = MAX_NODES;
        self.holds(v, 0, &mut budget)
    }

    fn holds(&self, v: &Value, depth: usize, budget: &mut usize) -> bool {
        if *budget == 0 || depth > MAX_DEPTH {
            return true;
        }
        *budget -= 1;
        match v {
            Value::String(s) => matches!(self.text(s), Cow::Owned(_)),
            Value::Object(m) => m.iter().any(|(k, child)| {
                (self.name(k) && !matches!(child, Value::Bool(_) | Value::Null))
                    || (k == "name" && child.as_str().is_some_and(|n| self.name(n)) && m.len() > 1)
                    || self.holds(child, depth + 1, budget)
            }),
            Value::Array(items) => {
                items.iter().any(|i| self.holds(i, depth + 1, budget))
                    || items.windows(2).any(|w| match (w[0].as_str(), w[1].as_str()) {
                        (Some(f), Some(next)) => self.masks_next(f, next),
                        _ => false,
                    })
            }
            _ => false,
        }
    }

    /// How a value from the cluster is shown, at most `max` characters: whole-masked
    /// under a credential's name (`named`), a summary for an object or list that holds
    /// a credential, else its text (JSON for objects and lists) with credential-shaped
    /// parts masked. Masking happens before the cut, so a cut never exposes half a key.
    pub fn show(&self, v: &Value, named: bool, max: usize) -> String {
        match v {
            Value::Bool(b) => b.to_string(),
            Value::Null => "null".into(),
            Value::String(_) | Value::Number(_) if named => MASKED.into(),
            Value::String(s) => crate::text::clip(&self.text(s), max),
            Value::Number(n) => n.to_string(),
            Value::Object(_) | Value::Array(_) if named || self.holds_credential(v) => crate::text::clip(&summary(v), max),
            other => crate::text::clip(&other.to_string(), max),
        }
    }
}

/// Whether a value whose name is not known (an env list item addressed by its index in
/// a refused JSON patch) is harmless by its shape alone, and so shown: a placeholder
/// (empty, a boolean, `$(VAR)`, `{{ .x }}`), a short number with an optional unit
/// (`8080`, `30s`, `512Mi`, `0.5`) or a log level. Anything else is masked.
pub fn harmless(v: &str) -> bool {
    let digits = v.trim_end_matches(|c: char| c.is_ascii_alphabetic() || c == '%');
    let unit = &v[digits.len()..];
    text::placeholder(v)
        || (!digits.is_empty()
            && digits.len() <= 5
            && digits.chars().all(|c| c.is_ascii_digit() || c == '.')
            && matches!(unit, "" | "ms" | "s" | "m" | "h" | "d" | "%" | "k" | "M" | "G" | "Ki" | "Mi" | "Gi"))
        || matches!(v.to_ascii_lowercase().as_str(), "trace" | "debug" | "info" | "warn" | "warning" | "error" | "fatal")
}

/// What an object or list holding a credential shows instead of its JSON.
fn summary(v: &Value) -> String {
    match v {
        Value::Object(m) => {
            let keys: Vec<&str> = m.keys().map(String::as_str).take(8).collect();
            let more = if m.len() > keys.len() { ", …" } else { "" };
            format!("(masked: an object with {}{more})", keys.join(", "))
        }
        Value::Array(items) => format!("(masked: a list of {})", items.len()),
        _ => MASKED.into(),
    }
}

/// The words of a name: split at anything not alphanumeric and at camelCase humps,
/// lower-cased (`dbPassword` → db, password; `tls.key` → tls, key).
fn words(name: &str) -> impl Iterator<Item = String> + '_ {
    let mut out = Vec::new();
    let mut cur = String::new();
    let mut prev_lower = false;
    for c in name.chars() {
        if !c.is_ascii_alphanumeric() {
            if !cur.is_empty() {
                out.push(std::mem::take(&mut cur));
            }
            prev_lower = false;
            continue;
        }
        if c.is_ascii_uppercase() && prev_lower && !cur.is_empty() {
            out.push(std::mem::take(&mut cur));
        }
        prev_lower = c.is_ascii_lowercase() || c.is_ascii_digit();
        cur.push(c.to_ascii_lowercase());
    }
    if !cur.is_empty() {
        out.push(cur);
    }
    out.into_iter()
}

/// Why `diff.mask` patterns were refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct BadPattern(pub String);

impl From<BadPattern> for String {
    fn from(e: BadPattern) -> String {
        e.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn names_that_hold_credentials_and_names_that_only_refer_to_them() {
        let m = Masker::default();
        for n in [
            "DB_PASSWORD",
            "MYSQL_PWD",
            "PGPASS",
            "DB_PASS",
            "SENTRY_DSN",
            "SLACK_WEBHOOK_URL",
            "KEY",
            "API_KEY",
            "tls.key",
            "id_rsa",
            "dbPassword",
            "clientSecret",
            "AUTH_HEADER",
            "aws_secret_access_key",
            "private.pem",
        ] {
            assert!(m.name(n), "{n}");
        }
        for n in [
            "key",
            "secretKeyRef",
            "secretName",
            "automountServiceAccountToken",
            "MODE",
            "image",
            "replicas",
            "monkey",
            "keyboard",
            "sessionAffinity",
            "webhooks",
        ] {
            assert!(!m.name(n), "{n}");
        }
        assert!(m.path("data.tls.key"));
        assert!(m.path("spec.template.spec.containers[app].env[MYSQL_PWD].value"));
        assert!(!m.path("spec.template.spec.containers[app].env[MODE].value"));
    }

    #[test]
    fn credential_shaped_text_is_masked_in_place() {
        let m = Masker::default();
        let cases = [
            ("postgres://app:hunter2@db:5432/shop", "postgres://app:(masked)@db:5432/shop"),
            ("--api-key=hunter2", "--api-key=(masked)"),
            ("--db-password hunter2 --verbose", "--db-password (masked) --verbose"),
            (
                "spring.datasource.url=jdbc:x\nspring.datasource.password=hunter2\n",
                "spring.datasource.url=jdbc:x\nspring.datasource.password=(masked)\n",
            ),
            ("db:\n  password: hunter2\n", "db:\n  password: (masked)\n"),
            (r#"{"user":"a","password":"hunter2"}"#, r#"{"user":"a","password":"(masked)"}"#),
            ("curl -H 'X-Forward: Bearer abcdefghijklmnop'", "curl -H 'X-Forward: Bearer (masked)'"),
            ("Authorization: Basic dXNlcjpodW50ZXIy", "Authorization: (masked)"),
            ("https://x/cb?token=hunter2&x=1", "https://x/cb?token=(masked)&x=1"),
            ("AKIAABCDEFGHIJKLMNOP", "(masked)"),
        ];
        for (input, want) in cases {
            assert_eq!(m.text(input), want, "{input}");
        }
        let pem = "-----BEGIN RSA PRIVATE KEY-----\nMIIEow\n-----END RSA PRIVATE KEY-----\n";
        assert_eq!(m.text(pem), "(masked)\n");
        assert_eq!(m.text("eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiJhIn0.sig_nat-ure"), MASKED);
        for plain in ["shop:1.0", "replicas 5", "https://example.com/path", "mode=fast"] {
            assert_eq!(m.text(plain), plain);
        }
        let own = Masker::with_patterns(&["corp-[0-9]{6}".into()]).unwrap();
        assert_eq!(own.text("id corp-123456 here"), "id (masked) here");
        assert!(own.name("corp-000001"));
        assert!(Masker::with_patterns(&["(".into()]).is_err());
    }

    #[test]
    fn objects_and_lists_holding_a_credential_are_summarised() {
        let m = Masker::default();
        let env = json!({"name": "DB_PASSWORD", "value": "hunter2"});
        assert_eq!(m.show(&env, false, 120), "(masked: an object with name, value)");
        assert_eq!(m.show(&json!(["--db-password=hunter2"]), false, 120), "(masked: a list of 1)");
        assert_eq!(m.show(&json!(["--token", "hunter2"]), false, 120), "(masked: a list of 2)");
        assert_eq!(m.show(&json!([{"name": "MODE", "value": "a"}]), false, 120), r#"[{"name":"MODE","value":"a"}]"#);
        assert_eq!(m.show(&json!("hunter2"), true, 120), MASKED);
        assert_eq!(m.show(&json!(true), true, 120), "true");
        assert_eq!(m.show(&json!({"a": {"b": [{"c": "x://u:p@h"}]}}), false, 120), "(masked: an object with a)");
    }
}
