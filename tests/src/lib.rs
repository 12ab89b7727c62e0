//! Test support for the end-to-end conformance suite.
//!
//! A [`Sandbox`] is a real local sandbox — real `sh` and `tar` — with a
//! remote dir, a directory outside it (for escape attempts) and a host-side
//! work dir for sources and targets. [`Userland::Gnu`] runs the host's
//! `/bin/sh` with GNU coreutils and tar (as the seeds' own harness does);
//! [`Userland::BusyBox`] chroots into a BusyBox root with new mount and PID
//! namespaces and runs as uid 65534, the way a minimal pod would.
//!
//! Sync calls go through the real shim and the real component
//! ([`sandbox_sync_host::Runtime::embedded`], or a `.wasm` named by
//! `SANDBOX_SYNC_COMPONENT` so other components can be plugged in).

pub mod daytona_server;
pub mod hostile;
pub mod k8s_server;
pub mod mapped;
pub use mapped::MappedWriter;

use std::os::unix::fs::{symlink, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};

use sandbox_sync_host::exec::local::LocalBackend;
use sandbox_sync_host::exec::ExecBackend;
pub use sandbox_sync_host::provider::SyncFailure;
pub use sandbox_sync_host::{
    ErrorKind, FileMapping, MappingKind, OperationResult, PostUploadCommand, Runtime,
    SyncOperation, SyncOptions, SyncOutcome,
};

/// Which userland the sandbox has.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Userland {
    /// The host's `/bin/sh`, GNU coreutils and GNU tar, no chroot.
    Gnu,
    /// Debian's busybox-static in a chroot, as uid 65534.
    BusyBox,
    /// A chroot (as uid 65534) holding only these tools: dash as `sh`, and
    /// each named host binary with the libraries it loads; `busybox:NAME`
    /// is BusyBox's applet (GNU tar with BusyBox `head`, say). BusyBox's
    /// own shell runs its applets whatever `PATH` holds, so a tool can only
    /// be missing from a sandbox whose shell is not BusyBox. `fake:NAME` is
    /// a scripted stand-in (see `fake_tool`).
    Tools(&'static [&'static str]),
}

impl Userland {
    /// Whether the sandbox is a chroot of its own (else the host's `/`).
    pub fn is_jailed(self) -> bool {
        self != Userland::Gnu
    }
}

/// How the component reaches the sandbox.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Transport {
    /// The local exec backend.
    Local,
    /// The real kube client against a Kubernetes-exec-protocol server that
    /// runs each exec the way the local backend would.
    Kube(k8s_server::Protocol),
    /// The real Daytona toolbox client against a fake toolbox
    /// ([`daytona_server`]) that runs each request the way the local
    /// backend would.
    Daytona,
}

/// One environment the conformance suite runs in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Env {
    /// The sandbox's userland.
    pub userland: Userland,
    /// How execs reach it.
    pub transport: Transport,
}

/// The host's GNU userland over the local backend, for tests that need one
/// environment only.
pub const GNU_LOCAL: Env = Env {
    userland: Userland::Gnu,
    transport: Transport::Local,
};

/// The uid BusyBox sandboxes run as.
pub const SANDBOX_UID: u32 = 65534;

fn tokio() -> &'static tokio::runtime::Runtime {
    static RT: OnceLock<tokio::runtime::Runtime> = OnceLock::new();
    RT.get_or_init(|| {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .expect("tokio runtime")
    })
}

/// Runs `f` to completion on the shared runtime.
pub fn block_on<F: std::future::Future>(f: F) -> F::Output {
    tokio().block_on(f)
}

/// The provider under test, loaded once per test process: the embedded
/// tar-stream component, or `SANDBOX_SYNC_PROVIDER=fallback` for the base64
/// fallback, or `SANDBOX_SYNC_COMPONENT=FILE.wasm` for any other.
pub fn runtime() -> &'static Runtime {
    static RUNTIME: OnceLock<Runtime> = OnceLock::new();
    RUNTIME.get_or_init(|| {
        block_on(async {
            if let Some(p) = std::env::var_os("SANDBOX_SYNC_COMPONENT") {
                return Runtime::from_file(Path::new(&p)).await;
            }
            match std::env::var("SANDBOX_SYNC_PROVIDER").as_deref() {
                Ok("fallback") => {
                    Runtime::from_file(Path::new(
                        sandbox_sync_host::runtime::FALLBACK_COMPONENT_PATH,
                    ))
                    .await
                }
                _ => Runtime::embedded().await,
            }
        })
        .expect("load the provider component")
    })
}

/// Waits out the clock tick: a file written just before a sync and
/// rewritten just after it shows a new ctime. (Files changed within
/// `RACY_NS` of a sync are named by their content besides, so no test
/// needs to wait that out.)
pub fn settle() {
    std::thread::sleep(std::time::Duration::from_millis(150));
}

/// Sets the modification time of the file at `p`.
pub fn set_mtime(p: &Path, t: std::time::SystemTime) {
    // A directory opens read-only (its owner may set its times).
    std::fs::File::options()
        .write(!p.is_dir())
        .read(p.is_dir())
        .open(p)
        .and_then(|f| f.set_modified(t))
        .unwrap_or_else(|e| panic!("set the mtime of {}: {e}", p.display()));
}

/// A small seeded generator (xorshift64*) for the randomized tests and
/// the benchmark's workloads: a seed gives the same sequence anywhere, so
/// every case is reproducible from its seed.
pub struct Rng(pub u64);

impl Rng {
    /// The next 64 bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    /// A number in `0..n` (`n` > 0).
    pub fn below(&mut self, n: usize) -> usize {
        (self.next_u64() % n as u64) as usize
    }

