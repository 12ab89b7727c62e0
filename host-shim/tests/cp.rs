//! `sandbox-sync cp`, `doctor` and progress output, through the real binary.
#![allow(clippy::unwrap_used)]

use std::process::{Command, Output};

fn bin() -> Command {
    Command::new(env!("CARGO_BIN_EXE_sandbox-sync"))
}

fn run(args: &[&str]) -> Output {
    bin().args(args).output().unwrap()
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

#[test]
fn cp_both_ways_with_the_local_backend() {
    let tmp = tempfile::tempdir().unwrap();
    let t = |p: &str| tmp.path().join(p).display().to_string();
    std::fs::create_dir_all(tmp.path().join("remote")).unwrap();
    std::fs::create_dir_all(tmp.path().join("ws/sub")).unwrap();
    std::fs::write(tmp.path().join("ws/sub/a.txt"), "a").unwrap();
    std::fs::write(tmp.path().join("ws/b.log"), "b").unwrap();
    std::fs::write(tmp.path().join("secret"), "s").unwrap();

    let out = run(&[
        "cp",
        &t("secret"),
        &format!("local:{}", t("remote/secret")),
        "--mode",
        "600",
        "--json",
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    for key in [
        "direction",
        "source",
        "target",
        "kind",
        "filesTransferred",
        "bytesTransferred",
        "wireBytes",
        "execs",
        "elapsedMs",
    ] {
        assert!(v.get(key).is_some(), "{key} missing from {v}");
    }
    assert_eq!(v["direction"], "in");
    assert_eq!(v["kind"], "file");
    assert_eq!(v["execs"], 1);
    use std::os::unix::fs::PermissionsExt;
    assert_eq!(
        std::fs::metadata(tmp.path().join("remote/secret"))
            .unwrap()
            .permissions()
            .mode()
            & 0o777,
        0o600
    );

    let out = run(&[
        "cp",
        &t("ws"),
        &format!("local:{}", t("remote/ws")),
        "--exclude",
        "*.log",
        "--quiet",
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(
        out.stdout.is_empty() && out.stderr.is_empty(),
        "--quiet prints nothing"
    );
    assert!(tmp.path().join("remote/ws/sub/a.txt").exists());
    assert!(!tmp.path().join("remote/ws/b.log").exists());

    let out = run(&[
        "cp",
        &format!("local:{}", t("remote/ws")),
        &t("back"),
        "--json",
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["direction"], "out");
    assert_eq!(v["kind"], "directory");
    assert_eq!(
        std::fs::read_to_string(tmp.path().join("back/sub/a.txt")).unwrap(),
        "a"
    );

    let out = run(&[
        "cp",
        &format!("local:{}", t("remote/secret")),
        &t("secret-back"),
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(
        stderr(&out).starts_with("copied 1 file(s)"),
        "{}",
        stderr(&out)
    );
    assert_eq!(
        std::fs::read_to_string(tmp.path().join("secret-back")).unwrap(),
        "s"
    );
}

#[test]
fn bad_specs_are_usage_errors() {
    for args in [
        vec!["cp", "/a", "/b"],
        vec!["cp", "pod:/a", "other:/b"],
        vec!["cp", "pod:relative", "/b"],
        vec!["cp", "Bad_Pod:/x", "/b"],
        vec!["cp", "/tmp/x", "local:/x"],
        vec!["cp", "/tmp/x"],
    ] {
        let out = run(&args);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {}", stderr(&out));
        assert!(stderr(&out).contains("error"), "{args:?}");
    }
}

#[test]
fn cp_errors_are_typed_with_a_hint() {
    let tmp = tempfile::tempdir().unwrap();
    let remote = tmp.path().join("remote");
    std::fs::create_dir_all(&remote).unwrap();
    let out = run(&[
        "cp",
        &format!("local:{}/missing", remote.display()),
        &tmp.path().join("x").display().to_string(),
    ]);
    assert_eq!(out.status.code(), Some(1));
    let e = stderr(&out);
    assert!(
        e.starts_with("error[invalid-request]: ")
            && e.contains("missing")
            && e.contains("\nhint: "),
        "{e}"
    );
    let out = run(&[
        "cp",
        "/etc/hostname",
        &format!("local:{}/../escape", remote.display()),
        "--remote-dir",
        &remote.display().to_string(),
        "--json",
    ]);
    assert_eq!(out.status.code(), Some(1));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["error"]["kind"], "confinement", "{v}");
}

#[test]
fn doctor_reports_in_one_exec() {
    let tmp = tempfile::tempdir().unwrap();
    let out = run(&[
        "doctor",
        "--remote-dir",
        &tmp.path().display().to_string(),
        "--json",
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["ok"], true, "{v}");
    assert_eq!(v["facts"]["tar"], "gnu");
    assert_eq!(v["facts"]["head_c"], "exact");
    assert_eq!(v["facts"]["remote_dir"], "writable");
    let out = run(&["doctor", "--remote-dir", "/nonexistent-dir"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stdout).contains("remote dir /nonexistent-dir is missing"));
}

fn slow_copy_args(tmp: &std::path::Path) -> Vec<String> {
    std::fs::create_dir_all(tmp.join("remote")).unwrap();
    std::fs::write(tmp.join("f"), vec![1u8; 1 << 20]).unwrap();
    vec![
        "cp".into(),
        tmp.join("f").display().to_string(),
        format!("local:{}", tmp.join("remote/f").display()),
        "--exec-latency-ms".into(),
        "1600".into(),
    ]
}

#[test]
fn no_progress_bar_off_a_terminal() {
    let tmp = tempfile::tempdir().unwrap();
    let out = bin().args(slow_copy_args(tmp.path())).output().unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let e = stderr(&out);
    assert!(!e.contains("ETA") && !e.contains('\r'), "{e:?}");
}

#[test]
fn progress_bar_under_a_pseudo_terminal() {
    if Command::new("script").arg("--version").output().is_err() {
        panic!("`script` (util-linux) is needed to give the CLI a pseudo-terminal");
    }
    let tmp = tempfile::tempdir().unwrap();
    let args: Vec<String> = slow_copy_args(tmp.path())
        .iter()
        .map(|a| format!("'{a}'"))
        .collect();
    let cmd = format!("{} {}", env!("CARGO_BIN_EXE_sandbox-sync"), args.join(" "));
    let out = Command::new("script")
        .args(["-qfec", &cmd, "/dev/null"])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}");
    assert!(
        text.contains("ETA") && text.contains("1 files"),
        "no progress bar in {text:?}"
    );
    assert!(text.contains("copied 1 file(s)"), "{text:?}");
}
