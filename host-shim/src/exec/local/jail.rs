//! The sandbox root jail: what a container runtime gives a pod, minus
//! cgroups.
//!
//! A process the sandbox can see must never be able to reach the host's
//! filesystem, uid 0 included. A `chroot` is not enough: the namespace's
//! first process sat outside it (so `/proc/1/root` was the host's `/`),
//! and a root process with `CAP_SYS_CHROOT` walks out of any chroot.
//! So, in the child the host forks:
//!
//! 1. new mount, PID, IPC and UTS namespaces (`unshare`); not a network
//!    namespace, which is no part of filesystem confinement and cost 5 ms
//!    per exec here (a pod's network is its runtime's business);
//! 2. a second fork: its child is PID 1 of the new namespace, and it is the
//!    sandbox program itself once set up; the first child only waits for it
//!    and hands its exit status to the host (128 + N for a signal death);
//! 3. PID 1 makes every mount private, binds the root onto itself, clones
//!    what it will need from the host (device nodes, and the host userland
//!    when asked) as detached mounts, then `pivot_root`s into the root and
//!    detaches the old one: from here on no path in this mount namespace
//!    leads to the host, so symlinks the sandbox planted (`/dev` -> a host
//!    directory) can only ever lead back into the sandbox;
//! 4. `/proc` (with `/proc/sys` and friends read-only) and a `/dev` tmpfs
//!    holding `null`, `zero`, `full`, `random` and `urandom` are mounted
//!    inside, and the host userland attached read-only;
//! 5. privileges drop for good: `no_new_privs`, a bounding set without
//!    `CAP_SYS_ADMIN`, `CAP_DAC_READ_SEARCH` (`open_by_handle_at`),
//!    `CAP_MKNOD`, `CAP_SYS_PTRACE`, `CAP_SYS_MODULE` and the rest a
//!    container runtime drops, and the requested uid/gid with no groups;
//! 6. `exec` of the program.
//!
//! Everything between the forks and the `exec` runs in a child of a
//! multi-threaded process, so it only makes system calls: every path is a
//! `CStr` prepared beforehand, and nothing allocates.

use std::ffi::{CStr, CString};
use std::io;
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

use rustix::fs::{Mode, OFlags, CWD};
use rustix::mount::{
    mount_bind_recursive, mount_change, move_mount, open_tree, unmount, MountFlags,
    MountPropagationFlags, MoveMountFlags, OpenTreeFlags, UnmountFlags,
};
use rustix::thread::{CapabilitySet, CapabilitySets, UnshareFlags};

/// Host directories bound read-only into a root "with the host userland".
const HOST_USERLAND: &[&str] = &[
    "/bin",
    "/sbin",
    "/lib",
    "/lib32",
    "/lib64",
    "/usr/bin",
    "/usr/sbin",
    "/usr/lib",
    "/usr/lib64",
    "/usr/libexec",
    "/usr/share",
    // Debian reaches some tools only through it (`awk` is `mawk` there),
    // as every pod built from its images does.
    "/etc/alternatives",
];

/// `/proc` entries that would let a root process reconfigure the host
/// kernel (`core_pattern` runs a host program as root, for one): read-only.
const PROC_READ_ONLY: &[&CStr] = &[
    c"/proc/sys",
    c"/proc/sysrq-trigger",
    c"/proc/irq",
    c"/proc/bus",
    c"/proc/fs",
];

/// Device nodes a sandbox gets, bound from the host (it cannot make its
/// own: no `CAP_MKNOD`): (host path, path inside).
const DEVICES: &[(&CStr, &CStr)] = &[
    (c"/dev/null", c"/dev/null"),
    (c"/dev/zero", c"/dev/zero"),
    (c"/dev/full", c"/dev/full"),
    (c"/dev/random", c"/dev/random"),
    (c"/dev/urandom", c"/dev/urandom"),
];

/// The capabilities a uid-0 sandbox keeps: those a container runtime grants
/// by default, less `CAP_MKNOD` (no device cgroup here) and `CAP_NET_RAW`.
fn kept_capabilities() -> CapabilitySet {
    CapabilitySet::CHOWN
        | CapabilitySet::DAC_OVERRIDE
        | CapabilitySet::FOWNER
        | CapabilitySet::FSETID
        | CapabilitySet::KILL
        | CapabilitySet::SETGID
        | CapabilitySet::SETUID
        | CapabilitySet::SETPCAP
        | CapabilitySet::NET_BIND_SERVICE
        | CapabilitySet::SYS_CHROOT
        | CapabilitySet::AUDIT_WRITE
        | CapabilitySet::SETFCAP
}

