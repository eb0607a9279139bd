//! The full-catalog generator against the real Proxmox VE 9.1 API schema
//! (../shared/pve-apidata.json, reference data kept outside the repo). The
//! test is skipped, with a notice, when the file is absent.

mod common;
use common::schema_file;

use airlock_catalog::{Catalog, Tier};
use airlock_proxmox::{apidata, full, tiers::TierRules};

#[test]
fn every_operation_becomes_a_valid_tool() {
    let Some(path) = schema_file() else { return };
    let ops = apidata::parse_text(&std::fs::read_to_string(path).unwrap()).unwrap();
    assert_eq!(ops.len(), 649, "operations in the PVE 9.1 schema");
    let generated = full::generate(&ops, &TierRules::defaults(), "pve");
    // Every schema compiles with the validator and every name is a unique
    // JS identifier: Catalog::build checks both.
    let (catalog, clashes) = Catalog::build(vec![(
        "pve".into(),
        generated.iter().map(|(s, _)| s.clone()).collect(),
    )])
    .unwrap();
    assert!(clashes.is_empty(), "{clashes:?}");
    assert_eq!(catalog.len(), 649);
    let by_path = |m: &str, p: &str| {
        generated
            .iter()
            .find(|(_, o)| o.method.as_str() == m && o.path == p)
            .map(|(s, _)| s)
            .unwrap()
    };
    let start = by_path("POST", "/nodes/{node}/qemu/{vmid}/status/start");
    // The curated catalog's name, so a script runs in both modes.
    assert_eq!(start.name, "vm_start");
    assert_eq!(start.tier, Tier::Operate);
    assert_eq!(start.path_params, ["node", "vmid"]);
    let entry = catalog.get("vm_start").unwrap();
    assert!(entry
        .problems(&serde_json::json!({"node": "pve1", "vmid": 100}))
        .is_empty());
    assert!(!entry
        .problems(&serde_json::json!({"node": "pve1"}))
        .is_empty());
    // Names derived from the path and method where the curated catalog
    // has none: what, where and the verb, with no numbers anywhere.
    for (method, path, name) in [
        ("GET", "/cluster/sdn/zones", "sdn_zone_list"),
        ("PUT", "/nodes/{node}/dns", "node_dns_update"),
        (
            "GET",
            "/cluster/replication/{id}",
            "cluster_replication_get",
        ),
        (
            "GET",
            "/nodes/{node}/qemu/{vmid}/firewall/rules/{pos}",
            "vm_firewall_rule_get",
        ),
        (
            "POST",
            "/cluster/firewall/ipset/{name}",
            "firewall_ipset_add",
        ),
        (
            "GET",
            "/cluster/firewall/ipset/{name}/{cidr}",
            "firewall_ipset_cidr_get",
        ),
        ("GET", "/nodes/{node}/qemu/{vmid}", "vm_index"),
        ("POST", "/nodes/{node}/startall", "node_start_all"),
    ] {
        assert_eq!(by_path(method, path).name, name, "{method} {path}");
    }
    let numbered: Vec<&str> = generated
        .iter()
        .map(|(s, _)| s.name.as_str())
        .filter(|n| n.ends_with(|c: char| c.is_ascii_digit()))
        .collect();
    assert!(numbered.is_empty(), "{numbered:?}");
    assert_eq!(by_path("POST", "/access/users").tier, Tier::Forbidden);
    assert_eq!(by_path("GET", "/cluster/resources").tier, Tier::Read);
    // Indexed families became pattern properties.
    let config = by_path("POST", "/nodes/{node}/qemu/{vmid}/config");
    assert!(config.input_schema["patternProperties"]
        .get("^net[0-9]{1,3}$")
        .is_some());
    let migrate = by_path("POST", "/nodes/{node}/qemu/{vmid}/migrate");
    assert!(
        migrate.input_schema["properties"]
            .get("target_node")
            .is_some(),
        "PVE's target is target_node"
    );
    assert!(migrate.input_schema["required"]
        .as_array()
        .unwrap()
        .iter()
        .any(|r| r == "target_node"));
    assert_eq!(
        migrate.input_schema["properties"]["target"]["pattern"], "^[A-Za-z0-9_-]{1,64}$",
        "target picks the cluster"
    );
    let counts = Tier::ALL.map(|t| generated.iter().filter(|(s, _)| s.tier == t).count());
    eprintln!("tiers (read, operate, admin, forbidden): {counts:?}");
    let sample: Vec<&str> = generated
        .iter()
        .step_by(40)
        .map(|(s, _)| s.name.as_str())
        .collect();
    eprintln!("sample names: {sample:?}");
}