    /// One of `of` (not empty).
    pub fn pick<'a>(&mut self, of: &[&'a str]) -> &'a str {
        of[self.below(of.len())]
    }

    /// `n` bytes, each from the high half of one draw.
    pub fn bytes(&mut self, n: usize) -> Vec<u8> {
        (0..n).map(|_| (self.next_u64() >> 32) as u8).collect()
    }

    /// Fills `buf` with draws, eight bytes (little-endian) at a time.
    pub fn fill(&mut self, buf: &mut [u8]) {
        for chunk in buf.chunks_mut(8) {
            let v = self.next_u64().to_le_bytes();
            chunk.copy_from_slice(&v[..chunk.len()]);
        }
    }
}

/// `len` deterministic bytes that no codec compresses (xorshift64), for
/// tests that cut or count a stream at a byte offset.
pub fn incompressible(len: usize) -> Vec<u8> {
    let mut x = 0x9E37_79B9_7F4A_7C15u64;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x >> 24) as u8
        })
        .collect()
}

/// The sandbox's record of what incremental sync-in landed, at the top of
/// the remote dir.
pub use sandbox_sync_core::LEGACY_STATE_FILE;

/// The trees under `a` and `b` hold the same entries: types, file contents
/// and modes, link targets.
pub fn assert_same_tree(a: &std::path::Path, b: &std::path::Path) {
    let list = |root: &std::path::Path| {
        let mut v = Vec::new();
        walk(root, &mut |p| {
            let rel = p.strip_prefix(root).expect("walked under root");
            v.push(rel.to_owned())
        });
        v.sort();
        v
    };
    let (la, lb) = (list(a), list(b));
    assert_eq!(la, lb);
    for rel in la {
        let (pa, pb) = (a.join(&rel), b.join(&rel));
        let (ma, mb) = (
            std::fs::symlink_metadata(&pa).expect("lstat"),
            std::fs::symlink_metadata(&pb).expect("lstat"),
        );
        assert_eq!(ma.file_type(), mb.file_type(), "{rel:?}");
        if ma.is_symlink() {
            assert_eq!(
                std::fs::read_link(&pa).expect("readlink"),
                std::fs::read_link(&pb).expect("readlink")
            );
        } else if ma.is_file() {
            assert!(
                std::fs::read(&pa).expect("read") == std::fs::read(&pb).expect("read"),
                "{rel:?}"
            );
            assert_eq!(mode(&pa), mode(&pb), "{rel:?}");
        }
    }
}

/// A named change to make to a sandbox or its host, for tests that try
/// several in turn.
pub type Edit<'a> = (&'a str, &'a dyn Fn(&Sandbox));

/// What a directory target is, entry by entry: type, contents, modes
/// (directories' too) and link targets.
pub fn shape(root: &Path) -> Vec<(String, String)> {
    let mut out = Vec::new();
    walk(root, &mut |p| {
        let rel = p
            .strip_prefix(root)
            .expect("walked under root")
            .display()
            .to_string();
        let m = std::fs::symlink_metadata(p).expect("lstat");
        let what = if m.is_symlink() {
            format!("link {:?}", std::fs::read_link(p).expect("readlink"))
        } else if m.is_dir() {
            format!("dir {:o}", mode(p))
        } else {
            format!("file {:o} {:?}", mode(p), std::fs::read(p).expect("read"))
        };
        out.push((rel, what));
    });
    out.sort();
    out
}

/// Options for a sync into or out of `remote`: the defaults, with the
/// transport compression `SANDBOX_SYNC_COMPRESS` names (`auto`, `gzip`,
/// `zstd`, `none`) and incremental sync-in as `SANDBOX_SYNC_INCREMENTAL`
/// (`0`, `1`) says, so every test can run with either.
pub fn sync_options(remote: impl Into<String>) -> SyncOptions {
    let mut opts = SyncOptions::new(remote);
    if let Ok(c) = std::env::var("SANDBOX_SYNC_COMPRESS") {
        opts.compress = c
            .parse()
            .expect("SANDBOX_SYNC_COMPRESS: auto, gzip, zstd or none");
    }
    match std::env::var("SANDBOX_SYNC_INCREMENTAL").as_deref() {
        Ok("0") => opts.incremental = false,
        Ok("1") => opts.incremental = true,
        Ok(other) => panic!("SANDBOX_SYNC_INCREMENTAL: 0 or 1, not {other:?}"),
        Err(_) => {}
    }
    opts
}

/// True when the provider under test compresses transfers it is asked to
/// (the base64 fallback does not).
pub fn compresses() -> bool {
    has_capability("transport-compression")
}

/// True when the provider under test keeps unchanged files on a re-sync
/// (the base64 fallback sends everything).
pub fn keeps_unchanged(u: Env) -> bool {
    // A toolbox sandbox cannot report what it holds before the upload
    // without one more round trip; it is sent everything.
    has_capability("incremental") && u.transport != Transport::Daytona
}

/// True when an incremental sync-out into a target that holds nothing yet
/// already records what it landed, so the next one keeps it: over a
/// network link. A local sandbox lists its sources only once a target
/// holds something (a listing costs more than it saves on this machine),
/// so there the second sync-out records and the third keeps.
pub fn records_first_sync_out(u: Env) -> bool {
    u.transport != Transport::Local
}

/// True when the provider under test advertises capability `name`.
pub fn has_capability(name: &str) -> bool {
    runtime().info().capabilities.iter().any(|c| c == name)
}

/// The execs of a sync-in that sends at least 1 MiB in `u`: on a toolbox
/// sandbox, with `incremental`, the provider first asks what the targets
/// hold (one more command) so as to leave it out.
pub fn big_sync_in_execs(u: Env, incremental: bool) -> u64 {
    1 + u64::from(u.transport == Transport::Daytona && incremental && has_capability("toolbox"))
}

