//! `sandbox-sync demo`: a sample workspace in, a command, results out.

use std::os::unix::fs::{symlink, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::Context as _;
use sandbox_sync_host::exec::local::LocalBackend;
use sandbox_sync_host::exec::ExecBackend;
use sandbox_sync_host::{
    FileMapping, MappingKind, PostUploadCommand, Runtime, SyncOperation, SyncOptions, SyncOutcome,
};

pub async fn run() -> anyhow::Result<()> {
    let tmp = tempfile::Builder::new()
        .prefix("sandbox-sync-demo-")
        .tempdir()?;
    let host = tmp.path().join("host");
    let ws = host.join("workspace");
    std::fs::create_dir_all(ws.join("src"))?;
    std::fs::create_dir_all(ws.join("empty"))?;
    std::fs::create_dir_all(ws.join("logs"))?;
    std::fs::write(ws.join("src/main.py"), "print('hello from the sandbox')\n")?;
    std::fs::write(ws.join("README.md"), "# demo workspace\n")?;
    std::fs::write(ws.join("logs/debug.log"), "excluded\n")?;
    symlink("src/main.py", ws.join("latest.py"))?;
    let secret = host.join("token");
    std::fs::write(&secret, "s3cr3t\n")?;
    std::fs::set_permissions(&secret, std::fs::Permissions::from_mode(0o600))?;

    let (backend, remote, remote_on_host, what): (Arc<dyn ExecBackend>, String, PathBuf, String) =
        match busybox_root(tmp.path())? {
            Some(root) => (
                Arc::new(LocalBackend::sandbox_root(&root)?.user(65534)),
                "/workspace".into(),
                root.join("workspace"),
                format!(
                    "a BusyBox sandbox root at {} (jailed: own namespaces, pivot_root, uid 65534)",
                    root.display()
                ),
            ),
            None => {
                let r = tmp.path().join("sandbox/workspace");
                std::fs::create_dir_all(&r)?;
                (
                    Arc::new(LocalBackend::host()),
                    r.display().to_string(),
                    r.clone(),
                    "host /bin/sh (not root or no busybox: no chroot)".into(),
                )
            }
        };
    println!("sandbox: {what}");
    println!("remote dir: {remote}\n");

    let runtime = Runtime::embedded()
        .await
        .context("loading the provider component")?;
    let info = runtime.info();
    println!(
        "provider: {} {} (WIT {}), capabilities: {}\n",
        info.name,
        info.version,
        info.wit_version,
        info.capabilities.join(", ")
    );

    let opts = SyncOptions::new(remote.clone());
    let ops = vec![SyncOperation {
        operation_id: "demo-in".into(),
        files: vec![
            FileMapping {
                source_path: path(&ws),
                target_path: format!("{remote}/project"),
                kind: MappingKind::Directory,
                mode: None,
                exclude: Some(vec!["*.log".into()]),
                follow_symlinks: None,
            },
            FileMapping {
                source_path: path(&secret),
                target_path: format!("{remote}/.config/token"),
                kind: MappingKind::File,
                mode: Some(0o600),
                exclude: None,
                follow_symlinks: None,
            },
        ],
        post_upload_commands: Some(vec![PostUploadCommand {
            command: "mkdir -p out && { echo \"built in $(pwd -P)\"; ls -A; } > out/report.txt"
                .into(),
            cwd: Some(format!("{remote}/project")),
            timeout_ms: Some(10_000),
        }]),
    }];
    let t = std::time::Instant::now();
    let r = runtime
        .sync_in(&ops, &opts, backend.clone())
        .await
        .map_err(|f| anyhow::anyhow!("{}", f.error))?;
    print_outcome("sync-in", &r, t.elapsed());
    print_tree("sandbox after sync-in", &remote_on_host)?;

    let results = host.join("results");
    let out = vec![SyncOperation {
        operation_id: "demo-out".into(),
        files: vec![FileMapping {
            source_path: format!("{remote}/project/out"),
            target_path: path(&results),
            kind: MappingKind::Directory,
            mode: None,
            exclude: None,
            follow_symlinks: None,
        }],
        post_upload_commands: None,
    }];
    let t = std::time::Instant::now();
    let r = runtime
        .sync_out(&out, &opts, backend)
        .await
        .map_err(|f| anyhow::anyhow!("{}", f.error))?;
    println!();
    print_outcome("sync-out", &r, t.elapsed());
    println!(
        "{}:\n{}",
        results.join("report.txt").display(),
        std::fs::read_to_string(results.join("report.txt"))?
    );
    Ok(())
}

/// One line per call and per operation, as a person reads it.
fn print_outcome(what: &str, r: &SyncOutcome, took: std::time::Duration) {
    println!(
        "{what}: {} exec(s) for {} operation(s), {:.0?}",
        r.execs,
        r.operations.len(),
        took
    );
    for op in &r.operations {
        println!(
            "  {}: {} file(s), {} bytes",
            op.operation_id, op.files_transferred, op.bytes_transferred
        );
    }
}

fn path(p: &Path) -> String {
    p.display().to_string()
}

/// A BusyBox sandbox root, when we may chroot (root) and busybox-static exists.
fn busybox_root(tmp: &Path) -> anyhow::Result<Option<PathBuf>> {
    let busybox = Path::new("/bin/busybox");
    if !rustix::process::geteuid().is_root() || !busybox.exists() {
        return Ok(None);
    }
    let root = tmp.join("sandbox-root");
    std::fs::create_dir_all(root.join("bin"))?;
    std::fs::copy(busybox, root.join("bin/busybox"))?;
    let status = std::process::Command::new(root.join("bin/busybox"))
        .args(["--install", "-s"])
        .arg(root.join("bin"))
        .status()?;
    anyhow::ensure!(status.success(), "busybox --install failed");
    for applet in std::fs::read_dir(root.join("bin"))? {
        let applet = applet?.path();
        if std::fs::read_link(&applet).is_ok() {
            std::fs::remove_file(&applet)?;
            symlink("busybox", &applet)?;
        }
    }
    std::fs::create_dir_all(root.join("workspace"))?;
    std::fs::set_permissions(
        root.join("workspace"),
        std::fs::Permissions::from_mode(0o777),
    )?;
    Ok(Some(root))
}

fn print_tree(title: &str, dir: &Path) -> anyhow::Result<()> {
    println!("{title}:");
    let mut stack = vec![dir.to_path_buf()];
    let mut lines = Vec::new();
    while let Some(d) = stack.pop() {
        let mut entries: Vec<_> = std::fs::read_dir(&d)?.collect::<Result<_, _>>()?;
        entries.sort_by_key(|e| e.file_name());
        for e in entries {
            let p = e.path();
            let meta = std::fs::symlink_metadata(&p)?;
            let rel = p.strip_prefix(dir).unwrap_or(&p).display().to_string();
            let desc = if meta.file_type().is_symlink() {
                format!("-> {}", std::fs::read_link(&p)?.display())
            } else if meta.is_dir() {
                stack.push(p.clone());
                "dir".into()
            } else {
                format!("{} bytes", meta.len())
            };
            lines.push(format!(
                "  {:04o}  {rel}  {desc}",
                meta.permissions().mode() & 0o7777
            ));
        }
    }
    lines.sort();
    println!("{}", lines.join("\n"));
    Ok(())
}