/// The JSON types a converted PVE parameter allows.
fn json_types(schema: &serde_json::Value) -> Vec<String> {
    match &schema["type"] {
        serde_json::Value::String(t) => vec![t.clone()],
        serde_json::Value::Array(ts) => ts
            .iter()
            .filter_map(|t| t.as_str().map(str::to_string))
            .collect(),
        _ => vec![],
    }
}

#[test]
fn every_curated_tool_maps_to_a_real_operation() {
    use airlock_proxmox::{curated, schema};
    let Some(path) = schema_file() else { return };
    let ops = apidata::parse_text(&std::fs::read_to_string(path).unwrap()).unwrap();
    let tools = curated::tools(&TierRules::defaults(), &Default::default(), "pve");
    assert!(tools.len() >= 120);
    let mut problems = Vec::new();
    for (spec, route) in &tools {
        let Some(op) = ops
            .iter()
            .find(|o| o.method == route.method && o.path == route.path)
        else {
            problems.push(format!(
                "{}: no operation {} {}",
                spec.name, route.method, route.path
            ));
            continue;
        };
        let pve = op.parameters["properties"]
            .as_object()
            .cloned()
            .unwrap_or_default();
        let ours = spec.input_schema["properties"].as_object().unwrap();
        for (local, our) in ours {
            if local == "target" || route.local.contains(local) {
                continue; // the cluster selector, or used by Airlock itself
            }
            let wire = route.wire_name(local);
            let Some(theirs) = pve.get(wire) else {
                problems.push(format!(
                    "{}: `{local}` (sent as `{wire}`) is not a parameter of {} {}",
                    spec.name, route.method, route.path
                ));
                continue;
            };
            let theirs = schema::property(theirs);
            let (t_ours, t_theirs) = (json_types(our), json_types(&theirs));
            let compatible = t_theirs.iter().all(|t| {
                t_ours.contains(t) || (t == "number" && t_ours.contains(&"integer".to_string()))
            }) || t_ours.iter().all(|t| {
                t_theirs.contains(t) || (t == "integer" && t_theirs.contains(&"number".to_string()))
            });
            if !compatible {
                problems.push(format!(
                    "{}: `{local}` is {t_ours:?} here but {t_theirs:?} in PVE",
                    spec.name
                ));
            }
        }
        if let Some(families) = spec.input_schema["patternProperties"].as_object() {
            for pattern in families.keys() {
                let family = pattern.trim_start_matches('^').split('[').next().unwrap();
                let wire = route.wire_name(family).trim_end_matches("[n]").to_string();
                if !pve.contains_key(&format!("{wire}[n]")) {
                    problems.push(format!(
                        "{}: family {family} is not an indexed parameter of {}",
                        spec.name, route.path
                    ));
                }
            }
        }
        // Every parameter PVE requires is required here too (or fixed).
        let required: Vec<String> = spec.input_schema["required"]
            .as_array()
            .map(|r| {
                r.iter()
                    .filter_map(|v| v.as_str())
                    .map(|l| route.wire_name(l).to_string())
                    .collect()
            })
            .unwrap_or_default();
        for (name, p) in &pve {
            let optional = p.get("optional").is_some_and(|o| o == 1 || o == true);
            if !optional && !required.contains(name) && !route.fixed.iter().any(|(k, _)| k == name)
            {
                problems.push(format!(
                    "{}: PVE requires `{name}`, which the tool does not require",
                    spec.name
                ));
            }
        }
    }
    assert!(
        problems.is_empty(),
        "{} problems:\n{}",
        problems.len(),
        problems.join("\n")
    );
}

#[test]
fn the_real_schema_fits_the_default_schema_cap_with_room() {
    use airlock_proxmox::body::DEFAULT_MAX_SCHEMA_BYTES;
    let Some(path) = schema_file() else { return };
    let size = std::fs::metadata(&path).unwrap().len();
    assert!(
        size * 8 < DEFAULT_MAX_SCHEMA_BYTES,
        "{size} B against a cap of {DEFAULT_MAX_SCHEMA_BYTES} B"
    );
    // And its values (counted before it is parsed) fit the count the cap
    // allows, with room.
    use airlock_edge::json_budget::{count_values, max_values};
    let values = count_values(&std::fs::read(&path).unwrap(), u64::MAX);
    let limit = max_values(DEFAULT_MAX_SCHEMA_BYTES);
    eprintln!("the real schema: {size} B, {values} values (limit {limit})");
    assert!(values * 4 < limit, "{values} values against {limit}");
}

