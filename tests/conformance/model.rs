//! Incremental sync is never wrong: a model-based differential test.
//!
//! A seeded random sequence of host edits, sandbox-side actions and syncs
//! in both directions runs against a small tree. After every sync, what
//! the incremental sync landed must be exactly what a full sync
//! (`incremental: false`) lands into a copy: entries, types, contents,
//! modes, mtimes (seconds, as tar carries them) and link targets. The
//! edits are the ones real tools make and metadata hides: same-size
//! rewrites with the mtime put back (to the nanosecond), npm's fixed
//! 1985 mtime, touch, chmod to the same mode, renames, deletes, a file
//! replaced by a directory or a link, hard links, links that leave the
//! tree (created, or in a file's place), all on names of which one is not
//! UTF-8 (a link's target too); in the sandbox a chmod,
//! a link, a touch, a same-size edit, a post-upload `chmod -R`, and a
//! sync-out of the very paths a sync-in landed.
//!
//! `MODEL_STEPS` (default 24) sets the steps per environment and
//! `MODEL_SEED` the seed; a failure prints both and the steps so far.
//! `just model [STEPS]` runs many more.

use std::os::unix::fs::{symlink, MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use sandbox_sync_tests::*;

/// The names the edits play with, in both trees; one is not UTF-8 (see
/// [`raw`]).
const NAMES: &[&str] = &[
    "a.txt",
    "b.txt",
    "d/c.txt",
    "d/e/f.bin",
    "g.txt",
    "d/h.bin",
    "d/caf\u{e9}.txt",
];

/// `name` as a path, each char a byte of its own (Latin-1): `é` is the
/// lone byte 0xe9, so `caf\u{e9}.txt` names a file whose name is not UTF-8.
fn raw(name: &str) -> PathBuf {
    use std::os::unix::ffi::OsStringExt;
    let bytes = name.chars().map(|c| u8::try_from(c).unwrap()).collect();
    PathBuf::from(std::ffi::OsString::from_vec(bytes))
}

/// npm's mtime for every file it unpacks.
fn npm_time() -> SystemTime {
    std::time::UNIX_EPOCH + Duration::from_secs(499_162_500)
}

struct Model<'a> {
    sb: &'a Sandbox,
    u: Env,
    rng: Rng,
    log: Vec<String>,
    seed: u64,
    /// Writers that keep a file mapped, by the path they mapped.
    writers: Vec<(PathBuf, MappedWriter)>,
}

