//! Credentials inside text: env files, properties, YAML and JSON held in ConfigMap
//! data, shell scripts and command lines, connection strings, registry and tool
//! configuration (`.dockerconfigjson`, `.npmrc`, `.pypirc`, `.netrc`), embedded keys
//! and tokens. The text is masked line by line and, within a line, token by token, so
//! that a changed line still shows with only its value masked (`DB_PASS=(masked)`) and
//! the harmless lines beside it (`LOG_LEVEL=debug`) show as they are.
//!
//! Hand-written rather than a secret scanner's crate: scanners answer "is there a
//! secret in this file" (and want to validate it against the provider), while this
//! has to keep everything but the value readable, know Kubernetes' own names (a
//! `secretKeyRef`'s `key` is no credential) and agree with the name rules used for
//! fields; the few crates that scan are large, unmaintained or bring a rule engine.
//!
//! The passes, in order, each seeing what the previous one left:
//! 1. PEM private key blocks (`-----BEGIN … PRIVATE KEY-----` to its END, or to the
//!    end of the text when cut short), across lines;
//! 2. per line: well-known token formats (AWS, GitHub, GitLab, Slack, Google, Stripe,
//!    npm, PyPI, SendGrid, OpenAI, JWTs), `Bearer`/`Basic`/`token` credentials, a URL's
//!    userinfo;
//! 3. per line: assignments whose key names a credential by the same rules as a field
//!    name (`DB_PASS=…`, `export API_TOKEN=…`, `password: …`, `"auth": "…"`,
//!    `Password=…;` in a connection string, `//registry/:_authToken=…`,
//!    `Authorization: …`), and a YAML block scalar under such a key (`key: |`) whole;
//! 4. per line: command-line forms (`--password x`, `-u user:pass`, `--user=u:p`,
//!    `mysql -pX`, `redis-cli -a X`, `.netrc`'s `password X`);
//! 5. per line: long high-entropy tokens (mixed case, changing character class often:
//!    random keys, not words, paths or hex digests).

use std::sync::LazyLock;

use regex::Regex;

use super::{MASKED, Masker};

/// A line longer than this is masked whole past the PEM pass: the token passes are
/// linear, but a megabyte on one line is no text a person reads, and nothing in it can
/// then leak.
const MAX_LINE: usize = 64 * 1024;
/// The shortest token the high-entropy pass looks at (a mixed-case one).
const MIN_ENTROPY_TOKEN: usize = 20;
/// From this length a token is also judged by its entropy.
const MIN_PLAIN_TOKEN: usize = 32;