/// The execs of a sync-out of directories in `u` under the default options
/// (`SANDBOX_SYNC_INCREMENTAL` may turn incremental off): incremental, a
/// toolbox sandbox lists its sources in a command of its own first, since
/// the program cannot take the host's answer while it runs.
pub fn incremental_sync_out_execs(u: Env) -> u64 {
    sync_out_execs(u, sync_options("/").incremental)
}

/// The same for a sync-out whose options set `incremental` themselves.
pub fn sync_out_execs(u: Env, incremental: bool) -> u64 {
    let listing = u.transport == Transport::Daytona
        && has_capability("toolbox")
        && has_capability("incremental")
        && incremental;
    1 + u64::from(listing)
}

/// True when the provider under test can drive `transport` (a toolbox
/// sandbox needs the `toolbox` capability).
pub fn drives(transport: Transport) -> bool {
    transport != Transport::Daytona || has_capability("toolbox")
}

/// True when the provider under test promises one exec per sync call.
pub fn single_exec() -> bool {
    has_capability("single-exec")
}

/// Asserts the exec count a single-exec provider must hit; other providers
/// (the fallback) only need to have run at least one exec when `n > 0`.
pub fn assert_execs(got: u64, n: u64) {
    if single_exec() || n == 0 {
        assert_eq!(got, n, "exec count");
    } else {
        assert!(got >= n, "expected at least {n} execs, got {got}");
    }
}

/// Runs every exec of `inner` under `env NAME=value…`, as a pod whose image
/// sets those variables (a `TAR_OPTIONS`, a `PATH` without some tool).
pub struct WithEnv {
    inner: Arc<dyn ExecBackend>,
    vars: Vec<String>,
    name: &'static str,
}

impl WithEnv {
    /// `inner` with `vars` (`NAME=value`) set, reported as backend `name`.
    pub fn new(inner: Arc<dyn ExecBackend>, name: &'static str, vars: Vec<String>) -> Self {
        WithEnv { inner, vars, name }
    }
}

impl ExecBackend for WithEnv {
    fn start(
        &self,
        mut req: sandbox_sync_host::exec::ExecRequest,
    ) -> sandbox_sync_host::exec::BoxFuture<
        '_,
        Result<sandbox_sync_host::exec::Process, sandbox_sync_host::exec::ExecError>,
    > {
        let env = std::iter::once("env".to_owned()).chain(self.vars.iter().cloned());
        req.argv.splice(0..0, env);
        self.inner.start(req)
    }

    fn name(&self) -> &'static str {
        self.name
    }
}

/// A shared BusyBox root; each sandbox gets its own directory inside it.
fn busybox_root() -> &'static Path {
    static ROOT: OnceLock<PathBuf> = OnceLock::new();
    ROOT.get_or_init(|| {
        let busybox = Path::new("/bin/busybox");
        assert!(
            busybox.exists(),
            "BusyBox sandboxes need busybox-static (apt-get install busybox-static)"
        );
        sweep_roots_of_gone_processes("sandbox-sync-bbroot-");
        let root = std::env::temp_dir().join(format!("sandbox-sync-bbroot-{}", std::process::id()));
        sticky_tmp(&root);
        install_busybox(&root.join("bin"));
        std::fs::set_permissions(&root, std::fs::Permissions::from_mode(0o755))
            .expect("chmod root");
        root
    })
}

/// A `/tmp` as images have it (mode 1777): where a sandbox user without a
/// writable home keeps its incremental record.
fn sticky_tmp(root: &Path) {
    std::fs::create_dir_all(root.join("tmp")).expect("mkdir tmp");
    std::fs::set_permissions(root.join("tmp"), std::fs::Permissions::from_mode(0o1777))
        .expect("chmod tmp");
}

/// Puts the host's BusyBox in `dir` (made if missing) with every applet
/// linked beside it, as a BusyBox image lays out its `/bin`.
pub fn install_busybox(dir: &Path) {
    std::fs::create_dir_all(dir).expect("mkdir the applets' dir");
    install_executable(Path::new("/bin/busybox"), &dir.join("busybox"));
    let out = std::process::Command::new("/bin/busybox")
        .arg("--list")
        .output()
        .expect("run busybox --list");
    for applet in String::from_utf8_lossy(&out.stdout).lines() {
        if applet != "busybox" {
            let _ = symlink("busybox", dir.join(applet));
        }
    }
}

/// The root a jailed userland's sandboxes live in.
fn jail_root(userland: Userland) -> Option<&'static Path> {
    match userland {
        Userland::Gnu => None,
        Userland::BusyBox => Some(busybox_root()),
        Userland::Tools(tools) => Some(tools_root(tools)),
    }
}

/// Removes the temp dir's `<prefix><pid>[-...]` entries whose process is
/// gone: roots a test process builds once and cannot remove when it exits
/// (statics are never dropped).
pub fn sweep_roots_of_gone_processes(prefix: &str) {
    let Ok(entries) = std::fs::read_dir(std::env::temp_dir()) else {
        return;
    };
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(pid) = name
            .to_str()
            .and_then(|n| n.strip_prefix(prefix))
            .and_then(|rest| rest.split('-').next())
            .and_then(|p| p.parse::<u32>().ok())
        else {
            continue;
        };
        if !Path::new(&format!("/proc/{pid}")).exists() {
            let _ = std::fs::remove_dir_all(entry.path());
        }
    }
}

