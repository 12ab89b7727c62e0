//! The script builder's quoting round-trips through a real `sh`: whatever
//! the path, `printf '%s' <quoted>` prints it back byte for byte.
#![no_main]

use std::process::Command;

use libfuzzer_sys::fuzz_target;
use sandbox_sync_core::quote::sh_quote;

fuzz_target!(|s: String| {
    let Ok(quoted) = sh_quote(&s) else {
        assert!(s.contains('\0'), "only NUL may be refused");
        return;
    };
    for sh in ["/bin/sh", "/bin/busybox"] {
        if !std::path::Path::new(sh).exists() {
            continue;
        }
        let mut cmd = Command::new(sh);
        if sh.ends_with("busybox") {
            cmd.arg("sh");
        }
        let out = cmd
            .arg("-c")
            .arg(format!("printf '%s' {quoted}"))
            .output()
            .unwrap();
        assert!(out.status.success(), "{sh} failed on {quoted}");
        assert_eq!(
            out.stdout,
            s.as_bytes(),
            "{sh} changed {s:?} (quoted {quoted})"
        );
    }
});