/// One host path made visible inside the root.
#[derive(Debug)]
struct Bind {
    /// The path, on the host and inside the root alike.
    path: CString,
    /// The host path is a symlink with this target: recreate the link.
    link: Option<CString>,
}

/// How to enter one sandbox root; prepared before the fork.
#[derive(Debug)]
pub(super) struct Jail {
    root: CString,
    uid: Option<u32>,
    binds: Vec<Bind>,
    mounts: Mounts,
}

/// What the runtime provides in a root besides its files, as a pod's
/// does (both, by default); a test takes either away, as some pods have
/// them missing.
#[derive(Debug, Clone, Copy)]
pub(super) struct Mounts {
    /// `/dev`'s usual nodes (else an empty tmpfs).
    pub devices: bool,
    /// A `/proc` (else an empty directory).
    pub proc: bool,
}

impl Default for Mounts {
    fn default() -> Self {
        Mounts {
            devices: true,
            proc: true,
        }
    }
}

impl Jail {
    /// A jail for `root` (canonical), optionally as `uid` (gid `uid`, no
    /// supplementary groups), optionally with the host userland bound in.
    /// `mounts` says what the runtime provides (see [`Mounts`]).
    pub(super) fn new(
        root: &Path,
        uid: Option<u32>,
        host_userland: bool,
        mounts: Mounts,
    ) -> io::Result<Self> {
        let cstring = |b: &[u8]| CString::new(b).map_err(io::Error::other);
        let mut binds = Vec::new();
        if host_userland {
            for p in HOST_USERLAND {
                let Ok(meta) = std::fs::symlink_metadata(p) else {
                    continue;
                };
                let link = if meta.file_type().is_symlink() {
                    Some(cstring(std::fs::read_link(p)?.as_os_str().as_bytes())?)
                } else if meta.is_dir() {
                    None
                } else {
                    continue;
                };
                binds.push(Bind {
                    path: cstring(p.as_bytes())?,
                    link,
                });
            }
        }
        Ok(Jail {
            root: cstring(root.as_os_str().as_bytes())?,
            uid,
            binds,
            mounts,
        })
    }

    /// Runs in the child the host forked, before its `exec`: see the module
    /// docs. Returns (to let the `exec` happen) only in PID 1 of the new
    /// namespaces; the intermediate process never returns.
    ///
    /// # Safety
    /// Only from a `pre_exec` hook: it forks and it exits the process.
    pub(super) unsafe fn enter(&self) -> io::Result<()> {
        // SAFETY: this process is about to exec; unsharing its file table or
        // namespaces affects nothing else.
        unsafe {
            rustix::thread::unshare_unsafe(
                UnshareFlags::NEWNS
                    | UnshareFlags::NEWPID
                    | UnshareFlags::NEWIPC
                    | UnshareFlags::NEWUTS,
            )?;
        }
        // The relay holds `alive`'s write end until it exits, so PID 1 can
        // tell whether its parent-death signal came too late to be armed.
        let (alive, alive_w) = rustix::pipe::pipe_with(rustix::pipe::PipeFlags::CLOEXEC)?;
        // SAFETY: fork in a single-threaded child; both sides only make
        // system calls until they exec or exit.
        match unsafe { libc::fork() } {
            -1 => Err(io::Error::last_os_error()),
            0 => {
                drop(alive_w);
                self.become_init(&alive)
            }
            pid => unsafe { relay(pid, alive_w) },
        }
    }