struct Patterns {
    pem: Regex,
    /// An XML element's text (`<password>x</password>`, Maven's `settings.xml`).
    element: Regex,
    /// A `key="…" value="…"` pair (NuGet's `ClearTextPassword`, .NET `appSettings`).
    key_value: Regex,
    /// (pattern, replacement), per line.
    tokens: Vec<(Regex, &'static str)>,
}

static PATTERNS: LazyLock<Patterns> = LazyLock::new(|| {
    let r = |p: &str| Regex::new(p).unwrap_or_else(|e| unreachable!("built-in mask pattern {p}: {e}"));
    Patterns {
        pem: r(r"-----BEGIN[A-Z0-9 ]*PRIVATE KEY(?: BLOCK)?-----(?s:.*?)(?:-----END[A-Z0-9 ]*PRIVATE KEY(?: BLOCK)?-----|\z)"),
        element: r(r"<([A-Za-z0-9_.:\-]+)(?:\s[^>]*)?>([^<]+)</"),
        key_value: r(r#"(?i)\bkey\s*=\s*"([^"]*)"\s+value\s*=\s*"([^"]*)""#),
        tokens: vec![
            (r(r"\bAGE-SECRET-KEY-1[0-9A-Z]{20,}"), MASKED),
            // JWTs (and JWS/JWE-like dotted base64url).
            (r(r"\beyJ[A-Za-z0-9_\-]{4,}\.[A-Za-z0-9_\-]{4,}\.[A-Za-z0-9_\-]*"), MASKED),
            // Well-known token formats.
            (r(r"\b(?:AKIA|ASIA|AGPA|AIDA|AROA|ANPA)[A-Z0-9]{16}\b"), MASKED),
            (r(r"\b(?:gh[pousr]_[A-Za-z0-9]{30,}|github_pat_[A-Za-z0-9_]{30,})"), MASKED),
            (r(r"\bglpat-[A-Za-z0-9_\-]{20,}"), MASKED),
            (r(r"\bxox[abposre]-[A-Za-z0-9\-]{10,}"), MASKED),
            (r(r"\bxapp-[A-Za-z0-9\-]{10,}"), MASKED),
            (r(r"hooks\.slack\.com/services/[A-Za-z0-9/_\-]+"), "hooks.slack.com/services/(masked)"),
            (r(r"\bAIza[0-9A-Za-z_\-]{35}"), MASKED),
            (r(r"\b[sr]k_(?:live|test)_[A-Za-z0-9]{16,}"), MASKED),
            (r(r"\bsk-(?:proj-|ant-)?[A-Za-z0-9_\-]{20,}"), MASKED),
            (r(r"\bnpm_[A-Za-z0-9]{30,}"), MASKED),
            (r(r"\bpypi-[A-Za-z0-9_\-]{40,}"), MASKED),
            (r(r"\bSG\.[A-Za-z0-9_\-]{16,}\.[A-Za-z0-9_\-]{16,}"), MASKED),
            (r(r"\bdop_v1_[a-f0-9]{40,}"), MASKED),
            // Authorization schemes' credentials (`Bearer x`, `Basic x`, `token x`).
            (r(r"(?i)\b(bearer|basic|token|digest|negotiate)(\s+)[A-Za-z0-9\-._~+/]{8,}=*"), "${1}${2}(masked)"),
            // A URL's userinfo: the user stays, the password goes (`redis://:p@h` too);
            // greedy to the last `@` of the word, so a password holding `@` goes whole.
            (r(r"(?i)\b([a-z][a-z0-9+.\-]*://[^/\s:@]*):[^\s/]*@"), "${1}:(masked)@"),
            // A user-only userinfo that is a token (`https://<token>@sentry.io/1`).
            (r(r"(?i)\b([a-z][a-z0-9+.\-]*://)[A-Za-z0-9_\-]{16,}@"), "${1}(masked)@"),
        ],
    }
});

/// `s` with its credentials masked; `None` when nothing was.
pub(super) fn mask(m: &Masker, s: &str) -> Option<String> {
    let pem = PATTERNS.pem.replace_all(s, MASKED);
    let mut out = String::with_capacity(s.len());
    let mut block: Option<usize> = None;
    for raw in pem.split_inclusive('\n') {
        let (body, end) = match raw.strip_suffix('\n') {
            Some(b) => b.strip_suffix('\r').map_or((b, "\n"), |c| (c, "\r\n")),
            None => (raw, ""),
        };
        let indent = body.len() - body.trim_start().len();
        // The lines of a block scalar under a credential's key (`password: |`).
        if let Some(key_indent) = block {
            if body.trim().is_empty() || indent > key_indent {
                if !body.trim().is_empty() {
                    out.push_str(&body[..indent]);
                    out.push_str(MASKED);
                }
                out.push_str(end);
                continue;
            }
            block = None;
        }
        if body.len() > MAX_LINE {
            out.push_str(MASKED);
            out.push_str(end);
            continue;
        }
        let (line, opens_block) = self::line(m, body);
        if opens_block {
            block = Some(indent);
        }
        out.push_str(&line);
        out.push_str(end);
    }
    (out != s).then_some(out)
}

/// One line masked; whether it opens a block scalar under a credential's key.
fn line(m: &Masker, body: &str) -> (String, bool) {
    let mut l = body.to_string();
    for (re, with) in &PATTERNS.tokens {
        if re.is_match(&l) {
            l = re.replace_all(&l, *with).into_owned();
        }
    }
    l = markup(m, &l);
    let (mut l, opens_block) = assignments(m, &l);
    l = flags(m, &l);
    l = high_entropy(&l);
    (l, opens_block)
}

/// Masks XML elements and `key="…" value="…"` pairs whose name names a credential.
fn markup(m: &Masker, l: &str) -> String {
    let mut spans = Vec::new();
    for re in [&PATTERNS.element, &PATTERNS.key_value] {
        for c in re.captures_iter(l) {
            if let (Some(name), Some(value)) = (c.get(1), c.get(2))
                && m.name(name.as_str())
                && !placeholder(value.as_str())
            {
                spans.push((value.start(), value.end()));
            }
        }
    }
    spans.sort_unstable();
    replace_spans(l, &spans)
}

/// Whether a value is harmless by its shape alone: empty, already masked, a boolean, a
/// reference to a variable or template (`$DB_PASS`, `${X}`, `$(X)`, `{{ .x }}`).
pub(super) fn placeholder(v: &str) -> bool {
    let v = v.trim().trim_matches(|c| c == '"' || c == '\'');
    let lower = v.to_ascii_lowercase();
    v.is_empty()
        || v == MASKED
        || matches!(lower.as_str(), "true" | "false" | "yes" | "no" | "on" | "off" | "null" | "~")
        || (v.starts_with('$') && v[1..].chars().all(|c| c.is_ascii_alphanumeric() || "_{}()".contains(c)))
        || (v.starts_with("{{") && v.ends_with("}}"))
}

/// Characters of an assignment's key (`DB_PASS`, `spring.datasource.password`,
/// `--db-password`, `_authToken`).
fn key_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '-' | '@' | '[' | ']')
}