/// Every path kept from the schema is clean, so a tier rule sees the
/// path that is sent.
#[test]
fn a_hostile_tree_loses_its_unclean_paths_and_nothing_else() {
    let hostile = serde_json::json!([
        {"path": "/nodes/{node}/../access/users", "info": {
            "GET": {"name": "read_users", "description": "Looks like a node read."},
            "POST": {"name": "add_user", "description": "x"}}},
        {"path": "/nodes/{node}/qemu/{vmid}/status/../../../../access/acl", "info": {
            "PUT": {"name": "acl", "description": "x"}}},
        {"path": "/cluster/./config/join", "info": {"POST": {"name": "join", "description": "x"}}},
        {"path": "/nodes//{node}", "info": {"GET": {"name": "n", "description": "x"}}},
        {"path": "/nodes/{node}/%2e%2e/access/users", "info": {"GET": {"name": "p", "description": "x"}}},
        {"path": "/nodes/{node}/qemu", "info": {"GET": {"name": "vmlist", "description": "VMs."}}}
    ]);
    let ops = apidata::parse(&hostile).unwrap();
    assert_eq!(
        ops.iter()
            .map(|o| (o.method.as_str(), o.path.as_str()))
            .collect::<Vec<_>>(),
        [("GET", "/nodes/{node}/qemu")]
    );
    let generated = full::generate(&ops, &TierRules::defaults(), "pve");
    assert_eq!(generated.len(), 1);
    assert_eq!(generated[0].0.tier, Tier::Read);
}

#[test]
fn every_path_of_the_real_schema_is_clean() {
    let Some(path) = schema_file() else { return };
    let text = std::fs::read_to_string(path).unwrap();
    let tree: serde_json::Value = serde_json::from_str(&text).unwrap();
    fn walk(nodes: &serde_json::Value, out: &mut Vec<String>) {
        for n in nodes.as_array().into_iter().flatten() {
            out.push(n["path"].as_str().unwrap_or_default().to_string());
            walk(&n["children"], out);
        }
    }
    let mut paths = Vec::new();
    walk(&tree, &mut paths);
    assert_eq!(paths.len(), 435, "nodes in the PVE 9.1 tree");
    let unclean: Vec<&String> = paths.iter().filter(|p| !apidata::valid_path(p)).collect();
    assert!(unclean.is_empty(), "{unclean:?}");
}

/// Reads of PVE 9.1 that return credentials in fields redaction does not
/// recognise by name: each masking rule names a real GET operation, and
/// the reads whose secret cannot be masked field by field are above
/// `read`.
#[test]
fn reads_that_return_unnamed_secrets_are_masked_or_above_read() {
    use airlock_proxmox::{apidata::Method, secrets};
    let Some(path) = schema_file() else { return };
    let ops = apidata::parse_text(&std::fs::read_to_string(path).unwrap()).unwrap();
    let generated = full::generate(&ops, &TierRules::defaults(), "pve");
    let tool = |p: &str| {
        generated
            .iter()
            .find(|(_, r)| r.method == Method::Get && r.path == p)
            .map(|(s, r)| (s.tier, r.path.clone()))
            .unwrap_or_else(|| panic!("no GET {p} in the schema"))
    };
    for p in secrets::masked_paths() {
        let (_, route) = tool(p);
        // The rule fires on the route's own template.
        let mut probe =
            serde_json::json!({"data": "x", "url": "https://h/x", "http_proxy": "http://u:p@h"});
        let mut rows = serde_json::json!([{"key": "cipassword", "value": "x"}]);
        let mut text = serde_json::json!("password: x");
        let masked = secrets::mask(&route, &mut probe)
            + secrets::mask(&route, &mut rows)
            + secrets::mask(&route, &mut text);
        assert!(masked > 0, "GET {p}: no field masked");
    }
    assert_eq!(
        tool("/cluster/acme/plugins").0,
        Tier::Read,
        "masked, so still a read"
    );
    assert_eq!(
        tool("/nodes/{node}/qemu/{vmid}/cloudinit/dump").0,
        Tier::Admin
    );
    assert_eq!(
        tool("/nodes/{node}/storage/{storage}/file-restore/download").0,
        Tier::Forbidden
    );
}
