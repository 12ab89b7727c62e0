//! A racer inside the sandbox swaps a directory for a symlink pointing
//! outside (and back) while syncs run: nothing may ever be written outside
//! the remote dir, and sync-out may never deliver a file from outside.

use std::process::Stdio;

use sandbox_sync_host::exec::local::LocalBackend;
use sandbox_sync_tests::*;

fn iterations() -> usize {
    std::env::var("RACE_ITERATIONS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(200)
}

/// Stops the racer however the test ends (a leaked racer spins forever).
struct Racer(std::process::Child);

impl Drop for Racer {
    /// Kills the racer's whole process group (it leads one), not just its
    /// shell, and waits until none of it is left: an `mv` or `ln` still
    /// running would recreate entries while the test's temp dir is being
    /// removed, and that dir would then be left behind.
    fn drop(&mut self) {
        let group = i32::try_from(self.0.id())
            .ok()
            .and_then(rustix::process::Pid::from_raw);
        if let Some(group) = group {
            let _ = rustix::process::kill_process_group(group, rustix::process::Signal::KILL);
        }
        let _ = self.0.kill();
        let _ = self.0.wait();
        // The group's other members are reparented, and not always reaped
        // (a container's init may not): wait until each is dead or a zombie.
        if let Some(group) = group {
            let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
            while group_runs(group.as_raw_nonzero().get()) && std::time::Instant::now() < deadline {
                std::thread::sleep(std::time::Duration::from_millis(5));
            }
        }
    }
}

/// Whether a process of group `group` is still running (not a zombie), by /proc.
fn group_runs(group: i32) -> bool {
    let Ok(procs) = std::fs::read_dir("/proc") else {
        return false;
    };
    procs.flatten().any(|p| {
        // `pid (comm) state ppid pgrp ...`: comm may hold spaces, so split after its `)`.
        let stat = std::fs::read_to_string(p.path().join("stat")).unwrap_or_default();
        let fields: Vec<&str> = stat
            .rsplit_once(')')
            .map_or(Vec::new(), |(_, rest)| rest.split_whitespace().collect());
        matches!(fields.as_slice(), [state, _ppid, pgrp, ..] if *pgrp == group.to_string() && *state != "Z" && *state != "X")
    })
}

/// Starts the racer as a sandbox process (same chroot and uid as syncs).
fn racer(sb: &Sandbox, dir: &str, outside: &str) -> Racer {
    let local = match sb.userland {
        Userland::Gnu => LocalBackend::host(),
        _ => LocalBackend::sandbox_root(sb.on_host("/"))
            .unwrap()
            .user(SANDBOX_UID),
    };
    let script = format!(
        "cd '{}' || exit 1; while :; do mv d d.real 2>/dev/null; ln -s '{outside}' d 2>/dev/null; rm -f d 2>/dev/null; mv d.real d 2>/dev/null; done",
        dir
    );
    let cmd = local
        .command(&["/bin/sh".into(), "-c".into(), script])
        .unwrap();
    let mut cmd: std::process::Command = cmd.into_std();
    cmd.stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    Racer(cmd.spawn().unwrap())
}

fn stop(r: Racer) {
    drop(r);
}

fn racing_sync_in(u: Env) {
    let sb = Sandbox::new(u);
    std::fs::create_dir_all(sb.remote_on_host("d/sub")).unwrap();
    sb.give_to_sandbox(&sb.remote_on_host("d"));
    sb.give_to_sandbox(&sb.remote_on_host("d/sub"));
    let src = sb.write_host("payload", b"payload");
    sb.write_host("tree/x", b"x");
    let r = racer(&sb, &sb.remote, &sb.outside);
    let (mut ok, mut refused) = (0, 0);
    for i in 0..iterations() {
        let ops = [op(
            &format!("o{i}"),
            vec![
                file(&src, sb.remote(&format!("d/sub/f{i}"))),
                dir(sb.host.join("tree"), sb.remote(&format!("d/t{i}"))),
            ],
        )];
        match sb.sync_in(&ops) {
            Ok(_) => ok += 1,
            Err(f) => {
                assert!(
                    matches!(
                        f.error.kind,
                        ErrorKind::Confinement | ErrorKind::CommandFailed
                    ),
                    "{}",
                    f.error
                );
                refused += 1;
            }
        }
        assert!(
            sb.outside_entries().is_empty(),
            "iteration {i}: wrote outside: {:?}",
            sb.outside_entries()
        );
    }
    stop(r);
    assert!(
        sb.outside_entries().is_empty(),
        "{:?}",
        sb.outside_entries()
    );
    eprintln!("{u:?}: {ok} applied, {refused} refused");
}

fn racing_sync_out(u: Env) {
    let sb = Sandbox::new(u);
    sb.write_remote("d/secret.txt", b"inside");
    let outside_secret = sb.on_host(&format!("{}/secret.txt", sb.outside));
    std::fs::write(&outside_secret, b"OUTSIDE").unwrap();
    let r = racer(&sb, &sb.remote, &sb.outside);
    let (mut ok, mut refused) = (0, 0);
    for i in 0..iterations() {
        let target = sb.host.join(format!("out/{i}"));
        let ops = [op(
            "o",
            vec![
                file_out(sb.remote("d/secret.txt"), target.join("file")),
                dir_out(sb.remote("d"), target.join("dir")),
            ],
        )];
        match sb.sync_out(&ops) {
            Ok(_) => ok += 1,
            Err(f) => {
                assert!(
                    matches!(
                        f.error.kind,
                        ErrorKind::Confinement
                            | ErrorKind::CommandFailed
                            | ErrorKind::InvalidRequest
                    ),
                    "{}",
                    f.error
                );
                refused += 1;
            }
        }
        walk(&target, &mut |p| {
            if p.is_file() {
                assert_ne!(
                    std::fs::read(p).unwrap(),
                    b"OUTSIDE",
                    "iteration {i}: exfiltrated {}",
                    p.display()
                );
            }
        });
    }
    stop(r);
    assert_eq!(std::fs::read(&outside_secret).unwrap(), b"OUTSIDE");
    eprintln!("{u:?}: {ok} delivered, {refused} refused");
}

sandbox_sync_tests::for_each_userland!(local: racing_sync_in, racing_sync_out);