/// A root holding only `tools` (see [`Userland::Tools`]), one per set.
fn tools_root(tools: &'static [&'static str]) -> &'static Path {
    static ROOTS: std::sync::Mutex<Vec<(&'static [&'static str], &'static Path)>> =
        std::sync::Mutex::new(Vec::new());
    let mut roots = ROOTS
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    if let Some((_, root)) = roots.iter().find(|(t, _)| *t == tools) {
        return root;
    }
    if roots.is_empty() {
        sweep_roots_of_gone_processes("sandbox-sync-toolsroot-");
    }
    let root = std::env::temp_dir().join(format!(
        "sandbox-sync-toolsroot-{}-{}",
        std::process::id(),
        roots.len()
    ));
    std::fs::create_dir_all(root.join("bin")).expect("mkdir bin");
    sticky_tmp(&root);
    copy_host_binary(&root, Path::new("/bin/dash"), "sh");
    for tool in tools {
        if let Some(fake) = tool.strip_prefix("fake:") {
            fake_tool(&root, fake);
        } else if let Some(util) = tool.strip_prefix("uutils:") {
            // Debian's rust-coreutils: one multi-call binary, by name.
            let multi = root.join("bin/coreutils");
            if !multi.exists() {
                copy_host_binary(&root, Path::new(UUTILS), "coreutils");
            }
            symlink("coreutils", root.join("bin").join(util)).expect("link a uutil");
        } else if let Some(applet) = tool.strip_prefix("busybox:") {
            let busybox = root.join("bin/busybox");
            if !busybox.exists() {
                install_executable(Path::new("/bin/busybox"), &busybox);
            }
            symlink("busybox", root.join("bin").join(applet)).expect("link an applet");
        } else {
            let host = ["/usr/bin", "/bin", "/usr/sbin", "/sbin"]
                .iter()
                .map(|d| Path::new(d).join(tool))
                .find(|p| p.exists())
                .unwrap_or_else(|| panic!("no {tool} on this host"));
            copy_host_binary(&root, &host, tool);
        }
    }
    std::fs::set_permissions(&root, std::fs::Permissions::from_mode(0o755)).expect("chmod root");
    let root: &'static Path = Box::leak(root.into_boxed_path());
    roots.push((tools, root));
    root
}

/// The uutils coreutils multi-call binary (Debian's `rust-coreutils`),
/// for `uutils:NAME` tools.
pub const UUTILS: &str = "/usr/bin/coreutils";

/// A scripted stand-in for a host tool, by `name`:
/// `dd-without-count-bytes` is GNU dd that refuses `iflag=count_bytes`, as
/// coreutils before 8.16 did (and still has `iflag=fullblock`);
/// `dd-fails-midway` is GNU dd that, asked to count bytes, copies 16 and
/// fails (a read error part way through the program);
/// `gzip-slow` is GNU gzip that takes 0.4 s longer each time (a pod's gzip
/// slower than its link).
fn fake_tool(root: &Path, name: &str) {
    let (tool, real, script) = match name {
        "dd-without-count-bytes" => (
            "dd",
            "/bin/dd",
            "#!/bin/sh\ncase \" $* \" in *count_bytes*) echo 'dd: invalid input flag: count_bytes' >&2; exit 1 ;; esac\nexec /bin/dd.real \"$@\"\n",
        ),
        "dd-fails-midway" => (
            "dd",
            "/bin/dd",
            "#!/bin/sh\ncase \" $* \" in *count_bytes*) /bin/dd.real bs=1 count=16 2>/dev/null; exit 1 ;; esac\nexec /bin/dd.real \"$@\"\n",
        ),
        "gzip-slow" => (
            "gzip",
            "/bin/gzip",
            "#!/bin/sh\nsleep 0.4\nexec /bin/gzip.real \"$@\"\n",
        ),
        other => panic!("no fake tool {other}"),
    };
    copy_host_binary(root, Path::new(real), &format!("{tool}.real"));
    write_executable(&root.join("bin").join(tool), script);
}

/// Copies the host binary `host` to `root/bin/name`, with every shared
/// library `ldd` says it loads at its own path.
fn copy_host_binary(root: &Path, host: &Path, name: &str) {
    let real = std::fs::canonicalize(host).expect("resolve a host binary");
    install_executable(&real, &root.join("bin").join(name));
    let out = std::process::Command::new("ldd")
        .arg(&real)
        .output()
        .expect("run ldd");
    for lib in String::from_utf8_lossy(&out.stdout)
        .split_whitespace()
        .filter(|w| w.starts_with('/'))
    {
        let inside = root.join(lib.trim_start_matches('/'));
        if inside.exists() {
            continue;
        }
        if let Some(dir) = inside.parent() {
            std::fs::create_dir_all(dir).expect("mkdir a library dir");
        }
        install_executable(
            &std::fs::canonicalize(lib).expect("resolve a library"),
            &inside,
        );
    }
}

/// Puts executable `from` at `to` without this process ever holding `to`
/// open for writing: a hard link where one filesystem allows (the roots
/// are many and left behind), else `cp` in a child. A file this
/// multi-threaded process wrote itself stays open for writing in every
/// child another thread forks meanwhile, until that child execs, and
/// running it fails with ETXTBSY until then (a conformance run failed so,
/// starting a fresh BusyBox as a jail's `/bin/sh`).
pub fn install_executable(from: &Path, to: &Path) {
    if std::fs::hard_link(from, to).is_ok() {
        return;
    }
    copy_in_child(from, to);
}

/// `cp from to` in a child process: only the child ever holds `to` open.
#[allow(clippy::expect_used)]
fn copy_in_child(from: &Path, to: &Path) {
    let status = std::process::Command::new("cp")
        .arg("--")
        .arg(from)
        .arg(to)
        .status()
        .expect("run cp");
    assert!(
        status.success(),
        "cp {} {}: {status}",
        from.display(),
        to.display()
    );
}

