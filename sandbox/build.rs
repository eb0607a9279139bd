//! Builds the JavaScript guest for `wasm32-wasip1` and embeds it.
//!
//! The guest is its own Cargo workspace (`guest-sdk/guest`) so the host
//! workspace never compiles boa for the host. We run a nested `cargo build`
//! into `target/guest` (a separate target directory, so it never waits on
//! the lock of the outer build), installing the `wasm32-wasip1` target with
//! rustup first when it is missing. Set `AIRLOCK_GUEST_WASM` to a prebuilt
//! guest to skip all of this.

use std::{
    env, fs,
    path::{Path, PathBuf},
    process::Command,
};

use sha2::{Digest, Sha256};

const TARGET: &str = "wasm32-wasip1";

fn main() {
    let manifest_dir = PathBuf::from(env::var("CARGO_MANIFEST_DIR").unwrap());
    let root = manifest_dir.parent().unwrap().to_path_buf();
    let guest_dir = root.join("guest-sdk/guest");
    let out_dir = PathBuf::from(env::var("OUT_DIR").unwrap());

    println!("cargo:rerun-if-env-changed=AIRLOCK_GUEST_WASM");
    for p in [
        "guest-sdk/src",
        "guest-sdk/Cargo.toml",
        "guest-sdk/guest/src",
        "guest-sdk/guest/Cargo.toml",
        "guest-sdk/guest/Cargo.lock",
    ] {
        println!("cargo:rerun-if-changed={}", root.join(p).display());
    }

    let wasm = match env::var_os("AIRLOCK_GUEST_WASM") {
        Some(p) => PathBuf::from(p),
        None => build_guest(&root, &guest_dir),
    };
    let bytes =
        fs::read(&wasm).unwrap_or_else(|e| panic!("reading the guest {}: {e}", wasm.display()));
    let embedded = out_dir.join("airlock_guest.wasm");
    fs::write(&embedded, &bytes).unwrap();
    let digest = hex::encode(Sha256::digest(&bytes));
    println!("cargo:rustc-env=AIRLOCK_GUEST_PATH={}", embedded.display());
    println!("cargo:rustc-env=AIRLOCK_GUEST_SHA256={digest}");
}

fn build_guest(root: &Path, guest_dir: &Path) -> PathBuf {
    ensure_target();
    let target_dir = env::var_os("AIRLOCK_GUEST_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| root.join("target/guest"));
    let cargo = env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let mut cmd = Command::new(cargo);
    cmd.current_dir(guest_dir)
        .args([
            "build",
            "--release",
            "--locked",
            "--target",
            TARGET,
            "--target-dir",
        ])
        .arg(&target_dir);
    // The outer build's settings (flags, wrappers such as clippy-driver,
    // profile overrides) are for the host, not for the guest.
    for (key, _) in env::vars_os() {
        let key = key.to_string_lossy().into_owned();
        if key.starts_with("CARGO_") && key != "CARGO_HOME" && key != "CARGO_MAKEFLAGS"
            || key.starts_with("RUSTC_")
            || key == "RUSTFLAGS"
            || key == "RUSTDOCFLAGS"
        {
            cmd.env_remove(&key);
        }
    }
    // Share the outer build's job slots so two cores are not oversubscribed.
    if let Ok(flags) = env::var("CARGO_MAKEFLAGS") {
        cmd.env("MAKEFLAGS", flags);
    }
    let status = cmd
        .status()
        .unwrap_or_else(|e| panic!("running cargo to build the guest: {e}"));
    if !status.success() {
        panic!("building the JavaScript guest for {TARGET} failed (see the output above)");
    }
    target_dir.join(TARGET).join("release/airlock_guest.wasm")
}

/// Installs the wasm target with rustup when the toolchain lacks it.
fn ensure_target() {
    let rustc = env::var("RUSTC").unwrap_or_else(|_| "rustc".into());
    let libdir = Command::new(&rustc)
        .args(["--print", "target-libdir", "--target", TARGET])
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|o| PathBuf::from(String::from_utf8_lossy(&o.stdout).trim()));
    if libdir.as_deref().is_some_and(Path::exists) {
        return;
    }
    println!("cargo:warning=installing the {TARGET} target with rustup (needed to build the sandbox guest)");
    let status = Command::new("rustup")
        .args(["target", "add", TARGET])
        .status();
    match status {
        Ok(s) if s.success() => {}
        _ => panic!(
            "the {TARGET} target is missing and `rustup target add {TARGET}` failed; \
             install it by hand, or point AIRLOCK_GUEST_WASM at a prebuilt guest"
        ),
    }
}
