//! Runs inside a jailed sandbox root as whatever user the sandbox has and
//! tries every known way out to a host file: the host path is `argv[1]`
//! (it must not be visible inside), `argv[2]` a path to try to create.
//! Prints one line per attempt, `blocked …` or `ESCAPED …`, and exits 3 if
//! any attempt got through.
#![allow(clippy::unwrap_used)]

use std::ffi::CString;
use std::path::{Path, PathBuf};

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let marker = PathBuf::from(&args[1]);
    let plant = PathBuf::from(&args[2]);
    let mut escaped = false;
    let mut report = |what: &str, got_out: bool, detail: String| {
        escaped |= got_out;
        println!(
            "{} {what}: {detail}",
            if got_out { "ESCAPED" } else { "blocked" }
        );
    };

    let direct = std::fs::read(&marker).is_ok();
    report("plain path", direct, "the host path is not visible".into());

    // Every visible process's root and cwd.
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let name = entry.file_name();
        if !name.to_string_lossy().bytes().all(|b| b.is_ascii_digit()) {
            continue;
        }
        for link in ["root", "cwd"] {
            let via = entry
                .path()
                .join(link)
                .join(marker.strip_prefix("/").unwrap());
            let ok = std::fs::read(&via).is_ok();
            report(
                &format!("/proc/{}/{link}", name.to_string_lossy()),
                ok,
                via.display().to_string(),
            );
            let planted = entry
                .path()
                .join(link)
                .join(plant.strip_prefix("/").unwrap());
            let ok = std::fs::write(&planted, b"escaped").is_ok() && !in_sandbox(&planted, &plant);
            report(
                &format!("write via /proc/{}/{link}", name.to_string_lossy()),
                ok,
                planted.display().to_string(),
            );
        }
    }

    // The double-chroot walk (needs CAP_SYS_CHROOT and an old root left in
    // the mount namespace), in a child: it changes the process's root.
    report(
        "chroot walk",
        in_child(|| {
            let _ = std::fs::create_dir("/.probe-chroot");
            let dir = CString::new("/.probe-chroot").unwrap();
            // SAFETY: plain system calls in a forked child.
            unsafe {
                if libc::chroot(dir.as_ptr()) != 0 {
                    return false;
                }
                let up = CString::new("..").unwrap();
                for _ in 0..256 {
                    libc::chdir(up.as_ptr());
                }
                let dot = CString::new(".").unwrap();
                libc::chroot(dot.as_ptr());
            }
            std::fs::read(&marker).is_ok()
        }),
        "chroot + chdir(..)".into(),
    );

    // open_by_handle_at on the filesystem's root inode (the "shocker" escape).
    report(
        "open_by_handle_at",
        {
            #[repr(C)]
            struct Handle {
                bytes: u32,
                kind: i32,
                data: [u8; 8],
            }
            let mut h = Handle {
                bytes: 8,
                kind: 1,
                data: [2, 0, 0, 0, 0, 0, 0, 0],
            };
            let root = std::fs::File::open("/").unwrap();
            // SAFETY: a valid file_handle-shaped buffer.
            let fd = unsafe {
                libc::syscall(
                    libc::SYS_open_by_handle_at,
                    std::os::fd::AsRawFd::as_raw_fd(&root),
                    &mut h as *mut Handle,
                    libc::O_RDONLY,
                )
            };
            fd >= 0
        },
        "needs CAP_DAC_READ_SEARCH".into(),
    );

    let try_mount = |src: &str, target: &str, fs: &str| {
        let _ = std::fs::create_dir_all(target);
        let (s, t, f) = (
            CString::new(src).unwrap(),
            CString::new(target).unwrap(),
            CString::new(fs).unwrap(),
        );
        // SAFETY: plain system call.
        unsafe { libc::mount(s.as_ptr(), t.as_ptr(), f.as_ptr(), 0, std::ptr::null()) == 0 }
    };
    report(
        "mount tmpfs",
        try_mount("none", "/.probe-mnt", "tmpfs"),
        "needs CAP_SYS_ADMIN".into(),
    );
    report(
        "mount a second proc",
        try_mount("proc", "/.probe-proc", "proc"),
        "needs CAP_SYS_ADMIN".into(),
    );
    report(
        "mknod a block device",
        {
            let p = CString::new("/.probe-blk").unwrap();
            // SAFETY: plain system call.
            let ok = unsafe {
                libc::mknod(p.as_ptr(), libc::S_IFBLK | 0o600, libc::makedev(254, 0)) == 0
            };
            let _ = std::fs::remove_file("/.probe-blk");
            ok
        },
        "needs CAP_MKNOD".into(),
    );
    report(
        "write core_pattern",
        std::fs::write("/proc/sys/kernel/core_pattern", b"|/x").is_ok(),
        "read-only /proc/sys".into(),
    );
    report(
        "write sysrq-trigger",
        std::fs::OpenOptions::new()
            .write(true)
            .open("/proc/sysrq-trigger")
            .is_ok(),
        "read-only".into(),
    );
    report(
        "open /proc/1/exe for writing",
        std::fs::OpenOptions::new()
            .write(true)
            .open("/proc/1/exe")
            .is_ok(),
        "ETXTBSY or no access".into(),
    );
    report(
        "host devices",
        Path::new("/dev/vda").exists() || Path::new("/dev/sda").exists(),
        "only null, zero, full, random, urandom".into(),
    );

    std::process::exit(if escaped { 3 } else { 0 });
}

/// True when `p` (written through some /proc link) is the sandbox's own `plant`.
fn in_sandbox(_via: &Path, plant: &Path) -> bool {
    let inside = std::fs::read(plant).is_ok();
    if inside {
        let _ = std::fs::remove_file(plant);
    }
    inside
}

fn in_child(f: impl FnOnce() -> bool) -> bool {
    // SAFETY: the child only runs `f` and exits.
    match unsafe { libc::fork() } {
        0 => unsafe { libc::_exit(if f() { 1 } else { 0 }) },
        -1 => false,
        pid => {
            let mut status = 0;
            // SAFETY: our own child.
            unsafe { libc::waitpid(pid, &mut status, 0) };
            libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 1
        }
    }
}
