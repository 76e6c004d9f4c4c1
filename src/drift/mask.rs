//! Credential masking, by name and by shape, for every value driftwatch shows from a
//! cluster: the value diff (Git and live side), what an audited request set, and so
//! chat, pages, SIEM records, `/history`, `/ui` and the CLI, which all print those.
//!
//! - **By name**: a field, env var, list item or ConfigMap key whose name looks like a
//!   credential (`DB_PASSWORD`, `MYSQL_PWD`, `SENTRY_DSN`, `tls.key`, `KEY`, …) has its
//!   value masked whole. Kubernetes fields that only *name* a secret (`secretKeyRef`,
//!   `secretName`, a selector's `key`, …) are not credentials and stay readable.
//! - **By shape**: wherever a string sits, credential-shaped parts of it are masked in
//!   place: the password in a URL's userinfo (`postgres://app:(masked)@db`),
//!   `--password=`-style flags (and `--token x`), `password=` / `password:` /
//!   `"password": …` lines inside properties, ini, YAML or JSON text, `Bearer`/`Basic`
//!   credentials, JWTs, PEM private keys and well-known token formats (AWS access
//!   keys, GitHub, Slack, Google, Stripe), and whatever the operator adds (`diff.mask`).
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
const WORDS: &[&str] =
    &["pwd", "pass", "pw", "key", "dsn", "auth", "private", "cert", "pem", "p12", "pfx", "jks", "cookie", "webhook", "salt", "otp"];
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

/// The name words a credential-shaped `key=value` carries.
const KEY_WORDS: &str =
    r"(?:password|passwd|pwd|passphrase|secret|token|api[_.\-]?key|access[_.\-]?key|private[_.\-]?key|credentials?|authorization|auth)";

struct Shapes {
    /// (pattern, replacement) in order.
    replace: Vec<(Regex, &'static str)>,
    /// A command-line flag naming a credential, whose value is the next list item.
    flag: Regex,
}

static SHAPES: LazyLock<Shapes> = LazyLock::new(|| {
    let r = |p: &str| Regex::new(p).unwrap_or_else(|e| unreachable!("built-in mask pattern {p}: {e}"));
    Shapes {
        replace: vec![
            // PEM private keys (also one cut short: to the end of the text).
            (r(r"-----BEGIN[A-Z0-9 ]*PRIVATE KEY-----(?s:.*?)(?:-----END[A-Z0-9 ]*PRIVATE KEY-----|\z)"), MASKED),
            // userinfo in a URL or DSN: keep the user, mask the password.
            (r(r"(?i)\b([a-z][a-z0-9+.\-]*://[^/\s:@]*):[^@\s/]+@"), "${1}:(masked)@"),
            // Authorization header credentials.
            (r(r"(?i)\b(bearer|basic|token)(\s+)[A-Za-z0-9\-._~+/]{8,}=*"), "${1}${2}(masked)"),
            // JWTs.
            (r(r"\beyJ[A-Za-z0-9_\-]{4,}\.[A-Za-z0-9_\-]{4,}\.[A-Za-z0-9_\-]*"), MASKED),
            // Well-known token formats.
            (r(r"\b(?:AKIA|ASIA)[A-Z0-9]{16}\b"), MASKED),
            (r(r"\b(?:gh[pousr]_[A-Za-z0-9]{30,}|github_pat_[A-Za-z0-9_]{30,})"), MASKED),
            (r(r"\bxox[abposr]-[A-Za-z0-9\-]{10,}"), MASKED),
            (r(r"hooks\.slack\.com/services/[A-Za-z0-9/_\-]+"), "hooks.slack.com/services/(masked)"),
            (r(r"\bAIza[0-9A-Za-z_\-]{35}"), MASKED),
            (r(r"\b[sr]k_(?:live|test)_[A-Za-z0-9]{16,}"), MASKED),
            // key=value / key: value / "key": "value" / --flag=value / ?key=value&.
            (
                r(&format!(
                    r#"(?i)((?:^|[\s;,&?{{("'])-{{0,2}}[A-Za-z0-9_.\-]*{KEY_WORDS}[A-Za-z0-9_.\-]*["']?\s*[:=]\s*)(["']?)[^\s"',;&}}]+"#
                )),
                "${1}${2}(masked)",
            ),
            // --password hunter2
            (r(&format!(r"(?i)((?:^|\s)--?[A-Za-z0-9_\-]*{KEY_WORDS}[A-Za-z0-9_\-]*\s+)[^\s\-]\S*")), "${1}(masked)"),
        ],
        flag: r(&format!(r"(?i)^--?[A-Za-z0-9_\-]*{KEY_WORDS}[A-Za-z0-9_\-]*$")),
    }
});

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
    pub fn with_patterns(patterns: &[String]) -> Result<Masker, String> {
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
        if REFERENCES.contains(&name) {
            return false;
        }
        let lower = name.to_ascii_lowercase();
        let squashed: String = lower.chars().filter(char::is_ascii_alphanumeric).collect();
        FRAGMENTS.iter().any(|f| lower.contains(f))
            || SQUASHED.iter().any(|f| squashed.contains(f.as_str()))
            || words(name).any(|w| WORDS.contains(&w.as_str()))
            || self.extra.iter().any(|r| r.is_match(name))
    }

    /// Whether any segment of a field path (`spec.template.spec.containers[app].env[DB_PASS].value`,
    /// `data.tls.key`) names a credential. Under `data`/`stringData`/`binaryData` the
    /// rest of the path is one key (`tls.key`), looked at whole.
    pub fn path(&self, path: &str) -> bool {
        for top in ["data.", "stringData.", "binaryData."] {
            if let Some(key) = path.strip_prefix(top)
                && self.name(key)
            {
                return true;
            }
        }
        path.split(['.', '[', ']']).filter(|s| !s.is_empty() && s.parse::<f64>().is_err()).any(|s| self.name(s))
    }

    /// Whether a list item is a command-line flag naming a credential (`--password`),
    /// whose value is then the next item.
    pub fn flag(&self, s: &str) -> bool {
        SHAPES.flag.is_match(s)
    }

    /// `s` with its credential-shaped parts masked.
    pub fn text<'s>(&self, s: &'s str) -> Cow<'s, str> {
        let mut out = Cow::Borrowed(s);
        for (re, with) in &SHAPES.replace {
            if re.is_match(&out) {
                out = Cow::Owned(re.replace_all(&out, *with).into_owned());
            }
        }
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
                    || items.windows(2).any(|w| w[0].as_str().is_some_and(|f| self.flag(f)) && w[1].is_string())
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
            ("Authorization: Basic dXNlcjpodW50ZXIy", "Authorization: (masked) (masked)"),
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
