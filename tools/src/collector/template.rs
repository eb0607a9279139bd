//! The collector's prompt templates: `{{var}}`, `{{var|default}}` and
//! sections `{{#var}}…{{/var}}` shown only when `var` is given and not
//! empty. The template is parsed once, from the collector's text only;
//! argument values are inserted verbatim and never parsed, so a value
//! holding `{{other}}` or `{{/var}}` stays that literal text.

use std::collections::HashMap;

#[derive(Debug, PartialEq)]
enum Node {
    Text(String),
    Var {
        name: String,
        default: Option<String>,
    },
    Section {
        name: String,
        body: Vec<Node>,
    },
}

/// A parsed template.
#[derive(Debug, PartialEq)]
pub struct Template(Vec<Node>);

fn is_name(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 64
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
}

impl Template {
    /// Parses `text`; anything between braces that is not a tag, and a
    /// section that never closes, stays literal text.
    pub fn parse(text: &str) -> Self {
        let (nodes, _) = parse_until(text, None);
        Template(nodes)
    }

    /// The variable names the template uses.
    pub fn names(&self) -> Vec<&str> {
        fn walk<'a>(nodes: &'a [Node], out: &mut Vec<&'a str>) {
            for n in nodes {
                match n {
                    Node::Text(_) => {}
                    Node::Var { name, .. } => out.push(name),
                    Node::Section { name, body } => {
                        out.push(name);
                        walk(body, out);
                    }
                }
            }
        }
        let mut out = Vec::new();
        walk(&self.0, &mut out);
        out.sort();
        out.dedup();
        out
    }

    pub fn render(&self, vars: &HashMap<String, String>) -> String {
        let mut out = String::new();
        render_into(&self.0, vars, &mut out);
        out
    }
}

fn render_into(nodes: &[Node], vars: &HashMap<String, String>, out: &mut String) {
    for n in nodes {
        match n {
            Node::Text(t) => out.push_str(t),
            Node::Var { name, default } => match vars.get(name).filter(|v| !v.is_empty()) {
                Some(v) => out.push_str(v),
                None => out.push_str(default.as_deref().unwrap_or("")),
            },
            Node::Section { name, body } => {
                if vars.get(name).is_some_and(|v| !v.is_empty()) {
                    render_into(body, vars, out);
                }
            }
        }
    }
}

/// Parses until `{{/close}}` (or the end); returns the nodes and the rest
/// after the closing tag, or `None` if `close` was wanted and not found.
fn parse_until<'a>(mut rest: &'a str, close: Option<&str>) -> (Vec<Node>, Option<&'a str>) {
    let mut nodes = Vec::new();
    let mut text = String::new();
    loop {
        let Some(open) = rest.find("{{") else {
            text.push_str(rest);
            flush(&mut nodes, &mut text);
            return (nodes, if close.is_none() { Some("") } else { None });
        };
        text.push_str(&rest[..open]);
        let after = &rest[open + 2..];
        let Some(end) = after.find("}}") else {
            text.push_str(&rest[open..]);
            flush(&mut nodes, &mut text);
            return (nodes, if close.is_none() { Some("") } else { None });
        };
        let tag = after[..end].trim();
        let tail = &after[end + 2..];
        if let Some(name) = tag.strip_prefix('/') {
            if Some(name.trim()) == close {
                flush(&mut nodes, &mut text);
                return (nodes, Some(tail));
            }
            text.push_str(&rest[open..open + 2 + end + 2]);
            rest = tail;
        } else if let Some(name) = tag.strip_prefix('#').map(str::trim).filter(|n| is_name(n)) {
            match parse_until(tail, Some(name)) {
                (body, Some(after_section)) => {
                    flush(&mut nodes, &mut text);
                    nodes.push(Node::Section {
                        name: name.to_string(),
                        body,
                    });
                    rest = after_section;
                }
                // Never closed: the opening tag is literal text.
                (_, None) => {
                    text.push_str(&rest[open..open + 2 + end + 2]);
                    rest = tail;
                }
            }
        } else {
            let (name, default) = match tag.split_once('|') {
                Some((n, d)) => (n.trim(), Some(d.trim().to_string())),
                None => (tag, None),
            };
            if is_name(name) {
                flush(&mut nodes, &mut text);
                nodes.push(Node::Var {
                    name: name.to_string(),
                    default,
                });
            } else {
                text.push_str(&rest[open..open + 2 + end + 2]);
            }
            rest = tail;
        }
    }
}

fn flush(nodes: &mut Vec<Node>, text: &mut String) {
    if !text.is_empty() {
        nodes.push(Node::Text(std::mem::take(text)));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn vars(pairs: &[(&str, &str)]) -> HashMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn variables_defaults_and_sections() {
        let t = Template::parse(
            "Service {{service}} at {{severity|medium}} severity.{{#notes}} Notes: {{notes}}.{{/notes}}",
        );
        assert_eq!(t.names(), ["notes", "service", "severity"]);
        assert_eq!(
            t.render(&vars(&[("service", "api")])),
            "Service api at medium severity."
        );
        assert_eq!(
            t.render(&vars(&[
                ("service", "api"),
                ("severity", "high"),
                ("notes", "since 9:00")
            ])),
            "Service api at high severity. Notes: since 9:00."
        );
    }

    #[test]
    fn values_are_never_parsed() {
        let t = Template::parse("{{#a}}[{{a}}]{{/a}} {{b}}");
        let out = t.render(&vars(&[("a", "{{/a}}{{b}}{{#b}}"), ("b", "{{a}}")]));
        assert_eq!(out, "[{{/a}}{{b}}{{#b}}] {{a}}");
    }

    #[test]
    fn broken_tags_stay_literal() {
        let t = Template::parse("{{#open}} never closed {{x y}} {{ok}} {{/stray}} {{");
        assert_eq!(
            t.render(&vars(&[("ok", "1"), ("open", "yes")])),
            "{{#open}} never closed {{x y}} 1 {{/stray}} {{"
        );
    }

    #[test]
    fn nested_sections() {
        let t = Template::parse("{{#a}}A{{#b}}B{{/b}}{{/a}}");
        assert_eq!(t.render(&vars(&[("a", "1")])), "A");
        assert_eq!(t.render(&vars(&[("a", "1"), ("b", "1")])), "AB");
        assert_eq!(t.render(&vars(&[("b", "1")])), "");
    }
}
