//! Builds both provider components (`guest/component`, the embedded tar
//! stream, and `guest/base64-fallback`) for `wasm32-wasip2` and hands their
//! paths to the crate, which embeds the first with `include_bytes!`.
//!
//! The guest gets its own target directory so this nested cargo never waits
//! on the lock the outer build holds.

use std::env;
use std::path::PathBuf;
use std::process::Command;

fn main() {
    let manifest =
        PathBuf::from(env::var_os("CARGO_MANIFEST_DIR").expect("cargo sets CARGO_MANIFEST_DIR"));
    let workspace = manifest
        .parent()
        .expect("host-shim lives inside the workspace")
        .to_path_buf();
    // Relative to this package: checkouts that share a target directory
    // (CI reuses one) share this script's output, and absolute paths from
    // another checkout would never change.
    for dir in [
        "../guest/core",
        "../guest/driver",
        "../guest/component",
        "../guest/base64-fallback",
        "../wit",
        "../Cargo.lock",
    ] {
        println!("cargo:rerun-if-changed={dir}");
    }
    println!("cargo:rerun-if-env-changed=SANDBOX_SYNC_GUEST_TARGET_DIR");

    let target_dir = env::var_os("SANDBOX_SYNC_GUEST_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            // <target>/<profile>/build/<pkg>/out -> <target>/guest
            let out = PathBuf::from(env::var_os("OUT_DIR").expect("cargo sets OUT_DIR"));
            out.ancestors()
                .nth(4)
                .map(|t| t.join("guest"))
                .unwrap_or_else(|| workspace.join("target/guest"))
        });
    require_wasm_target();
    let cargo = env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let status = Command::new(cargo)
        .current_dir(&workspace)
        .args([
            "build",
            "--locked",
            "-p",
            "sandbox-sync-component",
            "-p",
            "sandbox-sync-base64-fallback",
        ])
        .args(["--target", "wasm32-wasip2", "--profile", "guest"])
        .env("CARGO_TARGET_DIR", &target_dir)
        // Flags meant for the host build must not leak into the guest build.
        .env_remove("CARGO_ENCODED_RUSTFLAGS")
        .env_remove("RUSTFLAGS")
        .env_remove("CARGO_BUILD_TARGET")
        .env_remove("CARGO_PROFILE_RELEASE_DEBUG")
        .status();
    match status {
        Ok(s) if s.success() => {}
        Ok(_) => fail("building the guest components failed (see the errors above)"),
        Err(e) => fail(&format!(
            "could not run cargo for the guest components: {e}"
        )),
    }
    for (var, file) in [
        ("SANDBOX_SYNC_COMPONENT", "sandbox_sync_component.wasm"),
        (
            "SANDBOX_SYNC_FALLBACK_COMPONENT",
            "sandbox_sync_base64_fallback.wasm",
        ),
    ] {
        let wasm = target_dir.join("wasm32-wasip2/guest").join(file);
        if !wasm.exists() {
            fail(&format!("guest component missing at {}", wasm.display()));
        }
        println!("cargo:rustc-env={var}={}", wasm.display());
    }
}

/// Stops the build with one clear message (a panic would add a backtrace
/// that says nothing about what to do).
fn fail(message: &str) -> ! {
    eprintln!("error: {message}");
    std::process::exit(1);
}

/// The guests need the `wasm32-wasip2` standard library. rust-toolchain.toml
/// lists the target, so rustup installs it with the toolchain; a toolchain
/// installed otherwise may lack it.
fn require_wasm_target() {
    let rustc = env::var_os("RUSTC").unwrap_or_else(|| "rustc".into());
    let sysroot = Command::new(rustc)
        .args(["--print", "sysroot"])
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|o| PathBuf::from(String::from_utf8_lossy(&o.stdout).trim()));
    if let Some(root) = sysroot {
        if !root.join("lib/rustlib/wasm32-wasip2").exists() {
            fail(
                "the wasm32-wasip2 target is not installed for this toolchain, and the \
                 provider components are built for it. Run `rustup target add wasm32-wasip2` \
                 (or `.ci/run`, which installs everything the build needs), then build again.",
            );
        }
    }
}