/// Masks the values of `key=value`, `key: value` and `"key": "value"` assignments whose
/// key names a credential; whether the line ends in a block scalar under such a key.
fn assignments(m: &Masker, l: &str) -> (String, bool) {
    let b = l.as_bytes();
    let mut out = String::with_capacity(l.len());
    let mut copied = 0;
    let mut i = 0;
    let mut block = false;
    while i < b.len() {
        let c = b[i];
        if c != b'=' && c != b':' {
            i += 1;
            continue;
        }
        let Some((key, quote)) = key_before(l, i) else {
            i += 1;
            continue;
        };
        // `:` separates only before a blank, a quote or the end (not `host:port`,
        // `https://`, `user:pass`), or after a quoted key (`{"password":"x"}`).
        let next = b.get(i + 1).copied();
        if c == b':' && quote.is_none() && !matches!(next, None | Some(b' ' | b'\t' | b'"' | b'\'')) {
            i += 1;
            continue;
        }
        if (c == b'=' && matches!(next, Some(b'=' | b'>' | b'~'))) || (i > 0 && matches!(b[i - 1], b'!' | b'<' | b'>' | b'=')) {
            i += 1;
            continue;
        }
        if !m.name(key.trim_start_matches('-')) {
            i += 1;
            continue;
        }
        let spaced = (i > 0 && matches!(b[i - 1], b' ' | b'\t')) || matches!(next, Some(b' ' | b'\t'));
        let (start, end) = value_span(l, i + 1, c == b':' || spaced, opener(l, i, key.len(), quote));
        let value = &l[start..end];
        let scalar = value.trim();
        if start < end && (scalar.starts_with('|') || scalar.starts_with('>')) && scalar.len() <= 3 && end == l.trim_end().len() {
            block = true;
        } else if start < end && !placeholder(value) && !value.starts_with(['{', '[']) {
            out.push_str(&l[copied..start]);
            out.push_str(MASKED);
            copied = end;
        }
        i = end.max(i + 1);
    }
    out.push_str(&l[copied..]);
    (out, block)
}

/// The key that ends just before the separator at `sep` (blanks between allowed), and
/// the quote it is wrapped in, if any.
fn key_before(l: &str, sep: usize) -> Option<(&str, Option<char>)> {
    let head = l[..sep].trim_end_matches([' ', '\t']);
    if let Some(q) = head.chars().last().filter(|c| *c == '"' || *c == '\'') {
        let inner = &head[..head.len() - 1];
        let open = inner.rfind(q)?;
        let key = &inner[open + 1..];
        return (!key.is_empty() && key.len() <= 256).then_some((key, Some(q)));
    }
    let start = head.char_indices().rev().take_while(|(_, c)| key_char(*c)).last().map(|(i, _)| i)?;
    let key = &head[start..];
    (!key.is_empty() && key.len() <= 256).then_some((key, None))
}

/// The quote that opened the context the key sits in (`'Authorization: Bearer x'`,
/// `"X-Token: abc"`), whose close then ends the value: the character before the key.
fn opener(l: &str, sep: usize, key_len: usize, quote: Option<char>) -> Option<char> {
    let head = l[..sep].trim_end_matches([' ', '\t']);
    let key_start = head.len().checked_sub(key_len + quote.map_or(0, |_| 2))?;
    if quote.is_some() {
        return None;
    }
    head[..key_start].chars().last().filter(|c| *c == '"' || *c == '\'')
}

