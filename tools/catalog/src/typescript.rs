//! TypeScript declarations generated from a tool's JSON Schema, because
//! agents write correct calls from a typed signature far more reliably than
//! from raw JSON Schema.
//!
//! ```ts
//! declare namespace tools {
//!   /** Start a guest. ... */
//!   function vm_start(args: {
//!     /** Node the guest runs on. */
//!     node: string;
//!     /** Guest id. integer, minimum 100 */
//!     vmid: number;
//!   }): Promise<unknown>;
//! }
//! ```

use serde_json::{Map, Value};

use crate::spec::{is_js_identifier, ToolSpec};

/// Longest one-line signature before parameters are elided.
const SIGNATURE_MAX: usize = 160;

/// `declare namespace tools { ... }` for the given tools, with JSDoc,
/// after a named type for each result a schema describes
/// (`type VmListResult = ...`), so a script can write
/// `const vms: VmListResult = await tools.vm_list({})` without declaring
/// it (scripts are not type-checked; the name is for the reader). Each
/// tool comes with its result type's name: the catalog's, which tells
/// apart tools whose names fold to the same one (`vm_list` and `vmList`).
pub fn declarations<'a>(tools: impl IntoIterator<Item = (&'a ToolSpec, &'a str)>) -> String {
    let tools: Vec<(&ToolSpec, &str)> = tools.into_iter().collect();
    let mut out = String::new();
    for (spec, name) in &tools {
        if let Some(schema) = &spec.output_schema {
            out.push_str(&format!(
                "/** What tools.{} answers. */\ntype {name} = {};\n\n",
                spec.name,
                ts_type(schema, 0)
            ));
        }
    }
    out.push_str("declare namespace tools {\n");
    for (i, (spec, name)) in tools.into_iter().enumerate() {
        if i > 0 {
            out.push('\n');
        }
        function(spec, name, &mut out);
    }
    out.push_str("}\n");
    out
}

fn function(spec: &ToolSpec, result_name: &str, out: &mut String) {
    let mut doc = vec![spec.summary.clone()];
    if !spec.description.is_empty() && spec.description != spec.summary {
        doc.push(String::new());
        doc.extend(spec.description.lines().map(str::to_string));
    }
    doc.push(String::new());
    let mut flags = vec![format!("tier: {}", spec.tier)];
    if spec.hints.read_only {
        flags.push("read-only".into());
    }
    if spec.hints.destructive {
        flags.push("destructive".into());
    }
    if spec.hints.idempotent {
        flags.push("idempotent".into());
    }
    doc.push(format!("@remarks {}", flags.join(", ")));
    jsdoc(&doc, 1, out);
    let args = object_type(&spec.input_schema, 1);
    let ret = match spec.output_schema {
        Some(_) => result_name,
        None => "unknown",
    };
    let optional = required(&spec.input_schema).is_empty();
    out.push_str(&format!(
        "  function {}(args{}: {args}): Promise<{ret}>;\n",
        spec.name,
        if optional { "?" } else { "" }
    ));
}

/// The name a tool's result type folds to: `vm_list` → `VmListResult`,
/// `cluster.resources-get` → `ClusterResourcesGetResult` (the catalog adds
/// a number where two tools fold to one).
pub fn result_type(tool: &str) -> String {
    let mut out = String::new();
    for word in tool.split(|c: char| !c.is_ascii_alphanumeric()) {
        let mut chars = word.chars();
        if let Some(first) = chars.next() {
            out.push(first.to_ascii_uppercase());
            out.extend(chars);
        }
    }
    if out.starts_with(|c: char| c.is_ascii_digit()) {
        out.insert(0, 'T');
    }
    out.push_str("Result");
    out
}

/// Most required arguments an example names before `…`.
const EXAMPLE_ARGS: usize = 6;

/// Words a shorthand property cannot be (`{ delete }` does not parse).
const RESERVED: &[&str] = &[
    "await",
    "break",
    "case",
    "catch",
    "class",
    "const",
    "continue",
    "debugger",
    "default",
    "delete",
    "do",
    "else",
    "enum",
    "export",
    "extends",
    "false",
    "finally",
    "for",
    "function",
    "if",
    "implements",
    "import",
    "in",
    "instanceof",
    "interface",
    "let",
    "new",
    "null",
    "package",
    "private",
    "protected",
    "public",
    "return",
    "static",
    "super",
    "switch",
    "this",
    "throw",
    "true",
    "try",
    "typeof",
    "var",
    "void",
    "while",
    "with",
    "yield",
];