/// Writes script `text` as executable `path`, for the reason of
/// [`install_executable`]: through a staged copy only a child writes.
#[allow(clippy::expect_used)]
pub fn write_executable(path: &Path, text: &str) {
    let mut staged = path.as_os_str().to_owned();
    staged.push(".staged");
    let staged = PathBuf::from(staged);
    std::fs::write(&staged, text).expect("write a script");
    // Never a hard link: the staged file is one this process wrote.
    copy_in_child(&staged, path);
    std::fs::remove_file(&staged).expect("remove a staged script");
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755)).expect("chmod a script");
}

static NEXT: AtomicUsize = AtomicUsize::new(0);

/// One test's sandbox and host work dir.
pub struct Sandbox {
    /// The userland inside.
    pub userland: Userland,
    _tmp: tempfile::TempDir,
    /// Host path that `/` of the sandbox maps to (`/` for [`Userland::Gnu`]).
    root: PathBuf,
    /// Sandbox-side path of the remote dir.
    pub remote: String,
    /// Sandbox-side path of a directory outside the remote dir.
    pub outside: String,
    /// Host-side work dir for sources and targets.
    pub host: PathBuf,
    backend: Arc<dyn ExecBackend>,
    /// The fake API server, for [`Transport::Kube`].
    pub server: Option<k8s_server::K8sExecServer>,
    /// The fake toolbox, for [`Transport::Daytona`].
    pub toolbox: Option<daytona_server::ToolboxServer>,
}

/// The local backend for `userland` (what a kube exec also runs through).
fn local_backend(userland: Userland) -> LocalBackend {
    match jail_root(userland) {
        None => LocalBackend::host(),
        Some(root) => LocalBackend::sandbox_root(root)
            .expect("sandbox root")
            .user(SANDBOX_UID),
    }
}

/// Starts a fake API server whose execs run through `local`, and a kube
/// backend pointed at it through a generated kubeconfig.
pub fn kube_backend(
    local: LocalBackend,
    protocol: k8s_server::Protocol,
    dir: &Path,
) -> (k8s_server::K8sExecServer, Arc<dyn ExecBackend>) {
    use k8s_server::{Protocol, Protocols, ServerConfig};
    let commands = move |argv: &[String]| {
        local
            .command(argv)
            .map_err(|e| std::io::Error::other(e.to_string()))
    };
    let config =
        ServerConfig::new("sandboxes", "agent-pod", "agent", commands).protocols(Protocols {
            v5: protocol == Protocol::V5,
            v4: true,
        });
    let server =
        block_on(k8s_server::K8sExecServer::start(config)).expect("start the fake API server");
    let kubeconfig = dir.join("kubeconfig");
    std::fs::write(&kubeconfig, server.kubeconfig()).expect("write kubeconfig");
    let backend = block_on(sandbox_sync_host::exec::kube::KubeBackend::from_config(
        Some(kubeconfig),
        None,
        Some("sandboxes".into()),
        "agent-pod",
        Some("agent".into()),
    ))
    .expect("kube backend");
    (server, Arc::new(backend))
}

/// Starts a fake Daytona toolbox whose requests run through `local`, and
/// a Daytona backend pointed at it.
pub fn daytona_backend(
    local: Arc<dyn ExecBackend>,
) -> (daytona_server::ToolboxServer, Arc<dyn ExecBackend>) {
    let server = block_on(daytona_server::ToolboxServer::start(
        local,
        "sbx-conformance",
        "conformance-key",
    ))
    .expect("start the fake toolbox");
    let client =
        sandbox_sync_host::exec::daytona::Client::new(&server.url, &server.sandbox, &server.key)
            .expect("toolbox client");
    let backend = Arc::new(sandbox_sync_host::exec::daytona::DaytonaBackend::new(
        client,
    ));
    (server, backend)
}

impl Sandbox {
    /// A fresh sandbox with an empty remote dir.
    pub fn new(env: Env) -> Self {
        let userland = env.userland;
        let tmp = tempfile::Builder::new()
            .prefix("sandbox-sync-test-")
            .tempdir()
            .expect("tempdir");
        let host = tmp.path().join("host");
        std::fs::create_dir_all(&host).expect("host dir");
        let n = NEXT.fetch_add(1, Ordering::SeqCst);
        let (root, base) = match jail_root(userland) {
            None => (
                PathBuf::from("/"),
                tmp.path().join("sandbox").display().to_string(),
            ),
            Some(root) => (root.to_path_buf(), format!("/t{}-{n}", std::process::id())),
        };
        let (server, toolbox, backend): (_, _, Arc<dyn ExecBackend>) = match env.transport {
            Transport::Local => (None, None, Arc::new(local_backend(userland))),
            Transport::Kube(p) => {
                let (server, backend) = kube_backend(local_backend(userland), p, tmp.path());
                (Some(server), None, backend)
            }
            Transport::Daytona => {
                let (toolbox, backend) = daytona_backend(Arc::new(local_backend(userland)));
                (None, Some(toolbox), backend)
            }
        };
        let sb = Sandbox {
            userland,
            remote: format!("{base}/workspace"),
            outside: format!("{base}/outside"),
            _tmp: tmp,
            root,
            host,
            backend,
            server,
            toolbox,
        };
        for dir in [&sb.remote, &sb.outside] {
            let p = sb.on_host(dir);
            std::fs::create_dir_all(&p).expect("sandbox dirs");
            sb.give_to_sandbox(&p);
        }
        if userland.is_jailed() {
            sb.give_to_sandbox(&sb.on_host(&base));
        }
        sb
    }