    /// PID 1 of the new namespaces: set up the root and drop privileges.
    fn become_init(&self, alive: &OwnedFd) -> io::Result<()> {
        mount_change(
            c"/",
            MountPropagationFlags::REC | MountPropagationFlags::PRIVATE,
        )?;
        mount_bind_recursive(self.root.as_c_str(), self.root.as_c_str())?;
        // What the sandbox gets from the host, taken before the host's
        // tree goes away, as detached mounts.
        let clone = OpenTreeFlags::OPEN_TREE_CLONE | OpenTreeFlags::OPEN_TREE_CLOEXEC;
        let mut devices: [Option<OwnedFd>; DEVICES.len()] = Default::default();
        if self.mounts.devices {
            for (slot, (host, _)) in devices.iter_mut().zip(DEVICES) {
                *slot = Some(open_tree(CWD, *host, clone)?);
            }
        }
        let mut trees: [Option<OwnedFd>; HOST_USERLAND.len()] = Default::default();
        for (slot, b) in trees.iter_mut().zip(&self.binds) {
            if b.link.is_none() {
                *slot = Some(open_tree(
                    CWD,
                    b.path.as_c_str(),
                    clone | OpenTreeFlags::AT_RECURSIVE,
                )?);
            }
        }
        rustix::process::chdir(self.root.as_c_str())?;
        rustix::process::pivot_root(c".", c".")?;
        unmount(c".", UnmountFlags::DETACH)?;
        rustix::process::chdir(c"/")?;

        // Inside the root now: whatever a path resolves to is the sandbox's.
        // `/proc` and `/dev` are mount points the runtime owns, as in any
        // container: anything else the sandbox left there goes.
        mount_point(c"/proc", 0o555)?;
        if self.mounts.proc {
            rustix::mount::mount(
                c"proc",
                c"/proc",
                c"proc",
                MountFlags::NOSUID | MountFlags::NODEV | MountFlags::NOEXEC,
                None,
            )?;
            for p in PROC_READ_ONLY {
                if rustix::fs::stat(*p).is_ok() {
                    rustix::mount::mount_bind(*p, *p)?;
                    remount_read_only(p)?;
                }
            }
        }
        mount_point(c"/dev", 0o755)?;
        rustix::mount::mount(
            c"tmpfs",
            c"/dev",
            c"tmpfs",
            MountFlags::NOSUID | MountFlags::NOEXEC,
            c"mode=755,size=64k",
        )?;
        for (tree, (_, inside)) in devices.iter().zip(DEVICES) {
            if let Some(tree) = tree {
                let placeholder = rustix::fs::open(
                    *inside,
                    OFlags::CREATE | OFlags::EXCL | OFlags::WRONLY | OFlags::CLOEXEC,
                    Mode::from_raw_mode(0o666),
                )?;
                drop(placeholder);
                attach(tree, inside)?;
            }
        }
        for (tree, b) in trees.iter().zip(&self.binds) {
            match (&b.link, tree) {
                (Some(target), _) => {
                    match rustix::fs::symlink(target.as_c_str(), b.path.as_c_str()) {
                        Ok(()) | Err(rustix::io::Errno::EXIST) => {}
                        Err(e) => return Err(e.into()),
                    }
                }
                (None, Some(tree)) => {
                    mkdir_all(&b.path)?;
                    attach(tree, b.path.as_c_str())?;
                    remount_read_only(b.path.as_c_str())?;
                }
                (None, None) => {}
            }
        }
        self.drop_privileges()?;
        Self::die_with_relay(alive)
    }

    fn drop_privileges(&self) -> io::Result<()> {
        rustix::thread::set_no_new_privs(true)?;
        let keep = kept_capabilities();
        for cap in 0..64u32 {
            if keep.bits() & (1 << cap) == 0 {
                // SAFETY: plain prctl; EINVAL past the kernel's last cap.
                unsafe { libc::prctl(libc::PR_CAPBSET_DROP, cap as libc::c_ulong, 0, 0, 0) };
            }
        }
        rustix::thread::clear_ambient_capability_set()?;
        match self.uid {
            Some(uid) => {
                // SAFETY: plain system calls; dropping to `uid` clears every
                // capability (no SECBIT_KEEP_CAPS).
                unsafe {
                    if libc::setgroups(0, std::ptr::null()) != 0
                        || libc::setresgid(uid, uid, uid) != 0
                        || libc::setresuid(uid, uid, uid) != 0
                    {
                        return Err(io::Error::last_os_error());
                    }
                }
            }
            None => {
                let now = rustix::thread::capabilities(None)?;
                rustix::thread::set_capabilities(
                    None,
                    CapabilitySets {
                        effective: now.effective & keep,
                        permitted: now.permitted & keep,
                        inheritable: CapabilitySet::empty(),
                    },
                )?;
            }
        }
        Ok(())
    }