/// One line showing how a script calls `spec`, its result in a typed
/// variable: `const r: VmStatusResult = await tools.vm_status({ node, vmid });`
/// (the required arguments as shorthand properties, for variables the
/// script already holds).
pub fn example(spec: &ToolSpec, result_name: &str) -> String {
    let required: std::collections::HashSet<&str> =
        required(&spec.input_schema).into_iter().collect();
    let names = spec
        .input_schema
        .get("properties")
        .and_then(Value::as_object)
        .into_iter()
        .flat_map(|p| p.keys())
        .filter(|name| required.contains(name.as_str()));
    let mut args: Vec<String> = Vec::new();
    for name in names {
        if args.len() == EXAMPLE_ARGS {
            args.push("…".into());
            break;
        }
        args.push(
            if is_js_identifier(name) && !RESERVED.contains(&name.as_str()) {
                name.clone()
            } else {
                format!("{}: …", key(name))
            },
        );
    }
    let args = if args.is_empty() {
        "{}".to_string()
    } else {
        format!("{{ {} }}", args.join(", "))
    };
    let typed = match spec.output_schema {
        Some(_) => format!(": {result_name}"),
        None => String::new(),
    };
    format!("const r{typed} = await tools.{}({args});", spec.name)
}

/// `name(args: { a: string; b?: number }): Promise<unknown>` on one line.
pub fn signature(spec: &ToolSpec) -> String {
    let props = properties(&spec.input_schema);
    let req = required(&spec.input_schema);
    let mut parts: Vec<(bool, String)> = props
        .iter()
        .map(|(name, schema)| {
            let opt = !req.contains(&name.as_str());
            (
                opt,
                format!(
                    "{}{}: {}",
                    key(name),
                    if opt { "?" } else { "" },
                    flat_type(schema)
                ),
            )
        })
        .collect();
    // Required parameters first when something has to be left out.
    parts.sort_by_key(|(opt, _)| *opt);
    let ret = spec
        .output_schema
        .as_ref()
        .map(flat_type)
        .unwrap_or_else(|| "unknown".into());
    let head = format!("{}(args", spec.name);
    let tail = format!("): Promise<{ret}>");
    let mut shown = Vec::new();
    let mut len = head.len() + tail.len() + 8;
    for (i, (_, p)) in parts.iter().enumerate() {
        if len + p.len() + 2 > SIGNATURE_MAX && i > 0 {
            shown.push(format!("… {} more", parts.len() - i));
            break;
        }
        len += p.len() + 2;
        shown.push(p.clone());
    }
    let q = if req.is_empty() { "?" } else { "" };
    if shown.is_empty() {
        format!("{head}{q}: {{}}{tail}")
    } else {
        format!("{head}{q}: {{ {} }}{tail}", shown.join("; "))
    }
}

fn properties(schema: &Value) -> Vec<(String, Value)> {
    schema
        .get("properties")
        .and_then(Value::as_object)
        .map(|m| m.iter().map(|(k, v)| (k.clone(), v.clone())).collect())
        .unwrap_or_default()
}