    /// Makes a host path belong to the sandbox user.
    pub fn give_to_sandbox(&self, p: &Path) {
        if self.userland.is_jailed() {
            let _ = std::os::unix::fs::lchown(p, Some(SANDBOX_UID), Some(SANDBOX_UID));
        }
    }

    /// The sandbox path `rel` under the remote dir.
    pub fn remote(&self, rel: &str) -> String {
        if rel.is_empty() {
            self.remote.clone()
        } else {
            format!("{}/{rel}", self.remote)
        }
    }

    /// The host path a sandbox path maps to.
    pub fn on_host(&self, sandbox_path: &str) -> PathBuf {
        self.root.join(sandbox_path.trim_start_matches('/'))
    }

    /// How a process inside the sandbox names the host path `p` (a jailed
    /// process's `/proc/PID/fd` links show paths inside its root).
    pub fn inside_view(&self, p: &Path) -> PathBuf {
        match p.strip_prefix(&self.root) {
            Ok(rel) if self.root != Path::new("/") => Path::new("/").join(rel),
            _ => p.to_path_buf(),
        }
    }

    /// The host path of `rel` under the remote dir.
    pub fn remote_on_host(&self, rel: &str) -> PathBuf {
        self.on_host(&self.remote(rel))
    }

    /// Writes a file inside the sandbox (owned by the sandbox user).
    pub fn write_remote(&self, rel: &str, data: &[u8]) -> PathBuf {
        let p = self.remote_on_host(rel);
        if let Some(parent) = p.parent() {
            std::fs::create_dir_all(parent).expect("mkdir");
            let mut d = parent.to_path_buf();
            while d.starts_with(self.remote_on_host("")) {
                self.give_to_sandbox(&d);
                if !d.pop() {
                    break;
                }
            }
        }
        std::fs::write(&p, data).expect("write");
        self.give_to_sandbox(&p);
        p
    }

    /// Plants a symlink inside the sandbox (as a hostile agent would).
    pub fn plant_symlink(&self, rel: &str, target: &str) {
        let p = self.remote_on_host(rel);
        if let Some(parent) = p.parent() {
            std::fs::create_dir_all(parent).expect("mkdir");
        }
        symlink(target, &p).expect("symlink");
        self.give_to_sandbox(&p);
    }

    /// Writes a host file under the work dir.
    pub fn write_host(&self, rel: &str, data: &[u8]) -> PathBuf {
        let p = self.host.join(rel);
        if let Some(parent) = p.parent() {
            std::fs::create_dir_all(parent).expect("mkdir");
        }
        std::fs::write(&p, data).expect("write");
        p
    }

    /// Default options for this sandbox's remote dir.
    pub fn options(&self) -> SyncOptions {
        sync_options(self.remote.clone())
    }

    /// The exec backend.
    pub fn backend(&self) -> Arc<dyn ExecBackend> {
        Arc::clone(&self.backend)
    }

    /// This sandbox's backend with every exec start, and then each exec's
    /// first stdout bytes, delayed by `latency`: the host plans while the
    /// program has not started, and sends nothing until `latency` after it
    /// has.
    pub fn slow_and_late_backend(&self, latency: std::time::Duration) -> Arc<dyn ExecBackend> {
        Arc::new(
            self.local_backend()
                .exec_latency(latency)
                .reply_latency(latency),
        )
    }

    /// This sandbox's backend with each exec's first stdout bytes delayed
    /// by `latency`: the host plans, then waits that long for the
    /// program's report before it sends anything.
    pub fn late_reply_backend(&self, latency: std::time::Duration) -> Arc<dyn ExecBackend> {
        Arc::new(self.local_backend().reply_latency(latency))
    }

    /// This sandbox's local backend with an empty `/dev` (a jailed
    /// userland's; the host's own `/dev` otherwise).
    pub fn no_devices_backend(&self) -> Arc<dyn ExecBackend> {
        Arc::new(self.local_backend().without_devices())
    }

    /// A local backend whose sandbox root has no `/proc` mounted.
    pub fn no_proc_backend(&self) -> Arc<dyn ExecBackend> {
        Arc::new(self.local_backend().without_proc())
    }

    fn local_backend(&self) -> LocalBackend {
        local_backend(self.userland)
    }

    /// Sync-in through `backend`.
    pub fn sync_in_via(
        &self,
        ops: &[SyncOperation],
        backend: Arc<dyn ExecBackend>,
    ) -> Result<SyncOutcome, SyncFailure> {
        block_on(runtime().sync_in(ops, &self.options(), backend))
    }

    /// Sync-in with default options.
    pub fn sync_in(&self, ops: &[SyncOperation]) -> Result<SyncOutcome, SyncFailure> {
        self.sync_in_with(ops, &self.options())
    }

    /// Sync-in with `opts`.
    pub fn sync_in_with(
        &self,
        ops: &[SyncOperation],
        opts: &SyncOptions,
    ) -> Result<SyncOutcome, SyncFailure> {
        block_on(runtime().sync_in(ops, opts, self.backend()))
    }

    /// Sync-out with default options.
    pub fn sync_out(&self, ops: &[SyncOperation]) -> Result<SyncOutcome, SyncFailure> {
        self.sync_out_with(ops, &self.options())
    }

    /// Sync-out with `opts`.
    pub fn sync_out_with(
        &self,
        ops: &[SyncOperation],
        opts: &SyncOptions,
    ) -> Result<SyncOutcome, SyncFailure> {
        block_on(runtime().sync_out(ops, opts, self.backend()))
    }