impl Model<'_> {
    fn note(&mut self, what: String) {
        self.log.push(what);
    }

    fn fail(&self, what: &str) -> ! {
        panic!(
            "{what}\nenv {:?}, MODEL_SEED={} after {} steps:\n  {}",
            self.u,
            self.seed,
            self.log.len(),
            self.log.join("\n  ")
        );
    }

    /// Host source of the sync-in directory mapping.
    fn src_in(&self) -> PathBuf {
        self.sb.host.join("src")
    }
    /// Host source of the sync-in file mapping.
    fn big_in(&self) -> PathBuf {
        self.sb.host.join("big.bin")
    }
    /// Sandbox source of the sync-out directory mapping (on the host).
    fn src_out(&self) -> PathBuf {
        self.sb.remote_on_host("out")
    }

    /// One edit of a tree a tool on that side makes; `sandbox`: the tree is
    /// the sandbox's (its entries are given to the sandbox user).
    fn edit(&mut self, root: &Path, sandbox: bool) {
        let name = self.rng.pick(NAMES);
        let p = root.join(raw(name));
        let kind = self.rng.below(14);
        let meta = std::fs::symlink_metadata(&p).ok();
        let file = meta.as_ref().is_some_and(|m| m.is_file());
        let what = match kind {
            // Same size, new bytes, the mtime put back to the nanosecond.
            0 | 1 if file => {
                let m = meta.as_ref().map(|m| m.modified().unwrap());
                let len = std::fs::metadata(&p).unwrap().len() as usize;
                std::fs::write(&p, self.rng.bytes(len)).unwrap();
                set_mtime(&p, m.unwrap());
                "rewrite, same size and mtime"
            }
            // npm: new bytes, same size, the fixed 1985 mtime.
            2 if file => {
                let len = std::fs::metadata(&p).unwrap().len() as usize;
                std::fs::write(&p, self.rng.bytes(len)).unwrap();
                set_mtime(&p, npm_time());
                "npm rewrite"
            }
            3 if file => {
                set_mtime(&p, SystemTime::now());
                "touch"
            }
            4 if file => {
                let mode = [0o644, 0o755, 0o600][self.rng.below(3)];
                std::fs::set_permissions(&p, std::fs::Permissions::from_mode(mode)).unwrap();
                "chmod"
            }
            5 if file => {
                let to = root.join(raw(self.rng.pick(NAMES)));
                if std::fs::rename(&p, &to).is_ok() {
                    self.own(&to, sandbox);
                }
                "rename"
            }
            6 if meta.is_some() => {
                remove(&p);
                "delete"
            }
            7 if file => {
                remove(&p);
                std::fs::create_dir_all(&p).unwrap();
                std::fs::write(p.join("inner.txt"), self.rng.bytes(5)).unwrap();
                self.own(&p, sandbox);
                self.own(&p.join("inner.txt"), sandbox);
                "file to directory"
            }
            8 if meta.is_some() => {
                remove(&p);
                // A target that is not UTF-8 either.
                symlink(raw("caf\u{e9}.txt"), &p).unwrap();
                self.own(&p, sandbox);
                "file to symlink"
            }
            // What agents leave (issue 46): a venv's interpreter, a link
            // out of the tree; a sync-out leaves them out, a sync-in
            // carries them as links.
            11 if meta.is_none() => {
                if let Some(parent) = p.parent() {
                    if std::fs::create_dir_all(parent).is_err() {
                        return;
                    }
                    self.own(parent, sandbox);
                }
                symlink("/usr/bin/python3", &p).unwrap();
                self.own(&p, sandbox);
                "create an escaping link"
            }
            12 if file => {
                remove(&p);
                symlink("../../../outside", &p).unwrap();
                self.own(&p, sandbox);
                "replace a file by an escaping link"
            }
            // numpy.memmap, LMDB, a database (issue 47): a writer that
            // keeps its mapping, whose second write to a page moves no
            // ctime.
            13 if file && meta.as_ref().is_some_and(|m| m.len() > 0) => {
                let len = meta.as_ref().map_or(1, |m| m.len());
                if !self.writers.iter().any(|(w, _)| *w == p) {
                    self.writers.push((p.clone(), MappedWriter::open(&p)));
                }
                let at = self.rng.below(len as usize) as u64;
                let n = 1 + self.rng.below(16);
                let bytes = self.rng.bytes(n);
                if let Some((_, w)) = self.writers.iter_mut().find(|(w, _)| *w == p) {
                    w.write(at, &bytes);
                }
                "write through a mapping"
            }
            9 if file => {
                let to = root.join(raw(self.rng.pick(NAMES)));
                if to != p && std::fs::symlink_metadata(&to).is_ok_and(|m| m.is_file()) {
                    std::fs::remove_file(&to).unwrap();
                    std::fs::hard_link(&p, &to).unwrap();
                }
                "hard link"
            }
            _ => {
                if meta.is_none() {
                    if let Some(parent) = p.parent() {
                        if std::fs::create_dir_all(parent).is_err() {
                            return;
                        }
                        self.own(parent, sandbox);
                    }
                    let len = 1 + self.rng.below(3000);
                    let _ = std::fs::write(&p, self.rng.bytes(len));
                    self.own(&p, sandbox);
                }
                "create"
            }
        };
        let side = if sandbox { "sandbox" } else { "host" };
        self.note(format!("{side} {what} {name}"));
    }

    fn own(&self, p: &Path, sandbox: bool) {
        if sandbox {
            self.sb.give_to_sandbox(p);
        }
    }

    /// What the sandbox does to a tree a sync-in landed there: metadata
    /// changes that leave a file's contents, an edit that hides, and what
    /// an agent adds or locks (the next sync-in replaces it all).
    fn sandbox_action(&mut self) {
        let name = self.rng.pick(NAMES);
        let p = self.sb.remote_on_host("in").join(raw(name));
        let action = self.rng.below(8);
        if action >= 5 {
            let what = self.sandbox_addition(action, &p);
            self.note(format!("sandbox {what} in/{name}"));
            return;
        }
        if !std::fs::symlink_metadata(&p).is_ok_and(|m| m.is_file()) {
            return;
        }
        let what = match action {
            0 => {
                let mode = std::fs::metadata(&p).unwrap().permissions();
                std::fs::set_permissions(&p, mode).unwrap();
                "chmod to the same mode"
            }
            1 => {
                let l = p.with_extension("lnk");
                std::fs::hard_link(&p, &l).unwrap();
                std::fs::remove_file(&l).unwrap();
                "link and unlink"
            }
            2 => {
                set_mtime(&p, SystemTime::now());
                "touch"
            }
            3 => {
                let m = std::fs::metadata(&p).unwrap();
                std::fs::write(&p, self.rng.bytes(m.len() as usize)).unwrap();
                set_mtime(&p, m.modified().unwrap());
                "same-size edit, mtime put back"
            }
            _ => {
                remove(&p);
                "delete"
            }
        };
        self.note(format!("sandbox {what} in/{name}"));
    }

    /// The agent's own changes beside what landed: a stray file in a
    /// directory that landed, a file turned into a directory, and a
    /// directory made read-only (as `go mod download` leaves its cache).
    fn sandbox_addition(&mut self, action: usize, p: &Path) -> &'static str {
        let Some(parent) = p.parent().filter(|d| d.is_dir()) else {
            return "nothing";
        };
        match action {
            5 => {
                let stray = parent.join("stray.out");
                std::fs::write(&stray, self.rng.bytes(7)).unwrap();
                self.sb.give_to_sandbox(&stray);
                "stray file beside"
            }
            6 if p.is_file() => {
                remove(p);
                std::fs::create_dir_all(p.join("x")).unwrap();
                self.sb.give_to_sandbox(p);
                self.sb.give_to_sandbox(&p.join("x"));
                "file to directory"
            }
            _ => {
                let mode = [0o555, 0o500, 0o755][self.rng.below(3)];
                std::fs::set_permissions(parent, std::fs::Permissions::from_mode(mode)).unwrap();
                "lock the directory of"
            }
        }
    }

    fn sync_in(&mut self) {
        let command = self.rng.below(4) == 0;
        let sync = |target: &str, big: &str, incremental: bool| {
            let mut o = op(
                "in",
                vec![
                    dir(self.src_in(), self.sb.remote(target)),
                    file(self.big_in(), self.sb.remote(big)),
                ],
            );
            if command {
                o.post_upload_commands = Some(vec![PostUploadCommand {
                    command: "chmod -R go-w .".into(),
                    cwd: Some(self.sb.remote(target)),
                    timeout_ms: None,
                }]);
            }
            let mut opts = self.sb.options();
            opts.incremental = incremental;
            self.sb.sync_in_with(&[o], &opts)
        };
        let inc = sync("in", "fin/big.bin", true);
        let full = sync("in-full", "fin-full/big.bin", false);
        self.note(format!(
            "sync-in{}: sent {:?}",
            if command { " with chmod -R go-w" } else { "" },
            inc.as_ref().map(|o| o.operations[0].files_transferred)
        ));
        match (inc, full) {
            (Ok(_), Ok(_)) => {}
            (a, b) => self.fail(&format!("sync-in failed: incremental {a:?}, full {b:?}")),
        }
        self.compare(
            &self.sb.remote_on_host("in"),
            &self.sb.remote_on_host("in-full"),
        );
        self.compare(
            &self.sb.remote_on_host("fin"),
            &self.sb.remote_on_host("fin-full"),
        );
    }

    fn sync_out(&mut self) {
        let sync = |target: &Path, big: &Path, incremental: bool| {
            let o = op(
                "out",
                vec![
                    dir_out(self.sb.remote("out"), target),
                    file_out(self.sb.remote("outf/big.bin"), big),
                ],
            );
            let mut opts = self.sb.options();
            opts.incremental = incremental;
            self.sb.sync_out_with(&[o], &opts)
        };
        let h = &self.sb.host;
        let inc = sync(&h.join("back"), &h.join("backf/big.bin"), true);
        let full = sync(&h.join("back-full"), &h.join("backf-full/big.bin"), false);
        self.note(format!(
            "sync-out: sent {:?}",
            inc.as_ref().map(|o| o.operations[0].files_transferred)
        ));
        match (inc, full) {
            (Ok(_), Ok(_)) => {}
            (a, b) => self.fail(&format!("sync-out failed: incremental {a:?}, full {b:?}")),
        }
        self.compare(&h.join("back"), &h.join("back-full"));
        self.compare(&h.join("backf"), &h.join("backf-full"));
    }

    /// A sync-out of what the last sync-in landed (it must not disturb
    /// the next sync-in's judgement).
    fn sync_out_of_in(&mut self) {
        let o = op(
            "back-in",
            vec![dir_out(self.sb.remote("in"), self.sb.host.join("x"))],
        );
        let r = self.sb.sync_out(&[o]);
        self.note(format!(
            "sync-out of in: {:?}",
            r.as_ref().map(|o| o.operations[0].files_transferred)
        ));
        if let Err(e) = r {
            self.fail(&format!("sync-out of in failed: {e:?}"));
        }
    }

    /// What the host does to a sync-out target after it landed.
    fn host_target_action(&mut self) {
        let name = self.rng.pick(NAMES);
        let p = self.sb.host.join("back").join(raw(name));
        if !std::fs::symlink_metadata(&p).is_ok_and(|m| m.is_file()) {
            return;
        }
        let what = match self.rng.below(3) {
            0 => {
                let m = std::fs::metadata(&p).unwrap();
                std::fs::write(&p, self.rng.bytes(m.len() as usize)).unwrap();
                set_mtime(&p, m.modified().unwrap());
                "same-size edit, mtime put back"
            }
            1 => {
                let mode = std::fs::metadata(&p).unwrap().permissions();
                std::fs::set_permissions(&p, mode).unwrap();
                "chmod to the same mode"
            }
            _ => {
                set_mtime(&p, SystemTime::now());
                "touch"
            }
        };
        self.note(format!("host {what} back/{name}"));
    }

    /// The two trees hold the same entries: types, contents, modes, mtimes
    /// (seconds) and link targets.
    fn compare(&self, inc: &Path, full: &Path) {
        let (a, b) = (describe(inc), describe(full));
        if a != b {
            let only = |x: &Vec<(String, String)>, y: &Vec<(String, String)>| {
                x.iter()
                    .filter(|e| !y.contains(e))
                    .cloned()
                    .collect::<Vec<_>>()
            };
            self.fail(&format!(
                "{} differs from a full sync's {}:\n  incremental only: {:?}\n  full only: {:?}",
                inc.display(),
                full.display(),
                only(&a, &b),
                only(&b, &a)
            ));
        }
    }
}