/// Where the value after a separator lies: a quoted value inside its quotes; with
/// `to_end` (YAML, headers, `key = value` properties) to the end of the line or the
/// quote that opened the context; else a word, which runs to `;` when one follows (a
/// connection string's `Password=p w;`).
fn value_span(l: &str, from: usize, to_end: bool, opened: Option<char>) -> (usize, usize) {
    let rest = &l[from..];
    let lead = rest.len() - rest.trim_start_matches([' ', '\t']).len();
    let start = from + lead;
    let v = &l[start..];
    if let Some(q) = v.chars().next().filter(|c| *c == '"' || *c == '\'') {
        let inner = &v[1..];
        let len = closing(inner, q).unwrap_or(inner.len());
        return (start + 1, start + 1 + len);
    }
    if let Some(q) = opened {
        let len = v.find(q).unwrap_or(v.len());
        return (start, start + v[..len].trim_end().len());
    }
    if to_end {
        let t = v.trim_end();
        let t = t.strip_suffix(',').unwrap_or(t);
        return (start, start + t.len());
    }
    let semi = v.find(';').filter(|s| !v[..*s].contains('='));
    let stop =
        |c: char| matches!(c, '&' | '"' | '\'' | '`' | ',' | ')' | '}' | ']' | '>' | '|' | ';') || (semi.is_none() && c.is_whitespace());
    let len = v.find(stop).unwrap_or(v.len());
    (start, start + len)
}

/// The length of a quoted string's inside up to its closing quote `q` (a backslash
/// escapes), if it closes.
fn closing(inner: &str, q: char) -> Option<usize> {
    let mut escaped = false;
    for (i, c) in inner.char_indices() {
        match c {
            '\\' if !escaped => escaped = true,
            c if c == q && !escaped => return Some(i),
            _ => escaped = false,
        }
    }
    None
}

/// A line's words with their byte ranges; a quoted word runs to its closing quote.
fn words(l: &str) -> Vec<(usize, usize)> {
    let mut out = Vec::new();
    let mut it = l.char_indices().peekable();
    while let Some(&(i, c)) = it.peek() {
        if c.is_whitespace() {
            it.next();
            continue;
        }
        let mut end = i;
        let mut quote: Option<char> = None;
        while let Some(&(j, d)) = it.peek() {
            match quote {
                Some(q) if d == q => quote = None,
                Some(_) => {}
                None if d == '"' || d == '\'' => quote = Some(d),
                None if d.is_whitespace() => break,
                None => {}
            }
            end = j + d.len_utf8();
            it.next();
        }
        out.push((i, end));
    }
    out
}

/// What a command-line word means for the word after it.
enum Next {
    Plain,
    /// The next word is a credential (`--password x`, `password x` in `.netrc`).
    Secret,
    /// The next word is `user:password` (`-u`, `--user`).
    UserPass,
}

/// Masks command-line credentials: a credential flag's next word, `-u`/`--user`'s
/// password, a tool's own password flag (`mysql -pX`, `redis-cli -a X`,
/// `sshpass -p X`), `.netrc`'s `password X`.
fn flags(m: &Masker, l: &str) -> String {
    let ws = words(l);
    let lower = l.to_ascii_lowercase();
    let tool = |t: &str| lower.split(|c: char| !c.is_ascii_alphanumeric() && c != '-').any(|w| w == t);
    let (mysql, redis, sshpass) = (tool("mysql") || tool("mysqldump") || tool("mysqladmin"), tool("redis-cli"), tool("sshpass"));
    let mut spans: Vec<(usize, usize)> = Vec::new();
    let mut next = Next::Plain;
    for &(s, e) in &ws {
        let w = &l[s..e];
        let bare = w.trim_matches(|c| c == '"' || c == '\'');
        let inner = s + (w.len() - w.trim_start_matches(['"', '\'']).len());
        match std::mem::replace(&mut next, Next::Plain) {
            // `password = x` is an assignment, masked already.
            Next::Secret if !bare.starts_with('-') && !placeholder(bare) && !matches!(bare, "=" | ":") => {
                spans.push((inner, inner + bare.len()))
            }
            Next::UserPass => {
                if let Some(c) = bare.find(':') {
                    spans.push((inner + c + 1, inner + bare.len()));
                }
            }
            _ => {}
        }
        let flag = bare.strip_prefix("--").or_else(|| bare.strip_prefix('-'));
        match flag {
            Some(f) if mysql && bare.starts_with("-p") && f.len() > 1 => spans.push((inner + 2, inner + bare.len())),
            Some(f) if !f.contains('=') && matches!(f, "u" | "user" | "proxy-user") => next = Next::UserPass,
            Some(f) if !f.contains('=') && f.len() > 1 && m.name(f) => next = Next::Secret,
            Some(f) if f.starts_with("user=") || f.starts_with("proxy-user=") => {
                if let Some(c) = bare.find(':') {
                    spans.push((inner + c + 1, inner + bare.len()));
                }
            }
            Some(f) if f.len() > 1 && f.starts_with('u') && !f.starts_with("us") && bare.starts_with("-u") && f.contains(':') => {
                let c = bare.find(':').unwrap_or(bare.len());
                spans.push((inner + c + 1, inner + bare.len()));
            }
            Some("a") if redis => next = Next::Secret,
            Some("p") if sshpass => next = Next::Secret,
            None if matches!(bare.to_ascii_lowercase().as_str(), "password" | "passwd" | "passphrase") => next = Next::Secret,
            _ => {}
        }
    }
    replace_spans(l, &spans)
}