    /// Every `.paperclip-upload*` name under the sandbox base and the host work dir.
    pub fn scratch_left(&self) -> Vec<PathBuf> {
        // A kubelet does not kill an exec's process when its stream goes
        // (an aborted call's program runs on until its input ends, and its
        // trap removes its scratch): what is left is what remains once every
        // process the call started has ended.
        if let Some(server) = &self.server {
            server.wait_for_no_live_processes(std::time::Duration::from_secs(20));
        }
        let mut found = Vec::new();
        let sandbox_base = self
            .on_host(&self.remote)
            .parent()
            .map(Path::to_path_buf)
            .unwrap_or_default();
        for dir in [sandbox_base, self.host.clone()] {
            walk(&dir, &mut |p| {
                let name = p.file_name().and_then(|n| n.to_str());
                if name.is_some_and(|n| n.starts_with(".paperclip-upload")) {
                    found.push(p.to_path_buf());
                }
            });
        }
        found
    }

    /// Everything under the sandbox's outside dir.
    pub fn outside_entries(&self) -> Vec<PathBuf> {
        let mut found = Vec::new();
        walk(&self.on_host(&self.outside), &mut |p| {
            found.push(p.to_path_buf())
        });
        found
    }
}

impl Drop for Sandbox {
    fn drop(&mut self) {
        if self.userland.is_jailed() {
            if let Some(base) = self.on_host(&self.remote).parent() {
                let _ = std::fs::remove_dir_all(base);
            }
        }
    }
}

/// The `sandbox-sync` binary next to the running test binary (built by
/// `cargo test` for the workspace).
pub fn sandbox_sync_bin() -> PathBuf {
    let exe = std::env::current_exe().unwrap_or_default();
    let bin = exe
        .parent()
        .and_then(Path::parent)
        .map(|d| d.join("sandbox-sync"))
        .unwrap_or_default();
    assert!(
        bin.exists(),
        "{} missing: run `cargo test` for the workspace (it builds the binary)",
        bin.display()
    );
    bin
}

/// Waits for `child`, sampling its peak RSS (`VmHWM`) every `every` while it
/// runs. Returns its exit status and the highest peak seen.
///
/// # Errors
/// When waiting fails.
pub fn wait_with_peak_rss(
    child: &mut std::process::Child,
    every: std::time::Duration,
) -> std::io::Result<(std::process::ExitStatus, u64)> {
    let mut peak = 0;
    // Until it has exec'd, the child is a fork of this test process and
    // reports this process's resident set, not its own.
    let me = std::env::current_exe().ok();
    let exe = format!("/proc/{}/exe", child.id());
    loop {
        let forked = me.is_some() && std::fs::read_link(&exe).ok() == me;
        if let Some(hwm) = vm_hwm(child.id()).filter(|_| !forked) {
            peak = peak.max(hwm);
        }
        if let Some(status) = child.try_wait()? {
            return Ok((status, peak));
        }
        std::thread::sleep(every);
    }
}

fn vm_hwm(pid: u32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let kb: u64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))?
        .trim()
        .trim_end_matches("kB")
        .trim()
        .parse()
        .ok()?;
    Some(kb * 1024)
}

/// One path of a [`snapshot`].
#[derive(Debug, PartialEq, Eq)]
pub enum Node {
    /// A regular file.
    File {
        /// Permission bits.
        mode: u32,
        /// Contents.
        data: Vec<u8>,
    },
    /// A directory.
    Dir {
        /// Permission bits.
        mode: u32,
    },
    /// A symlink and its target.
    Link(String),
}

/// Every path under `root` (not `root` itself), with type, mode, contents
/// and link target, for comparing trees.
pub fn snapshot(root: &Path) -> std::collections::BTreeMap<String, Node> {
    let mut out = std::collections::BTreeMap::new();
    walk(root, &mut |p| {
        let rel = p.strip_prefix(root).unwrap_or(p).display().to_string();
        let Ok(meta) = std::fs::symlink_metadata(p) else {
            return;
        };
        let mode = meta.permissions().mode() & 0o7777;
        let node = if meta.file_type().is_symlink() {
            Node::Link(
                std::fs::read_link(p)
                    .map(|t| t.display().to_string())
                    .unwrap_or_default(),
            )
        } else if meta.is_dir() {
            Node::Dir { mode }
        } else {
            Node::File {
                mode,
                data: std::fs::read(p).unwrap_or_default(),
            }
        };
        out.insert(rel, node);
    });
    out
}

/// What the orchestrator's own fallback would upload for a directory
/// mapping: its `tar -c [-h] --exclude ._* [--exclude X…] -- <entries>`,
/// extracted with `tar -x -p` into a fresh directory.
///
/// # Panics
/// When tar fails (the caller compares trees; a failing tar is a failing test).
#[allow(clippy::expect_used)]
pub fn orchestrator_tar(src: &Path, exclude: &[&str], follow: bool) -> tempfile::TempDir {
    let out = tempfile::tempdir().expect("tempdir");
    let mut entries: Vec<_> = std::fs::read_dir(src)
        .expect("read source")
        .flatten()
        .map(|e| e.file_name())
        .collect();
    entries.sort();
    let mut c = std::process::Command::new("tar");
    c.env("LC_ALL", "C.UTF-8")
        .args(["-c", "--no-xattrs"])
        .args(if follow { &["-h"][..] } else { &[][..] })
        .arg("-f")
        .arg("-")
        .arg("-C")
        .arg(src)
        .args(["--exclude", "._*"]);
    for x in exclude {
        c.arg("--exclude").arg(x);
    }
    c.arg("--").args(&entries);
    let created = c.output().expect("tar -c");
    assert!(
        created.status.success(),
        "tar -c: {}",
        String::from_utf8_lossy(&created.stderr)
    );
    let mut x = std::process::Command::new("tar")
        .args(["-x", "-p", "-f", "-", "-C"])
        .arg(out.path())
        .stdin(std::process::Stdio::piped())
        .spawn()
        .expect("tar -x");
    std::io::Write::write_all(x.stdin.as_mut().expect("stdin"), &created.stdout).expect("feed tar");
    drop(x.stdin.take());
    assert!(x.wait().expect("tar -x").success());
    out
}

