//! The full-catalog generator against the real Proxmox VE 9.1 API schema
//! (../shared/pve-apidata.json, reference data kept outside the repo). The
//! test is skipped, with a notice, when the file is absent.

use std::path::PathBuf;

use airlock_tools::{
    proxmox::{apidata, full, tiers::TierRules},
    Catalog, Tier,
};

fn schema_file() -> Option<PathBuf> {
    let path = std::env::var_os("AIRLOCK_PVE_APIDATA")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../shared/pve-apidata.json")
        });
    if path.exists() {
        Some(path)
    } else {
        eprintln!(
            "NOTICE: skipping: {} not found (set AIRLOCK_PVE_APIDATA to run this test)",
            path.display()
        );
        None
    }
}

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
    assert_eq!(start.name, "qemu_vm_start");
    assert_eq!(start.tier, Tier::Operate);
    assert_eq!(start.path_params, ["node", "vmid"]);
    let entry = catalog.get("qemu_vm_start").unwrap();
    assert!(entry
        .problems(&serde_json::json!({"node": "pve1", "vmid": 100}))
        .is_empty());
    assert!(!entry
        .problems(&serde_json::json!({"node": "pve1"}))
        .is_empty());
    assert_eq!(by_path("POST", "/access/users").tier, Tier::Forbidden);
    assert_eq!(by_path("GET", "/cluster/resources").tier, Tier::Read);
    // Indexed families became pattern properties.
    let config = by_path("POST", "/nodes/{node}/qemu/{vmid}/config");
    assert!(config.input_schema["patternProperties"]
        .get("^net[0-9]{1,3}$")
        .is_some());
    let counts = Tier::ALL.map(|t| generated.iter().filter(|(s, _)| s.tier == t).count());
    eprintln!("tiers (read, operate, admin, forbidden): {counts:?}");
    let sample: Vec<&str> = generated
        .iter()
        .step_by(40)
        .map(|(s, _)| s.name.as_str())
        .collect();
    eprintln!("sample names: {sample:?}");
}
