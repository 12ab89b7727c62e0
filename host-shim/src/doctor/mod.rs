//! `sandbox-sync doctor`: what the sandbox offers, probed in one exec.

use std::collections::BTreeMap;
use std::time::Duration;

use crate::exec::{ExecBackend, ExecRequest};
pub use crate::provider::Degraded;

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
    /// Features the programs turn off in this sandbox, with the tools
    /// (or device nodes) whose absence turns each off. Syncs still work
    /// without them.
    pub degraded: Vec<Degraded>,
}

/// What each feature is for, as `render` prints it.
const FEATURES: &[(&str, &str)] = &[
    (
        "command-timeouts",
        "a post-upload command's timeoutMs (refused without)",
    ),
    ("command-sessions", "a command's children get its signals"),
    (
        "sandbox-deadline",
        "the program ends itself at the deadline",
    ),
    ("incremental-in-record", "sync-in records what it landed"),
    ("incremental-in-keep", "sync-in keeps unchanged files"),
    ("incremental-out", "sync-out keeps unchanged files"),
    ("compressed-sync-in", "sync-in compressed"),
    ("compressed-sync-out", "sync-out compressed"),
    (
        "measured-compression",
        "auto gzips a sync-out only where that beats the link",
    ),
    ("compressed-listings", "listings gzipped over a link"),
];

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
            sandbox_sync_core::script::SHELL.into(),
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
    if has("head_c", "missing") && !has("tar", "gnu") {
        problems.push("no head -c: needed to bound the archive for a tar other than GNU's".into());
    }
    if !has("realpath", "yes") && !has("readlink_f", "yes") {
        problems.push("neither realpath nor readlink -f: needed for confinement".into());
    }
    for tool in ["mkdir", "mv", "rm"] {
        if has(tool, "no") {
            problems.push(format!("no {tool}: needed to stage and replace targets"));
        }
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
    let degraded = facts
        .iter()
        .filter_map(|(k, v)| {
            let feature = k.strip_prefix("feature.")?;
            let missing = v.strip_prefix("off:")?;
            Some(Degraded {
                feature: feature.to_owned(),
                missing: missing.split(' ').map(str::to_owned).collect(),
            })
        })
        .collect();
    Ok(Report {
        ok: problems.is_empty(),
        facts,
        problems,
        degraded,
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
        for c in ["mkdir", "mv", "rm"] {
            line(&mut s, get(c) == "yes", c, get(c));
        }
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
        s.push_str("features:\n");
        for (feature, what) in FEATURES {
            let off = self.degraded.iter().find(|d| d.feature == *feature);
            let detail = match off {
                None => (*what).to_owned(),
                Some(d) => format!("off (no {}): {what}", d.missing.join(", no ")),
            };
            let mark = if off.is_none() { "ok " } else { "off" };
            s.push_str(&format!("  {mark} {feature:<28} {detail}\n"));
        }
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