/// Visits every path under `dir` (not following symlinks).
pub fn walk(dir: &Path, f: &mut dyn FnMut(&Path)) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for e in entries.flatten() {
        let p = e.path();
        f(&p);
        if e.file_type().map(|t| t.is_dir()).unwrap_or(false) {
            walk(&p, f);
        }
    }
}

/// A tmpfs mounted on `at` (created if missing; the suite runs as root),
/// unmounted when dropped, a failed test's too.
pub struct Tmpfs(PathBuf);

impl Tmpfs {
    /// Mounts one, with `-o options` unless empty.
    pub fn mount(at: &Path, options: &str) -> Tmpfs {
        std::fs::create_dir_all(at).expect("mount point");
        let mut mount = std::process::Command::new("mount");
        mount.args(["-t", "tmpfs"]);
        if !options.is_empty() {
            mount.args(["-o", options]);
        }
        let mounted = mount.arg("tmpfs").arg(at).status().expect("run mount");
        assert!(mounted.success(), "mount tmpfs (the suite runs as root)");
        Tmpfs(at.to_path_buf())
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = std::process::Command::new("umount").arg(&self.0).status();
    }
}

/// A file mapping.
pub fn file(source: impl AsRef<Path>, target: impl Into<String>) -> FileMapping {
    FileMapping {
        source_path: source.as_ref().display().to_string(),
        target_path: target.into(),
        kind: MappingKind::File,
        mode: None,
        exclude: None,
        follow_symlinks: None,
    }
}

/// A directory mapping.
pub fn dir(source: impl AsRef<Path>, target: impl Into<String>) -> FileMapping {
    FileMapping {
        kind: MappingKind::Directory,
        ..file(source, target)
    }
}

/// Sync-out mappings take a sandbox source and a host target.
pub fn file_out(source: impl Into<String>, target: impl AsRef<Path>) -> FileMapping {
    FileMapping {
        source_path: source.into(),
        target_path: target.as_ref().display().to_string(),
        kind: MappingKind::File,
        mode: None,
        exclude: None,
        follow_symlinks: None,
    }
}

/// A directory sync-out mapping.
pub fn dir_out(source: impl Into<String>, target: impl AsRef<Path>) -> FileMapping {
    FileMapping {
        kind: MappingKind::Directory,
        ..file_out(source, target)
    }
}

/// One operation.
pub fn op(id: &str, files: Vec<FileMapping>) -> SyncOperation {
    SyncOperation {
        operation_id: id.into(),
        files,
        post_upload_commands: None,
    }
}

/// A post-upload command.
pub fn cmd(command: &str, cwd: Option<String>) -> PostUploadCommand {
    PostUploadCommand {
        command: command.into(),
        cwd,
        timeout_ms: None,
    }
}

/// Mode bits of a path (no follow).
pub fn mode(p: &Path) -> u32 {
    std::fs::symlink_metadata(p)
        .expect("stat")
        .permissions()
        .mode()
        & 0o7777
}

/// Defines each conformance test once per environment: GNU and BusyBox over
/// the local backend, over the kube backend with the v4 (GNU) and v5
/// (BusyBox) subprotocols, and over the Daytona toolbox (GNU and BusyBox).
/// `local: a, b` defines them over the local backend only, for tests that
/// reach into the sandbox's processes or the host's filesystem;
/// `daytona: a, b` over the Daytona toolbox only.
#[macro_export]
macro_rules! for_each_userland {
    (daytona: $($name:ident),* $(,)?) => {
        $crate::for_each_userland!(@env daytona_gnu, Gnu, Daytona; $($name),*);
        $crate::for_each_userland!(@env daytona_busybox, BusyBox, Daytona; $($name),*);
    };
    (local: $($name:ident),* $(,)?) => {
        $crate::for_each_userland!(@env gnu, Gnu, Local; $($name),*);
        $crate::for_each_userland!(@env busybox, BusyBox, Local; $($name),*);
    };
    ($($name:ident),* $(,)?) => {
        $crate::for_each_userland!(@env gnu, Gnu, Local; $($name),*);
        $crate::for_each_userland!(@env busybox, BusyBox, Local; $($name),*);
        $crate::for_each_userland!(@env kube_v4, Gnu, Kube($crate::k8s_server::Protocol::V4); $($name),*);
        $crate::for_each_userland!(@env kube_v5, BusyBox, Kube($crate::k8s_server::Protocol::V5); $($name),*);
        $crate::for_each_userland!(@env daytona_gnu, Gnu, Daytona; $($name),*);
        $crate::for_each_userland!(@env daytona_busybox, BusyBox, Daytona; $($name),*);
    };
    (@env $module:ident, $userland:ident, $transport:expr; $($name:ident),*) => {
        mod $module {
            #[allow(unused_imports)]
            use $crate::Transport::*;
            $( #[test] fn $name() {
                let env = $crate::Env { userland: $crate::Userland::$userland, transport: $transport };
                // A provider that cannot drive this transport (the base64
                // fallback on a toolbox sandbox) is refused by the host
                // before anything moves; `refused_without_the_capability`
                // tests that refusal.
                if $crate::drives(env.transport) {
                    super::$name(env)
                }
            } )*
        }
    };
}
