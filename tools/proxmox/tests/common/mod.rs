//! Where the real Proxmox VE 9.1 API schema is: reference data kept
//! outside the repository (never copied into it), shared by the tests
//! that check the generator and the simulator against it.

use std::path::PathBuf;

/// `AIRLOCK_PVE_APIDATA`, else `shared/pve-apidata.json` beside the
/// checkout or beside any directory above it, else the workplace's
/// `/work/shared`; `None` (with a notice) when none exists, and the
/// test is skipped.
pub fn schema_file() -> Option<PathBuf> {
    if let Some(path) = std::env::var_os("AIRLOCK_PVE_APIDATA") {
        return Some(PathBuf::from(path))
            .filter(|p| p.exists())
            .or_else(|| {
                eprintln!("NOTICE: skipping: AIRLOCK_PVE_APIDATA names no file");
                None
            });
    }
    let manifest = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let found = manifest
        .ancestors()
        .map(|dir| dir.join("shared/pve-apidata.json"))
        .chain([PathBuf::from("/work/shared/pve-apidata.json")])
        .find(|p| p.exists());
    if found.is_none() {
        eprintln!(
            "NOTICE: skipping: no shared/pve-apidata.json above {} (set AIRLOCK_PVE_APIDATA to run this test)",
            manifest.display()
        );
    }
    found
}
