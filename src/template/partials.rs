//! Checks the partials (`{{> name}}`) the compiled templates use, at load time: each
//! must name a template field by a literal name (`other-template/message`), no chain of
//! partials may come back to where it started, and none may be deeper than
//! [`MAX_DEPTH`]. handlebars renders partials by recursion with no limit of its own: a
//! template that includes another that includes the first overflowed the stack at the
//! first render. Decorators (`{{*inline}}` and the like, which define partials
//! inside a template) are refused for the same reason.

use std::collections::{BTreeMap, BTreeSet};

use handlebars::template::{Template, TemplateElement};

/// Longest chain of partials a template may render through.
pub const MAX_DEPTH: usize = 8;

/// What is wrong with one registered template's partials.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PartialError {
    /// The registered template (`name/field`) whose text is at fault.
    pub template: String,
    pub message: String,
}

/// The partials `t` refers to, by name; `Err` for a decorator or a partial whose name is
/// not a literal.
fn references(t: &Template, out: &mut BTreeSet<String>) -> Result<(), String> {
    for e in &t.elements {
        match e {
            TemplateElement::PartialExpression(d) | TemplateElement::PartialBlock(d) => {
                match d.name.as_name() {
                    Some(n) if !n.is_empty() => {
                        out.insert(n.to_string());
                    }
                    _ => return Err("a partial's name must be written out ({{> template/field}})".into()),
                }
                if let Some(inner) = &d.template {
                    references(inner, out)?;
                }
            }
            TemplateElement::DecoratorExpression(_) | TemplateElement::DecoratorBlock(_) => {
                return Err("decorators ({{* ...}}, {{#* inline}}) are not supported".into());
            }
            TemplateElement::HelperBlock(h) => {
                for inner in h.template.iter().chain(h.inverse.iter()) {
                    references(inner, out)?;
                }
            }
            TemplateElement::RawString(_)
            | TemplateElement::HtmlExpression(_)
            | TemplateElement::Expression(_)
            | TemplateElement::Comment(_) => {}
            // An element a later handlebars adds: refused until it is known to be safe.
            _ => return Err("a template construct this version does not check".into()),
        }
    }
    Ok(())
}

/// Checks every registered template's partials: unknown names, cycles, chains deeper
/// than [`MAX_DEPTH`]. One error per template at fault.
pub fn check<'a>(templates: impl IntoIterator<Item = (&'a String, &'a Template)>) -> Vec<PartialError> {
    let mut graph: BTreeMap<&str, BTreeSet<String>> = BTreeMap::new();
    let mut errors = Vec::new();
    for (name, t) in templates {
        let mut refs = BTreeSet::new();
        match references(t, &mut refs) {
            Ok(()) => {
                graph.insert(name, refs);
            }
            Err(message) => errors.push(PartialError { template: name.clone(), message }),
        }
    }
    for (name, refs) in &graph {
        for r in refs {
            if !graph.contains_key(r.as_str()) && !errors.iter().any(|e| e.template == *r) {
                errors.push(PartialError { template: name.to_string(), message: format!("partial {r:?} is not a template field") });
            }
        }
    }
    // Depth-first from each template, bounded by MAX_DEPTH + 1 steps: the graph is at
    // most a few hundred fields, so this is cheap at load time.
    for start in graph.keys() {
        let mut path = vec![*start];
        if let Some(message) = walk(&graph, &mut path) {
            errors.push(PartialError { template: start.to_string(), message });
        }
    }
    errors
}

fn walk<'a>(graph: &'a BTreeMap<&'a str, BTreeSet<String>>, path: &mut Vec<&'a str>) -> Option<String> {
    let at = *path.last()?;
    for next in graph.get(at).into_iter().flatten() {
        let Some((&next, _)) = graph.get_key_value(next.as_str()) else { continue };
        if path.contains(&next) {
            let mut cycle: Vec<&str> = path.iter().skip_while(|p| **p != next).copied().collect();
            cycle.push(next);
            return Some(format!("partials include each other in a circle: {}", cycle.join(" -> ")));
        }
        if path.len() > MAX_DEPTH {
            return Some(format!("partials nest more than {MAX_DEPTH} deep: {} -> ...", path.join(" -> ")));
        }
        path.push(next);
        if let Some(e) = walk(graph, path) {
            return Some(e);
        }
        path.pop();
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(texts: &[(&str, &str)]) -> Vec<PartialError> {
        let compiled: Vec<(String, Template)> =
            texts.iter().map(|(n, t)| (n.to_string(), Template::compile(t).unwrap_or_else(|e| panic!("{n}: {e}")))).collect();
        check(compiled.iter().map(|(n, t)| (n, t)))
    }

    #[test]
    fn circles_depth_unknown_names_and_decorators_are_refused() {
        assert!(run(&[("a/message", "x {{> b/message}}"), ("b/message", "y")]).is_empty(), "a plain partial is fine");
        let e = run(&[("a/message", "{{> b/message}}"), ("b/message", "{{#if x}}{{> a/message}}{{/if}}")]);
        assert!(e.iter().any(|e| e.message.contains("a/message -> b/message -> a/message")), "{e:?}");
        let e = run(&[("a/message", "{{> a/message}}")]);
        assert!(e[0].message.contains("circle"), "{e:?}");
        let chain: Vec<(String, String)> = (0..12).map(|i| (format!("t{i}/message"), format!("{{{{> t{}/message}}}}", i + 1))).collect();
        let mut texts: Vec<(&str, &str)> = chain.iter().map(|(n, t)| (n.as_str(), t.as_str())).collect();
        texts.push(("t12/message", "end"));
        assert!(run(&texts).iter().any(|e| e.message.contains("more than 8 deep")));
        assert!(run(&[("a/message", "{{> nowhere}}")])[0].message.contains("not a template field"));
        assert!(run(&[("a/message", "{{#*inline \"x\"}}{{> x}}{{/inline}}{{> x}}")])[0].message.contains("decorators"));
    }
}