/// `l` with each (start, end) byte range, in order, replaced by `(masked)` (empty and
/// already masked ranges left).
fn replace_spans(l: &str, spans: &[(usize, usize)]) -> String {
    let mut out = String::with_capacity(l.len());
    let mut copied = 0;
    for &(s, e) in spans {
        if s < copied || s >= e || e > l.len() || &l[s..e] == MASKED {
            continue;
        }
        out.push_str(&l[copied..s]);
        out.push_str(MASKED);
        copied = e;
    }
    out.push_str(&l[copied..]);
    out
}

/// Characters of a token the high-entropy pass looks at (base64, base64url; not `=`,
/// which ends a key and only pads base64).
fn token_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || matches!(c, '+' | '/' | '_' | '-')
}

/// Masks long tokens that look random: a key, not a word, a path or a digest. Commit
/// SHAs and image digests (hex) and names (`payments-api-7d9f8`) stay readable.
fn high_entropy(l: &str) -> String {
    let mut spans = Vec::new();
    let mut start = None;
    for (i, c) in l.char_indices().chain(std::iter::once((l.len(), ' '))) {
        match (token_char(c), start) {
            (true, None) => start = Some(i),
            (false, Some(s)) => {
                if random(&l[s..i]) {
                    spans.push((s, i));
                }
                start = None;
            }
            _ => {}
        }
    }
    replace_spans(l, &spans)
}

/// Whether a token looks random: of mixed case, not all hex, and either its letters and
/// digits change class (upper, lower, digit) at least every third character or, from
/// [`MIN_PLAIN_TOKEN`] characters, their distribution is near uniform. Random base62
/// changes class at ~62% of its characters and has ~4.7 bits a character at 40; words,
/// identifiers and paths change at ~20-30% and have ~4 bits. Lowercase or hex tokens
/// (names with a hash, UUIDs, digests) are left to the key and flag rules.
fn random(t: &str) -> bool {
    let alnum: Vec<u8> = t.bytes().filter(u8::is_ascii_alphanumeric).collect();
    let mixed = alnum.iter().any(u8::is_ascii_uppercase) && alnum.iter().any(u8::is_ascii_lowercase);
    if !mixed || alnum.len() < MIN_ENTROPY_TOKEN || alnum.iter().all(u8::is_ascii_hexdigit) {
        return false;
    }
    let class = |c: &u8| {
        if c.is_ascii_uppercase() {
            0
        } else if c.is_ascii_lowercase() {
            1
        } else {
            2
        }
    };
    let changes = alnum.windows(2).filter(|w| class(&w[0]) != class(&w[1])).count();
    changes * 100 >= (alnum.len() - 1) * 35 || (alnum.len() >= MIN_PLAIN_TOKEN && entropy(&alnum) >= 4.3)
}