fn remove(p: &Path) {
    match std::fs::symlink_metadata(p) {
        Ok(m) if m.is_dir() => std::fs::remove_dir_all(p).unwrap(),
        Ok(_) => std::fs::remove_file(p).unwrap(),
        Err(_) => {}
    }
}

/// Whether the provider under test carries mtimes (the tar-stream one
/// does; the base64 fallback does not).
fn carries_mtimes() -> bool {
    runtime()
        .info()
        .capabilities
        .iter()
        .any(|c| c == "tar-stream")
}

/// Every entry under `root`, sorted, as (path, what it is).
fn describe(root: &Path) -> Vec<(String, String)> {
    let mut out = Vec::new();
    walk(root, &mut |p| {
        // Debug: a name that is not UTF-8 shows its bytes.
        let rel = format!("{:?}", p.strip_prefix(root).unwrap());
        let m = std::fs::symlink_metadata(p).unwrap();
        let what = if m.is_symlink() {
            format!("link {:?}", std::fs::read_link(p).unwrap())
        } else if m.is_dir() {
            format!("dir {:o}", m.mode() & 0o7777)
        } else {
            let bytes = std::fs::read(p).unwrap();
            let sum = bytes.iter().fold(0u64, |h, &b| {
                h.wrapping_mul(1_099_511_628_211) ^ u64::from(b)
            });
            // The base64 fallback lands files with the time they land, so
            // its two syncs agree on mtimes only within the same second.
            let mtime = if carries_mtimes() {
                m.mtime().to_string()
            } else {
                "-".into()
            };
            format!(
                "file {:o} {} {:x} {mtime}",
                m.mode() & 0o7777,
                bytes.len(),
                sum,
            )
        };
        out.push((rel, what));
    });
    out.sort();
    out
}