fn required(schema: &Value) -> Vec<&str> {
    schema
        .get("required")
        .and_then(Value::as_array)
        .map(|r| r.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default()
}

fn key(name: &str) -> String {
    if is_js_identifier(name) {
        name.to_string()
    } else {
        Value::String(name.to_string()).to_string()
    }
}

/// A type on one line; nested objects are shown as `{...}` or in full when
/// short.
fn flat_type(schema: &Value) -> String {
    let t = ts_type(schema, 0);
    if t.contains('\n') {
        if t.trim_start().starts_with('{') {
            "{...}".into()
        } else {
            t.split_whitespace().collect::<Vec<_>>().join(" ")
        }
    } else {
        t
    }
}

/// An object type with one documented property per line.
fn object_type(schema: &Value, indent: usize) -> String {
    let props = properties(schema);
    let extra = schema.get("additionalProperties");
    if props.is_empty() {
        return match extra {
            Some(Value::Object(_)) => format!(
                "{{ [key: string]: {} }}",
                ts_type(&extra.cloned().unwrap_or_default(), indent)
            ),
            Some(Value::Bool(false)) => "{}".into(),
            _ => "{ [key: string]: unknown }".into(),
        };
    }
    let req = required(schema);
    let pad = "  ".repeat(indent + 1);
    let mut out = String::from("{\n");
    for (name, prop) in &props {
        let doc = property_doc(prop);
        if !doc.is_empty() {
            jsdoc(&doc, indent + 1, &mut out);
        }
        let opt = if req.contains(&name.as_str()) {
            ""
        } else {
            "?"
        };
        out.push_str(&format!(
            "{pad}{}{opt}: {};\n",
            key(name),
            ts_type(prop, indent + 1)
        ));
    }
    if let Some(Value::Object(_)) = extra {
        out.push_str(&format!(
            "{pad}[key: string]: {};\n",
            ts_type(extra.unwrap(), indent + 1)
        ));
    }
    out.push_str(&"  ".repeat(indent));
    out.push('}');
    out
}

/// Lines of JSDoc for a property: its description, then what the type
/// alone cannot say (integer, bounds, pattern, format, default).
fn property_doc(schema: &Value) -> Vec<String> {
    let mut doc: Vec<String> = schema
        .get("description")
        .and_then(Value::as_str)
        .map(|d| d.lines().map(str::to_string).collect())
        .unwrap_or_default();
    let mut notes = Vec::new();
    if schema.get("type").and_then(Value::as_str) == Some("integer") {
        notes.push("integer".to_string());
    }
    for (k, label) in [
        ("minimum", "minimum"),
        ("maximum", "maximum"),
        ("minLength", "min length"),
        ("maxLength", "max length"),
        ("pattern", "pattern"),
        ("format", "format"),
    ] {
        if let Some(v) = schema.get(k) {
            notes.push(format!(
                "{label} {}",
                v.as_str()
                    .map(str::to_string)
                    .unwrap_or_else(|| v.to_string())
            ));
        }
    }
    if !notes.is_empty() {
        doc.push(notes.join(", "));
    }
    if let Some(d) = schema.get("default") {
        doc.push(format!("@default {d}"));
    }
    doc
}

fn jsdoc(lines: &[String], indent: usize, out: &mut String) {
    let pad = "  ".repeat(indent);
    let lines: Vec<&String> = lines.iter().collect();
    if lines.len() == 1 {
        out.push_str(&format!("{pad}/** {} */\n", escape_doc(lines[0])));
        return;
    }
    out.push_str(&format!("{pad}/**\n"));
    for l in lines {
        if l.is_empty() {
            out.push_str(&format!("{pad} *\n"));
        } else {
            out.push_str(&format!("{pad} * {}\n", escape_doc(l)));
        }
    }
    out.push_str(&format!("{pad} */\n"));
}

fn escape_doc(s: &str) -> String {
    s.replace("*/", "*\\/")
}

/// The TypeScript type of a schema.
pub fn ts_type(schema: &Value, indent: usize) -> String {
    let Some(obj) = schema.as_object() else {
        return match schema {
            Value::Bool(false) => "never".into(),
            _ => "unknown".into(),
        };
    };
    if let Some(values) = obj.get("enum").and_then(Value::as_array) {
        return union(values.iter().map(literal));
    }
    if let Some(c) = obj.get("const") {
        return literal(c);
    }
    for (k, sep) in [("oneOf", " | "), ("anyOf", " | "), ("allOf", " & ")] {
        if let Some(variants) = obj.get(k).and_then(Value::as_array) {
            let parts: Vec<String> = variants
                .iter()
                .map(|v| parenthesise(ts_type(v, indent)))
                .collect();
            return parts.join(sep);
        }
    }
    match obj.get("type") {
        Some(Value::String(t)) => typed(t, obj, indent),
        Some(Value::Array(ts)) => union(
            ts.iter()
                .filter_map(Value::as_str)
                .map(|t| typed(t, obj, indent)),
        ),
        _ if obj.contains_key("properties") => object_type(schema, indent),
        _ => "unknown".into(),
    }
}

fn typed(t: &str, obj: &Map<String, Value>, indent: usize) -> String {
    match t {
        "string" => "string".into(),
        "integer" | "number" => "number".into(),
        "boolean" => "boolean".into(),
        "null" => "null".into(),
        "array" => match obj.get("items") {
            Some(items) => format!("{}[]", parenthesise(ts_type(items, indent))),
            None => "unknown[]".into(),
        },
        "object" => object_type(&Value::Object(obj.clone()), indent),
        _ => "unknown".into(),
    }
}

fn literal(v: &Value) -> String {
    match v {
        Value::String(_) | Value::Number(_) | Value::Bool(_) | Value::Null => v.to_string(),
        _ => "unknown".into(),
    }
}

fn union(parts: impl Iterator<Item = String>) -> String {
    let mut seen: Vec<String> = Vec::new();
    for p in parts {
        if !seen.contains(&p) {
            seen.push(p);
        }
    }
    if seen.is_empty() {
        "never".into()
    } else {
        seen.join(" | ")
    }
}

fn parenthesise(t: String) -> String {
    if (t.contains(" | ") || t.contains(" & ")) && !t.starts_with('{') {
        format!("({t})")
    } else {
        t
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::spec::{Hints, Tier};
    use serde_json::json;

    fn spec() -> ToolSpec {
        ToolSpec {
            name: "vm_start".into(),
            summary: "Start a guest.".into(),
            description: "Powers on a stopped VM or container.".into(),
            input_schema: json!({
                "type": "object",
                "properties": {
                    "node": {"type": "string", "description": "Node the guest runs on."},
                    "vmid": {"type": "integer", "minimum": 100, "description": "Guest id."},
                    "mode": {"enum": ["fast", "safe"], "default": "safe"},
                    "tags": {"type": "array", "items": {"type": ["string", "null"]}},
                    "net-0": {"type": "object", "properties": {"bridge": {"type": "string"}}}
                },
                "required": ["node", "vmid"]
            }),
            output_schema: Some(json!({"type": "string", "description": "UPID"})),
            tier: Tier::Operate,
            hints: Hints::for_tier(Tier::Operate),
            backend: "demo".into(),
            path_params: vec![],
            endpoint: None,
            keywords: String::new(),
            key: String::new(),
            aliases: Vec::new(),
        }
    }

    #[test]
    fn declaration_has_jsdoc_unions_optionals_and_defaults() {
        let d = declarations([(&spec(), "VmStartResult")]);
        assert!(
            d.starts_with("/** What tools.vm_start answers. */\ntype VmStartResult = string;\n\ndeclare namespace tools {\n"),
            "{d}"
        );
        assert!(d.contains("function vm_start(args: {"), "{d}");
        assert!(d.contains("    node: string;"), "{d}");
        assert!(d.contains("    /**\n     * Guest id.\n     * integer, minimum 100\n     */\n    vmid: number;"), "{d}");
        assert!(d.contains("mode?: \"fast\" | \"safe\";"), "{d}");
        assert!(d.contains("@default \"safe\""), "{d}");
        assert!(d.contains("tags?: (string | null)[];"), "{d}");
        assert!(
            d.contains("\"net-0\"?: {\n      bridge?: string;\n    };"),
            "{d}"
        );
        assert!(d.contains("}): Promise<VmStartResult>;"), "{d}");
        assert!(d.contains("@remarks tier: operate, idempotent"), "{d}");
    }

    #[test]
    fn one_line_signature() {
        let s = signature(&spec());
        assert_eq!(
            s,
            "vm_start(args: { node: string; vmid: number; mode?: \"fast\" | \"safe\"; tags?: (string | null)[]; \"net-0\"?: {...} }): Promise<string>"
        );
        let mut many = spec();
        let props: Map<String, Value> = (0..40)
            .map(|i| (format!("param{i}"), json!({"type": "string"})))
            .collect();
        many.input_schema = json!({"type": "object", "properties": props, "required": ["param39"]});
        let s = signature(&many);
        assert!(s.len() <= SIGNATURE_MAX + 20, "{s}");
        assert!(s.contains("param39: string"), "required first: {s}");
        assert!(s.contains("more }"), "{s}");
    }

    #[test]
    fn result_types_are_named_for_their_tool() {
        assert_eq!(result_type("vm_list"), "VmListResult");
        assert_eq!(
            result_type("cluster.resources-get"),
            "ClusterResourcesGetResult"
        );
        assert_eq!(result_type("9p"), "T9pResult");
        let mut s = spec();
        s.output_schema = None;
        let d = declarations([(&s, "VmStartResult")]);
        assert!(
            d.starts_with("declare namespace tools {"),
            "no schema, no type: {d}"
        );
        assert!(d.contains("}): Promise<unknown>;"), "{d}");
    }

    #[test]
    fn an_example_keeps_the_result_in_a_typed_variable() {
        assert_eq!(
            example(&spec(), "VmStartResult"),
            "const r: VmStartResult = await tools.vm_start({ node, vmid });"
        );
        let mut s = spec();
        s.output_schema = None;
        s.input_schema = json!({"type": "object", "properties": {"net-0": {}, "delete": {}}, "required": ["net-0", "delete"]});
        assert_eq!(
            example(&s, "VmStartResult"),
            "const r = await tools.vm_start({ \"net-0\": …, delete: … });"
        );
        let props: Map<String, Value> = (0..50_000)
            .map(|i| (format!("p{i:05}"), json!({})))
            .collect();
        let names: Vec<String> = props.keys().cloned().collect();
        s.input_schema = json!({"type": "object", "properties": props, "required": names});
        let e = example(&s, "VmStartResult");
        assert!(e.ends_with("p00004, p00005, … });"), "at most 6 named: {e}");
    }

    #[test]
    fn empty_args_are_optional() {
        let mut s = spec();
        s.input_schema = json!({"type": "object", "properties": {}});
        assert_eq!(signature(&s), "vm_start(args?: {}): Promise<string>");
    }
}