/// Shannon entropy of the bytes, in bits a byte.
fn entropy(bytes: &[u8]) -> f64 {
    let mut counts = [0u32; 256];
    for b in bytes {
        counts[usize::from(*b)] += 1;
    }
    let n = bytes.len() as f64;
    counts.iter().filter(|c| **c > 0).map(|c| f64::from(*c) / n).map(|p| -p * p.log2()).sum()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn masked(s: &str) -> String {
        mask(&Masker::default(), s).unwrap_or_else(|| s.to_string())
    }

    #[test]
    fn env_files_and_scripts_are_masked_line_by_line() {
        let cases = [
            ("LOG_LEVEL=debug\nDB_PASS=hunter2\n", "LOG_LEVEL=debug\nDB_PASS=(masked)\n"),
            ("export API_TOKEN=\"abc def\"\n", "export API_TOKEN=\"(masked)\"\n"),
            ("MYSQL_PWD='x'; run\n", "MYSQL_PWD='(masked)'; run\n"),
            ("curl -u deploy:hunter2 https://x\n", "curl -u deploy:(masked) https://x\n"),
            ("curl --user=deploy:hunter2 https://x", "curl --user=deploy:(masked) https://x"),
            ("curl -H 'Authorization: token hunter2abc' x", "curl -H 'Authorization: (masked)' x"),
            ("psql postgres://app:hunter2@db/shop", "psql postgres://app:(masked)@db/shop"),
            ("mongodb+srv://u:p%40ss@c.mongodb.net/x", "mongodb+srv://u:(masked)@c.mongodb.net/x"),
            ("redis://:hunter2@cache:6379/0", "redis://:(masked)@cache:6379/0"),
            ("Server=db;User Id=sa;Password=p w;Encrypt=true", "Server=db;User Id=sa;Password=(masked);Encrypt=true"),
            ("jdbc:sqlserver://h:1433;user=sa;password=hunter2", "jdbc:sqlserver://h:1433;user=sa;password=(masked)"),
            ("//registry.npmjs.org/:_authToken=npm_abc", "//registry.npmjs.org/:_authToken=(masked)"),
            (r#"{"auths":{"r.io":{"auth":"ZGVwbG95Omh1bnRlcjI="}}}"#, r#"{"auths":{"r.io":{"auth":"(masked)"}}}"#),
            ("[pypi]\nusername = __token__\npassword = pypi-abc\n", "[pypi]\nusername = __token__\npassword = (masked)\n"),
            ("machine h login u password hunter2", "machine h login u password (masked)"),
            ("mysql -uroot -phunter2 shop", "mysql -uroot -p(masked) shop"),
            ("redis-cli -a hunter2 ping", "redis-cli -a (masked) ping"),
            ("app --client-secret hunter2 --verbose", "app --client-secret (masked) --verbose"),
            ("db:\n  password: |\n    hunter2\n    more\n  host: x\n", "db:\n  password: |\n    (masked)\n    (masked)\n  host: x\n"),
            ("aws_secret_access_key = wJalrXUtnFEMI/K7MDENG", "aws_secret_access_key = (masked)"),
            ("x 9fK2mQ7vLp3XzR8tW1nB6yC4hJ0dS5gA y", "x (masked) y"),
            ("<server><id>r</id><password>hunter2</password></server>", "<server><id>r</id><password>(masked)</password></server>"),
            (r#"<add key="ClearTextPassword" value="hunter2" />"#, r#"<add key="ClearTextPassword" value="(masked)" />"#),
            ("https://b.s3.amazonaws.com/k?X-Amz-Signature=0a1b2c3d", "https://b.s3.amazonaws.com/k?X-Amz-Signature=(masked)"),
        ];
        for (input, want) in cases {
            assert_eq!(masked(input), want, "{input}");
        }
    }

    #[test]
    fn harmless_text_is_left_as_it_is() {
        for plain in [
            "LOG_LEVEL=debug",
            "image: registry.example.com/team/app:1.2.3",
            "image@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef",
            "commit 1a2b3c4d5e6f7a8b9c0d1e2f3a4b5c6d7e8f9a0b",
            "path /Users/Alice2/Library/Keychains/login",
            "ConfigurationManagerFactory2Builder",
            "https://example.com:8443/path?mode=fast",
            "key: app.kubernetes.io/name",
            "secretName: tls-cert",
            "PASSWORD_MIN_LENGTH_ENABLED=true",
            "DB_PASS=${DB_PASS}",
            "if [ \"$a\" == \"$b\" ]; then echo ok; fi",
            "curl -u deploy https://x",
            "ssh://git@github.com/org/repo",
            "payments-api-7d9f8c6b5-x2k4q",
        ] {
            assert_eq!(masked(plain), plain);
        }
    }
}