fn seed_tree(m: &mut Model<'_>) {
    let old = SystemTime::now() - Duration::from_secs(3600);
    for root in [m.src_in(), m.src_out()] {
        let sandbox = root == m.src_out();
        for name in NAMES {
            let p = root.join(raw(name));
            std::fs::create_dir_all(p.parent().unwrap()).unwrap();
            let len = 1 + m.rng.below(4000);
            std::fs::write(&p, m.rng.bytes(len)).unwrap();
            set_mtime(&p, old);
        }
        if sandbox {
            m.sb.write_remote("out/.keep", b"");
            walk(&root, &mut |p| m.sb.give_to_sandbox(p));
        }
    }
    // Over 1 MiB, so a toolbox sandbox reports what it holds too.
    std::fs::write(m.big_in(), m.rng.bytes(1_200_000)).unwrap();
    set_mtime(&m.big_in(), old);
    let big = m.sb.write_remote("outf/big.bin", &m.rng.bytes(40_000));
    set_mtime(&big, old);
}

fn model(u: Env) {
    let steps: usize = std::env::var("MODEL_STEPS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(24);
    let seed = std::env::var("MODEL_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| {
            // A fixed seed per environment (FNV-1a of its name).
            format!("{u:?}")
                .bytes()
                .fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
                    (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3)
                })
        });
    let sb = Sandbox::new(u);
    let mut m = Model {
        sb: &sb,
        u,
        rng: Rng(seed | 1),
        log: Vec::new(),
        seed,
        writers: Vec::new(),
    };
    seed_tree(&mut m);
    settle();
    m.sync_in();
    m.sync_out();
    for _ in 0..steps {
        match m.rng.below(12) {
            0..=2 => {
                let root = m.src_in();
                m.edit(&root, false);
            }
            3 | 4 => {
                let root = m.src_out();
                m.edit(&root, true);
            }
            5 => m.sandbox_action(),
            6 => m.host_target_action(),
            7 => {
                // Let identities settle, so the next sync keeps what it may.
                settle();
                m.note("settle".into());
            }
            8 => m.sync_out_of_in(),
            9 | 10 => m.sync_in(),
            _ => m.sync_out(),
        }
    }
    m.sync_in();
    m.sync_out();
    assert!(sb.scratch_left().is_empty(), "{:?}", sb.scratch_left());
}

for_each_userland!(model);
