//! The collector's prompt templates: `{{var}}`, `{{var|default}}`,
//! sections `{{#var}}…{{/var}}` shown only when `var` is given and not
//! empty, and inverted sections `{{^var}}…{{/var}}` shown only when it is
//! not (QuoxMCP's own fixtures use both). The template is parsed once, from the collector's text only;
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
        /// `{{^name}}`: shown when `name` is missing or empty.
        inverted: bool,
        body: Vec<Node>,
    },
}

/// A parsed template.
#[derive(Debug, PartialEq)]
pub struct Template(Vec<Node>);

/// Sections nest at most this deep; a deeper opening tag is literal text.
/// Rendering walks the nesting recursively, and a collector's prompt has
/// no use for more.
pub const MAX_DEPTH: usize = 16;

fn is_name(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 64
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
}

impl Template {
    /// Parses `text`; anything between braces that is not a tag, a
    /// section that never closes and one nested deeper than [`MAX_DEPTH`]
    /// stay literal text.
    pub fn parse(text: &str) -> Self {
        Template(parse_nodes(text))
    }

    /// The variable names the template uses.
    pub fn names(&self) -> Vec<&str> {
        fn walk<'a>(nodes: &'a [Node], out: &mut Vec<&'a str>) {
            for n in nodes {
                match n {
                    Node::Text(_) => {}
                    Node::Var { name, .. } => out.push(name),
                    Node::Section { name, body, .. } => {
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
            Node::Section {
                name,
                inverted,
                body,
            } => {
                let given = vars.get(name).is_some_and(|v| !v.is_empty());
                if given != *inverted {
                    render_into(body, vars, out);
                }
            }
        }
    }
}

/// A section still waiting for its closing tag.
struct Open {
    name: String,
    inverted: bool,
    /// The opening tag as written, kept in case the section never closes.
    tag: String,
    /// The text and nodes that came before it.
    before: Vec<Node>,
}

/// One pass over the text with an explicit stack, so neither nesting nor
/// unclosed sections can make parsing recurse or backtrack: a text that
/// opens many sections it never closes is linear, not exponential, and a
/// deep nesting cannot overflow the stack.
fn parse_nodes(text: &str) -> Vec<Node> {
    let mut nodes = Vec::new();
    let mut literal = String::new();
    let mut open: Vec<Open> = Vec::new();
    let mut rest = text;
    while let Some(start) = rest.find("{{") {
        literal.push_str(&rest[..start]);
        let after = &rest[start + 2..];
        let Some(end) = after.find("}}") else {
            literal.push_str(&rest[start..]);
            rest = "";
            break;
        };
        let whole = &rest[start..start + 2 + end + 2];
        let tag = after[..end].trim();
        rest = &after[end + 2..];
        if let Some(name) = tag.strip_prefix('/').map(str::trim) {
            // Closes the innermost open section of that name; the sections
            // opened inside it and never closed become literal text.
            let Some(depth) = open.iter().rposition(|o| o.name == name) else {
                literal.push_str(whole);
                continue;
            };
            flush(&mut nodes, &mut literal);
            while open.len() > depth + 1 {
                nodes = unclosed(open.pop().expect("deeper than depth"), nodes);
            }
            let section = open.pop().expect("found above");
            let body = std::mem::replace(&mut nodes, section.before);
            nodes.push(Node::Section {
                name: section.name,
                inverted: section.inverted,
                body,
            });
        } else if let Some((inverted, name)) = section_opening(tag) {
            if open.len() >= MAX_DEPTH {
                literal.push_str(whole);
                continue;
            }
            flush(&mut nodes, &mut literal);
            open.push(Open {
                name: name.to_string(),
                inverted,
                tag: whole.to_string(),
                before: std::mem::take(&mut nodes),
            });
        } else {
            let (name, default) = match tag.split_once('|') {
                Some((n, d)) => (n.trim(), Some(d.trim().to_string())),
                None => (tag, None),
            };
            if is_name(name) {
                flush(&mut nodes, &mut literal);
                nodes.push(Node::Var {
                    name: name.to_string(),
                    default,
                });
            } else {
                literal.push_str(whole);
            }
        }
    }
    literal.push_str(rest);
    flush(&mut nodes, &mut literal);
    while let Some(section) = open.pop() {
        nodes = unclosed(section, nodes);
    }
    nodes
}

/// `#name` or `^name` (inverted): a section's opening tag.
fn section_opening(tag: &str) -> Option<(bool, &str)> {
    let (inverted, name) = match tag.as_bytes().first()? {
        b'#' => (false, &tag[1..]),
        b'^' => (true, &tag[1..]),
        _ => return None,
    };
    let name = name.trim();
    is_name(name).then_some((inverted, name))
}

/// A section that never closed: its opening tag is literal text and its
/// body belongs to the enclosing level.
fn unclosed(section: Open, body: Vec<Node>) -> Vec<Node> {
    let mut nodes = section.before;
    let mut literal = section.tag;
    for node in body {
        match node {
            Node::Text(t) => literal.push_str(&t),
            other => {
                flush(&mut nodes, &mut literal);
                nodes.push(other);
            }
        }
    }
    flush(&mut nodes, &mut literal);
    nodes
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
    fn many_unclosed_sections_parse_in_one_pass() {
        // Found while writing the `template` fuzz target: the recursive
        // parser retried every unclosed section from the enclosing level,
        // so each opener doubled the work (22 of them took 1.5 s, 30 would
        // take minutes) in a text that comes from the collector.
        let text = "{{#a}}x".repeat(100_000);
        let t = Template::parse(&text);
        assert_eq!(t.render(&vars(&[("a", "1")])), text);
    }

    #[test]
    fn deep_nesting_is_capped_and_cannot_overflow_the_stack() {
        let depth = 100_000;
        let text = format!("{}x{}", "{{#a}}".repeat(depth), "{{/a}}".repeat(depth));
        let t = Template::parse(&text);
        let out = t.render(&vars(&[("a", "1")]));
        let literal = depth - MAX_DEPTH;
        assert_eq!(
            out,
            format!("{}x{}", "{{#a}}".repeat(literal), "{{/a}}".repeat(literal))
        );
        assert_eq!(t.render(&HashMap::new()), "{{/a}}".repeat(literal));
    }

    #[test]
    fn a_close_for_an_outer_section_ends_the_inner_ones() {
        let t = Template::parse("{{#a}}A{{#b}}B{{/a}}C{{/b}}");
        assert_eq!(t.render(&vars(&[("a", "1")])), "A{{#b}}BC{{/b}}");
        assert_eq!(t.render(&HashMap::new()), "C{{/b}}");
    }

    #[test]
    fn inverted_sections_show_when_the_variable_is_not_given() {
        let t = Template::parse("Triage {{service}}.{{^notes}} No notes yet.{{/notes}}{{#notes}} Notes: {{notes}}.{{/notes}}");
        assert_eq!(t.names(), ["notes", "service"]);
        assert_eq!(
            t.render(&vars(&[("service", "api")])),
            "Triage api. No notes yet."
        );
        assert_eq!(
            t.render(&vars(&[("service", "api"), ("notes", "")])),
            "Triage api. No notes yet.",
            "empty counts as not given"
        );
        assert_eq!(
            t.render(&vars(&[("service", "api"), ("notes", "since 9")])),
            "Triage api. Notes: since 9."
        );
        // Unclosed, it stays literal text, like `{{#…}}`.
        let t = Template::parse("{{^x}} open");
        assert_eq!(t.render(&HashMap::new()), "{{^x}} open");
        assert_eq!(Template::parse("{{^ }}").render(&HashMap::new()), "{{^ }}");
    }

    #[test]
    fn nested_sections() {
        let t = Template::parse("{{#a}}A{{#b}}B{{/b}}{{/a}}");
        assert_eq!(t.render(&vars(&[("a", "1")])), "A");
        assert_eq!(t.render(&vars(&[("a", "1"), ("b", "1")])), "AB");
        assert_eq!(t.render(&vars(&[("b", "1")])), "");
    }
}
