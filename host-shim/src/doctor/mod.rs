//! `sandbox-sync doctor`: what the sandbox offers, probed in one exec.

use std::collections::BTreeMap;
use std::time::Duration;

use crate::exec::{ExecBackend, ExecRequest};

/// The probe (`probe.sh`): a constant program taking the remote dir and
/// the scratch prefix as its arguments.
const PROBE: &str = include_str!("probe.sh");

/// What the probe found (`key -> value`), and whether sandbox-sync can work there.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Report {
    /// True when every required facility is present.
    pub ok: bool,
    /// Raw findings.
    pub facts: BTreeMap<String, String>,
    /// Required facilities that are missing, with what they are for.
    pub problems: Vec<String>,
}

/// Why the probe could not run.
#[derive(Debug, thiserror::Error)]
pub enum DoctorError {
    /// The exec did not start or could not be waited for.
    #[error(transparent)]
    Exec(#[from] crate::exec::ExecError),
    /// It ran and failed.
    #[error("the probe failed: {0}")]
    Failed(String),
}

/// Runs the probe through `backend`.
///
/// # Errors
/// When the exec cannot start, its output cannot be read, or it fails.
pub async fn probe(backend: &dyn ExecBackend, remote_dir: &str) -> Result<Report, DoctorError> {
    let req = ExecRequest {
        argv: vec![
            "/bin/sh".into(),
            "-c".into(),
            PROBE.into(),
            "sandbox-sync-doctor".into(),
            remote_dir.into(),
            sandbox_sync_core::SCRATCH_PREFIX.into(),
        ],
        timeout: Duration::from_secs(30),
        max_stderr: 64 << 10,
    };
    let (out, status) = crate::exec::run_short(backend, req, 64 << 10).await?;
    if status.exit_code != Some(0) {
        return Err(DoctorError::Failed(
            String::from_utf8_lossy(&status.stderr).into_owned(),
        ));
    }
    let facts: BTreeMap<String, String> = out
        .lines()
        .filter_map(|l| l.split_once('='))
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .collect();
    let mut problems = Vec::new();
    let has = |k: &str, v: &str| facts.get(k).is_some_and(|x| x == v);
    if has("tar", "missing") {
        problems.push("no tar: needed for every transfer".into());
    }
    if has("head_c", "missing") {
        problems.push("no head -c: needed to read exactly the archive".into());
    }
    if !has("realpath", "yes") && !has("readlink_f", "yes") {
        problems.push("neither realpath nor readlink -f: needed for confinement".into());
    }
    if !has("proc_self_fd", "yes") {
        problems.push("no /proc/self/fd: needed to pin directories".into());
    }
    if !has("dd", "yes") && !has("head_c", "exact") {
        problems.push("no dd and no exact head -c: the script cannot be read".into());
    }
    match facts.get("remote_dir").map(String::as_str) {
        Some("writable") => {}
        Some(other) => problems.push(format!("remote dir {remote_dir} is {other}")),
        None => problems.push("remote dir not checked".into()),
    }
    Ok(Report {
        ok: problems.is_empty(),
        facts,
        problems,
    })
}

impl Report {
    /// A readable report.
    pub fn render(&self, remote_dir: &str) -> String {
        let mut s = String::new();
        let line = |s: &mut String, ok: bool, what: &str, detail: &str| {
            s.push_str(&format!(
                "  {} {what:<28} {detail}\n",
                if ok { "ok " } else { "NO " }
            ));
        };
        let get = |k: &str| self.facts.get(k).map(String::as_str).unwrap_or("?");
        s.push_str(&format!("sandbox-sync doctor (remote dir {remote_dir})\n"));
        line(&mut s, true, "shell", get("shell"));
        line(&mut s, get("tar") != "missing", "tar", get("tar"));
        for f in [
            "--exclude",
            "--no-xattrs",
            "--delay-directory-restore",
            "--null",
        ] {
            let k = format!("tar{f}");
            line(
                &mut s,
                true,
                &format!("  tar {f}"),
                if get(&k) == "yes" {
                    "supported"
                } else {
                    "not supported (not needed)"
                },
            );
        }
        line(
            &mut s,
            get("head_c") != "missing",
            "head -c",
            match get("head_c") {
                "exact" => "exact (GNU)",
                "reads-ahead" => "reads ahead (BusyBox): script read with dd",
                other => other,
            },
        );
        line(
            &mut s,
            get("realpath") == "yes" || get("readlink_f") == "yes",
            "realpath / readlink -f",
            &format!(
                "realpath={} readlink -f={}",
                get("realpath"),
                get("readlink_f")
            ),
        );
        line(
            &mut s,
            get("proc_self_fd") == "yes",
            "/proc/self/fd",
            get("proc_self_fd"),
        );
        for c in ["dd", "mktemp", "base64", "gzip", "zstd"] {
            line(&mut s, true, c, get(c));
        }
        line(&mut s, true, "uid", get("uid"));
        line(
            &mut s,
            get("remote_dir") == "writable",
            "remote dir",
            get("remote_dir"),
        );
        if self.ok {
            s.push_str("\nready: syncs will use one exec each\n");
        } else {
            s.push_str("\nnot ready:\n");
            for p in &self.problems {
                s.push_str(&format!("  - {p}\n"));
            }
        }
        s
    }
}
