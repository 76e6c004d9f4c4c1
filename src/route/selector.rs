//! Kubernetes label selectors in their string form (`env=prod,tier in (web,api),!canary`),
//! as used by config-level subscriptions.

use std::collections::BTreeMap;

#[derive(Debug, Clone, PartialEq, Eq)]
enum Requirement {
    Equals(String, String),
    NotEquals(String, String),
    In(String, Vec<String>),
    NotIn(String, Vec<String>),
    Exists(String),
    NotExists(String),
}

/// A parsed label selector. The empty selector matches everything.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Selector {
    requirements: Vec<Requirement>,
}

fn valid_key(k: &str) -> bool {
    !k.is_empty() && k.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.' | '/'))
}

fn valid_value(v: &str) -> bool {
    v.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
}

/// Splits on commas that are not inside parentheses.
fn split_top_level(s: &str) -> Result<Vec<&str>, String> {
    let mut parts = Vec::new();
    let (mut depth, mut start) = (0i32, 0);
    for (i, c) in s.char_indices() {
        match c {
            '(' => depth += 1,
            ')' => {
                depth -= 1;
                if depth < 0 {
                    return Err("unbalanced ')'".into());
                }
            }
            ',' if depth == 0 => {
                parts.push(&s[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    if depth != 0 {
        return Err("unbalanced '('".into());
    }
    parts.push(&s[start..]);
    Ok(parts)
}

fn parse_set(key: &str, rest: &str) -> Result<Vec<String>, String> {
    let rest = rest.trim();
    let inner = rest.strip_prefix('(').and_then(|r| r.strip_suffix(')')).ok_or_else(|| format!("expected (values) after {key:?}"))?;
    let values: Vec<String> = inner.split(',').map(|v| v.trim().to_string()).collect();
    if let Some(bad) = values.iter().find(|v| !valid_value(v)) {
        return Err(format!("invalid label value {bad:?}"));
    }
    Ok(values)
}

/// A label selector that does not parse, with the reason (Kubernetes' syntax).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct SelectorError(pub String);

impl Selector {
    pub fn parse(s: &str) -> Result<Selector, SelectorError> {
        Selector::parse_text(s).map_err(SelectorError)
    }

    fn parse_text(s: &str) -> Result<Selector, String> {
        let mut requirements = Vec::new();
        if s.trim().is_empty() {
            return Ok(Selector { requirements });
        }
        for part in split_top_level(s)? {
            let part = part.trim();
            let req = if let Some(key) = part.strip_prefix('!') {
                Requirement::NotExists(key.trim().to_string())
            } else if let Some((k, v)) = part.split_once("!=") {
                Requirement::NotEquals(k.trim().into(), v.trim().into())
            } else if let Some((k, v)) = part.split_once("==").or_else(|| part.split_once('=')) {
                Requirement::Equals(k.trim().into(), v.trim().into())
            } else if let Some((k, rest)) = part.split_once(" notin ") {
                Requirement::NotIn(k.trim().into(), parse_set(k, rest)?)
            } else if let Some((k, rest)) = part.split_once(" in ") {
                Requirement::In(k.trim().into(), parse_set(k, rest)?)
            } else {
                Requirement::Exists(part.to_string())
            };
            let (key, value) = match &req {
                Requirement::Equals(k, v) | Requirement::NotEquals(k, v) => (k, Some(v)),
                Requirement::In(k, _) | Requirement::NotIn(k, _) | Requirement::Exists(k) | Requirement::NotExists(k) => (k, None),
            };
            if !valid_key(key) {
                return Err(format!("invalid label key {key:?} in selector {s:?}"));
            }
            if let Some(v) = value
                && !valid_value(v)
            {
                return Err(format!("invalid label value {v:?} in selector {s:?}"));
            }
            requirements.push(req);
        }
        Ok(Selector { requirements })
    }

    pub fn matches(&self, labels: &BTreeMap<String, String>) -> bool {
        self.requirements.iter().all(|r| match r {
            Requirement::Equals(k, v) => labels.get(k) == Some(v),
            Requirement::NotEquals(k, v) => labels.get(k) != Some(v),
            Requirement::In(k, vs) => labels.get(k).is_some_and(|l| vs.contains(l)),
            Requirement::NotIn(k, vs) => labels.get(k).is_none_or(|l| !vs.contains(l)),
            Requirement::Exists(k) => labels.contains_key(k),
            Requirement::NotExists(k) => !labels.contains_key(k),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
    }

    #[test]
    fn selector_table() {
        let l = labels(&[("env", "prod"), ("tier", "web")]);
        for (sel, want) in [
            ("", true),
            ("env=prod", true),
            ("env==prod", true),
            ("env=dev", false),
            ("env!=dev", true),
            ("env=prod,tier=web", true),
            ("env=prod,tier=api", false),
            ("tier in (web, api)", true),
            ("tier notin (web)", false),
            ("missing notin (x)", true),
            ("env", true),
            ("!env", false),
            ("!canary", true),
        ] {
            assert_eq!(Selector::parse(sel).unwrap().matches(&l), want, "{sel}");
        }
    }

    #[test]
    fn bad_selectors_are_errors() {
        for bad in ["env=(x", "tier in web", "=x", "a b=c"] {
            assert!(Selector::parse(bad).is_err(), "{bad}");
        }
    }
}