    /// Dies with the relay (and so with the host's handle on the process).
    /// Armed last: a change of uid clears the parent-death signal.
    fn die_with_relay(alive: &OwnedFd) -> io::Result<()> {
        // SAFETY: plain prctl.
        if unsafe { libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL, 0, 0, 0) } != 0 {
            return Err(io::Error::last_os_error());
        }
        // The relay may have died before the signal was armed: then its end
        // of the pipe is closed and the pipe reads as hung up.
        let mut pfd = libc::pollfd {
            fd: alive.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: one valid pollfd, no wait.
        if unsafe { libc::poll(&mut pfd, 1, 0) } > 0 && pfd.revents & libc::POLLHUP != 0 {
            return Err(io::Error::from_raw_os_error(libc::ESRCH));
        }
        Ok(())
    }
}

/// The intermediate process: waits for PID 1 and exits as it did.
///
/// # Safety
/// Only in the child of a fork: it closes every descriptor but `alive` and
/// exits.
unsafe fn relay(init: libc::pid_t, alive: OwnedFd) -> ! {
    let keep = alive.as_raw_fd() as u32;
    std::mem::forget(alive);
    // SAFETY: system calls only. Every other descriptor goes (the spawn's
    // status pipe included, so the host learns of the exec as soon as PID 1
    // makes it); TERM and friends are for the program, which handles or
    // ignores them as PID 1, and this process must outlive it to report its
    // status.
    unsafe {
        if keep > 0 {
            libc::syscall(libc::SYS_close_range, 0u32, keep - 1, 0u32);
        }
        libc::syscall(libc::SYS_close_range, keep + 1, u32::MAX, 0u32);
        for sig in [
            libc::SIGTERM,
            libc::SIGINT,
            libc::SIGHUP,
            libc::SIGQUIT,
            libc::SIGPIPE,
        ] {
            libc::signal(sig, libc::SIG_IGN);
        }
        libc::signal(libc::SIGCHLD, libc::SIG_DFL);
        let mut status = 0;
        loop {
            let r = libc::waitpid(init, &mut status, 0);
            if r == init {
                break;
            }
            if r == -1 && *libc::__errno_location() != libc::EINTR {
                libc::_exit(125);
            }
        }
        if libc::WIFEXITED(status) {
            libc::_exit(libc::WEXITSTATUS(status));
        }
        libc::_exit(128 + libc::WTERMSIG(status));
    }
}

/// Attaches a detached mount at `target` (inside the root).
fn attach(tree: &OwnedFd, target: &CStr) -> io::Result<()> {
    Ok(move_mount(
        tree,
        c"",
        CWD,
        target,
        MoveMountFlags::MOVE_MOUNT_F_EMPTY_PATH,
    )?)
}

fn remount_read_only(target: &CStr) -> io::Result<()> {
    Ok(rustix::mount::mount_remount(
        target,
        MountFlags::BIND | MountFlags::RDONLY | MountFlags::NOSUID | MountFlags::NODEV,
        c"",
    )?)
}

/// Makes `path` a plain directory to mount on: a symlink or file the
/// sandbox left there is removed first (unlink never follows).
fn mount_point(path: &CStr, mode: u32) -> io::Result<()> {
    match rustix::fs::lstat(path) {
        Ok(st) if rustix::fs::FileType::from_raw_mode(st.st_mode).is_dir() => Ok(()),
        Ok(_) => {
            rustix::fs::unlink(path)?;
            mkdir(path, mode)
        }
        Err(_) => mkdir(path, mode),
    }
}

/// `mkdir` that accepts an existing entry.
fn mkdir(path: &CStr, mode: u32) -> io::Result<()> {
    match rustix::fs::mkdir(path, Mode::from_raw_mode(mode)) {
        Ok(()) | Err(rustix::io::Errno::EXIST) => Ok(()),
        Err(e) => Err(e.into()),
    }
}

/// `mkdir -p` for an absolute path of at most 255 bytes, without allocating.
fn mkdir_all(path: &CStr) -> io::Result<()> {
    let bytes = path.to_bytes();
    let mut buf = [0u8; 256];
    if bytes.len() >= buf.len() {
        return Err(io::Error::from_raw_os_error(libc::ENAMETOOLONG));
    }
    buf[..bytes.len()].copy_from_slice(bytes);
    for end in 1..=bytes.len() {
        if end == bytes.len() || bytes[end] == b'/' {
            let saved = buf[end];
            buf[end] = 0;
            let prefix = CStr::from_bytes_until_nul(&buf)
                .map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))?;
            mkdir(prefix, 0o755)?;
            buf[end] = saved;
        }
    }
    Ok(())
}
