//! The in-sandbox POSIX `sh` programs and how they are framed.
//!
//! One exec per sync call (a toolbox sandbox, which has no streaming exec,
//! runs them through [`toolbox`]'s wrapper). Its argv is the constant [`argv`] bootstrap plus
//! one number: the length of the script that follows on stdin. The bootstrap
//! reads exactly that many bytes (`dd` counting bytes in whole 64 KiB blocks
//! where it can (GNU, BusyBox), else `head -c` where it is exact (GNU
//! coreutils), else `dd bs=1`, exact everywhere but a syscall a byte: ~20 ms
//! for a 27 KB program) and `eval`s it. For sync-in the archive follows the
//! script, read by the last reader of stdin: GNU tar itself (it stops at the
//! end marker), other tars behind one `head -c N` (BusyBox `head` reads
//! ahead, so nothing may read stdin after it). Nothing ever waits for stdin
//! EOF.
//!
//! Every string spliced into script text is single-quoted by
//! [`crate::quote::sh_quote`]; post-upload commands are not spliced at all:
//! they ride in the archive and reach `sh -c` as a positional parameter.
//!
//! Each program is assembled from its `.sh` parts (`common.sh`, then
//! `inbound.sh`, `outbound.sh` or `fallback.sh`; one `.rs` beside each)
//! and lines Rust writes: assignments and calls with quoted arguments,
//! never control flow and never a literal exit code (the tests build every
//! program to check).
//!
//! The scripts keep the seeds' protections and exit codes: `realpath`
//! confinement of the root and every path, confine-the-deepest-existing-
//! ancestor before `mkdir -p`, `/proc/self/fd` pinning of directories and
//! outbound sources, a `0700` `.paperclip-upload-*` scratch directly under the
//! root removed on every exit, `chmod` before the final `mv -T`.

use std::fmt::Write as _;

use crate::quote::sh_quote;
use crate::Error;

pub mod exit;
mod fallback;
mod inbound;
mod listing;
mod outbound;
mod protocol;
pub mod toolbox;

pub use fallback::{fallback, FallbackStep};
pub use inbound::InboundScript;
pub use outbound::OutboundScript;

pub use listing::{
    parse_listing, parse_outbound_report, ranges, Decoder, Encoding, InboundSink, Listed, Listing,
    ListingParser, Named, OutboundSink, Probe, Sink, TooManyListed,
};
pub use protocol::{
    choice_name, parse_caps, parse_marker, parse_status, split_off, Caps, Codec, Marker, Off,
    Status, FEATURES, TAG,
};

/// The constant `sh -c` program every exec starts with. `dd` counting bytes
/// in whole blocks first: GNU and BusyBox both have it, and a `dd` without
/// those flags refuses them before it reads a byte (then, having read
/// nothing: GNU `head -c`, else `dd bs=1`). A `dd` that failed after reading
/// part of the program exits 70, as any failed read does: a part never
/// runs. One process where a `head --version` probe first cost a fork on
/// every exec; `_ss_xdd` tells the program the bootstrap's `dd` read exactly.
/// Where nothing could read it, a line on stderr names what the sandbox
/// lacks (a `/dev/null`, or both `dd` and GNU `head`): the program, which
/// names everything else, never ran.
pub const BOOTSTRAP: &str =
    "if _ss_s=$(dd bs=65536 count=\"$1\" iflag=count_bytes,fullblock 2>/dev/null); then _ss_xdd=1; \
elif [ -n \"$_ss_s\" ]; then exit 70; \
else _ss_h=; case $(head --version 2>/dev/null) in *GNU*) _ss_h=1; _ss_s=$(head -c \"$1\");; \
*) _ss_s=$(dd bs=1 count=\"$1\" 2>/dev/null);; esac || { [ -c /dev/null ] || _ss_h=/dev/null; \
[ \"$_ss_h\" ] || command -v dd >/dev/null || _ss_h='dd nor GNU head'; \
[ ${#_ss_h} -lt 2 ] || echo \"sandbox-sync: no $_ss_h\" >&2; exit 70; }; fi; eval \"$_ss_s\"";

/// The shell every program runs in, found on the sandbox's `PATH`.
pub const SHELL: &str = "sh";

/// `$0` of the bootstrap shell.
pub const ARGV0: &str = "sandbox-sync";

/// The exec argv for a script of `script_len` bytes. The shell is named,
/// not pathed: the sandbox's runtime finds it on the image's `PATH`, as
/// `kubectl cp` has it find `tar`, so an image without `/bin/sh`
/// (distroless `:debug`, BusyBox under `/busybox`) syncs too. The sandbox
/// chooses what runs either way.
pub fn argv(script_len: usize) -> Vec<String> {
    vec![
        SHELL.into(),
        "-c".into(),
        BOOTSTRAP.into(),
        ARGV0.into(),
        script_len.to_string(),
    ]
}

/// The function library every program starts with (after the preamble).
const LIBRARY: &str = include_str!("common.sh");

/// Sync-in helpers: staging, promotion, post-upload commands.
const INBOUND: &str = include_str!("inbound.sh");

/// Sync-out helpers: frame markers, pinned sources, archiving.
const OUTBOUND: &str = include_str!("outbound.sh");

/// The base64 fallback's helpers (see [`FallbackStep`]).
const FALLBACK: &str = include_str!("fallback.sh");

/// The program's own deadline: a little before the host's, so on any
/// transport (Kubernetes never kills an exec whose client went away) the
/// script stops itself, through its cleanup trap, before the host gives up.
fn deadline(timeout_ms: u64) -> String {
    if timeout_ms == 0 {
        return String::new();
    }
    seconds(timeout_ms - (timeout_ms / 10).min(2000))
}

/// Checks a scratch name the component chose: the reserved prefix, then
/// only `[a-z0-9.-]`, so it never needs quoting and never collides with a
/// real target.
fn check_scratch(name: &str) -> Result<(), Error> {
    let ok = name.starts_with(crate::SCRATCH_PREFIX)
        && name.len() <= 64
        && name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'.');
    if ok {
        Ok(())
    } else {
        Err(Error::invalid(format!("bad scratch name {name:?}")))
    }
}

/// The values the shell parts take from Rust, so each is defined once: the
/// exit codes (`_ss_E_<NAME>`), the status/marker tag and the reserved
/// scratch prefix.
fn constants() -> String {
    let mut s = String::with_capacity(512);
    for (name, code) in exit::ALL {
        let _ = writeln!(s, "_ss_E_{name}={code}");
    }
    let _ = writeln!(s, "_ss_TAG={TAG}");
    let _ = writeln!(s, "_ss_reserved={}", crate::SCRATCH_PREFIX);
    let _ = writeln!(s, "_ss_oldstate={}", crate::LEGACY_STATE_FILE);
    s
}

fn preamble(root: &str, timeout_ms: u64, scratch: &str) -> Result<String, Error> {
    check_scratch(scratch)?;
    let mut s = String::with_capacity(LIBRARY.len() + 1024);
    s.push_str(&constants());
    let _ = writeln!(s, "_ss_rootarg={}", sh_quote(root)?);
    let _ = writeln!(s, "_ss_statekey={}", crate::state_key(root));
    let _ = writeln!(s, "_ss_scratch={scratch}");
    let _ = writeln!(s, "_ss_deadline={}", deadline(timeout_ms));
    s.push_str(LIBRARY);
    Ok(s)
}

/// A program that removes the scratch dir `stale` a killed program left
/// behind (a SIGKILLed shell cannot run its trap). It uses its own scratch.
///
/// The killed shell's children may still be writing into it (a transport
/// that kills only the shell, or none at all, as Kubernetes when the client
/// goes away, leaves its `tar` extracting what the pipe still holds), so it
/// removes until the dir stays gone, for up to five seconds.
///
/// # Errors
/// When a name is not a valid scratch name.
pub fn cleanup(root: &str, stale: &str, scratch: &str) -> Result<String, Error> {
    check_scratch(stale)?;
    let mut s = preamble(root, 10_000, scratch)?;
    let _ = writeln!(s, "_ss_sweep {}", sh_quote(stale)?);
    Ok(s)
}

/// `SOURCE FOLLOW PATTERNS...` for `_ss_odir`, quoted. The sandbox's tar
/// only saves bytes on the wire; the component applies the exact patterns
/// to what arrives. Its tar runs in the C locale, where an ASCII pattern
/// excludes a subset of what the component does; other patterns are left
/// to the component alone.
fn dir_args(source: &str, follow: bool, exclude: &[String]) -> Result<String, Error> {
    let mut line = format!("{} {}", sh_quote(source)?, u8::from(follow));
    for p in crate::exclude::DEFAULT_EXCLUDES
        .iter()
        .copied()
        .chain(exclude.iter().map(String::as_str))
        .filter(|p| p.is_ascii())
    {
        line.push(' ');
        line.push_str(&sh_quote(p)?);
    }
    Ok(line)
}

/// Formats a mode for `chmod` (empty for none).
pub fn mode_arg(mode: Option<u32>) -> String {
    match mode {
        Some(m) => format!("{:04o}", m & 0o7777),
        None => String::new(),
    }
}

/// Formats a timeout for `sleep`: seconds with millisecond precision.
fn seconds(ms: u64) -> String {
    format!("{}.{:03}", ms / 1000, ms % 1000)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A part that defines a function the library defines replaces it for
    /// the whole program, silently (outbound.sh's link probe once took the
    /// name of the library's clock probe, and incremental listings broke).
    #[test]
    fn no_part_redefines_a_library_function() {
        let defined = |text: &'static str| -> Vec<&'static str> {
            text.lines()
                .filter_map(|l| l.strip_suffix("() {"))
                .filter(|n| n.starts_with("_ss_") && !n.contains(' '))
                .collect()
        };
        let library = defined(LIBRARY);
        for (name, part) in [
            ("inbound", INBOUND),
            ("outbound", OUTBOUND),
            ("fallback", FALLBACK),
        ] {
            let mut seen = library.clone();
            for f in defined(part) {
                assert!(!seen.contains(&f), "{name}.sh defines {f} again");
                seen.push(f);
            }
        }
    }

    #[test]
    fn argv_is_small_and_constant() {
        let a = argv(123_456);
        assert_eq!(a.len(), 5);
        assert_eq!(a[..4], argv(1)[..4]);
        assert!(a.iter().map(String::len).sum::<usize>() < 512);
    }

    #[test]
    fn every_path_is_quoted() {
        let mut s = InboundScript::new("/w", 0, ".paperclip-upload-t");
        s.put_file("f0", "/w/a b", "x'y;touch /tmp/pwn", Some(0o600))
            .unwrap();
        let text = s.finish(true, "tok").unwrap();
        assert!(
            text.contains("_ss_file 'f0' '/w/a b' 'x'\\''y;touch /tmp/pwn' '0600'"),
            "{text}"
        );
        // GNU tar reads whole 20-block records; the token is quoted.
        assert!(
            text.contains("\n_ss_extract 0 20\n_ss_commit 'tok'\n"),
            "{text}"
        );
    }

    /// The shell parts name every shared value through the preamble's
    /// variables, never as a literal that could drift from Rust.
    #[test]
    fn shell_parts_take_shared_values_from_rust() {
        let defined: Vec<String> = exit::ALL
            .iter()
            .map(|(n, _)| format!("_ss_E_{n}"))
            .collect();
        for (file, text) in [
            ("common.sh", LIBRARY),
            ("inbound.sh", INBOUND),
            ("outbound.sh", OUTBOUND),
            ("fallback.sh", FALLBACK),
        ] {
            for (i, _) in text.match_indices("_ss_die ") {
                assert!(
                    text[i + 8..].starts_with("\"$_ss_E_"),
                    "{file}: a literal exit code at byte {i}"
                );
            }
            assert!(!text.contains(TAG), "{file}: literal {TAG}");
            assert!(
                !text.contains(crate::SCRATCH_PREFIX),
                "{file}: literal scratch prefix"
            );
            for (i, _) in text.match_indices("_ss_E_") {
                let name: String = text[i..]
                    .chars()
                    .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                    .collect();
                assert!(defined.contains(&name), "{file}: {name} is not defined");
            }
        }
        let p = constants();
        assert!(p.contains("_ss_E_ESCAPE=42\n") && p.contains("_ss_TAG=SANDBOX-SYNC\n"));
        assert!(BOOTSTRAP.contains(&format!("exit {}", exit::BOOTSTRAP)));
    }

    /// Every program the host can build, from fixtures that use every
    /// part: the text Rust assembles around the `.sh` parts holds no
    /// literal exit code either, and no shell control flow of its own.
    fn every_program() -> Vec<(&'static str, String)> {
        let sc = ".paperclip-upload-t";
        let mut i = InboundScript::new("/w", 5000, sc);
        i.record();
        i.zip_listings();
        i.offer_compression();
        for t in ["/w/a", "/w/f"] {
            i.preflight(t).unwrap();
        }
        i.put_dir("d0", "/w", "a", Some(0o755)).unwrap();
        i.reuse_dir(0, "/w/a").unwrap();
        i.put_file("f1", "/w", "f", None).unwrap();
        i.reuse_file(1, "/w/f").unwrap();
        i.put_root("d2", None).unwrap();
        i.command(0, 0, "c0.0", "/w", Some(1500)).unwrap();
        i.op_done(0);
        let report = i.report_program(".paperclip-upload-r").unwrap().unwrap();
        let reported = InboundScript::finish_reported(
            {
                let mut j = InboundScript::new("/w", 0, sc);
                j.reuse_dir(0, "/w/a").unwrap();
                j
            },
            true,
            "tok",
            ".paperclip-upload-r",
        )
        .unwrap();
        let inbound = i.finish(true, "tok").unwrap();
        let mut o = OutboundScript::new("/w", 5000, sc);
        o.zip_listings();
        o.list_dir(0, "/w/a", false, None).unwrap();
        o.list_file(1, "/w/f", Some(("", "~"))).unwrap();
        o.dir(0, 0, "/w/a", true, &["*.o".to_owned()], Some(0))
            .unwrap();
        o.file(0, 1, "/w/f", Some(1)).unwrap();
        o.op_done(0);
        o.offer_compression(&[Codec::Zstd, Codec::Gzip], true, Some(524_288));
        let out_report = o.report_program(".paperclip-upload-r").unwrap().unwrap();
        let answered = o
            .clone()
            .finish_answered(b"0\n0\n", ".paperclip-upload-r")
            .unwrap();
        let outbound = o.finish().unwrap();
        let steps = [
            FallbackStep::Create {
                target: "/w/f",
                parent: "/w",
                temp: ".paperclip-upload-x",
            },
            FallbackStep::Extract {
                dir: "/w/a",
                tar: ".paperclip-upload-x.tar",
            },
            FallbackStep::ReplaceRoot { mode: None },
        ];
        let sep = "SEP";
        let uploaded = toolbox::Program::Uploaded {
            path: "/w/.paperclip-upload-t.sh",
            len: 10,
        };
        vec![
            ("inbound", inbound),
            ("inbound report", report),
            ("inbound after a report", reported),
            ("outbound", outbound),
            ("outbound report", out_report),
            ("outbound answered", answered),
            ("cleanup", cleanup("/w", ".paperclip-upload-s", sc).unwrap()),
            ("fallback", fallback("/w", 0, sc, &steps).unwrap()),
            (
                "toolbox inbound",
                toolbox::inbound("/w/.paperclip-upload-t.in", 10, Some(Codec::Gzip), sep, 64)
                    .unwrap(),
            ),
            (
                "toolbox outbound",
                toolbox::outbound(uploaded, "/w/.paperclip-upload-t.out", sep, 64).unwrap(),
            ),
            (
                "toolbox plain",
                toolbox::plain(toolbox::Program::Inline("true"), sep, 64).unwrap(),
            ),
        ]
    }

    /// Whether `s` is only ` '<quoted>'` words (each `'\''` inside one).
    fn quoted_words(s: &str) -> bool {
        let mut rest = s;
        while !rest.is_empty() {
            let Some(word) = rest.strip_prefix(" '") else {
                return false;
            };
            let mut at = 0;
            loop {
                match word[at..].find('\'') {
                    None => return false,
                    Some(i) if word[at + i..].starts_with("'\\''") => at += i + 4,
                    Some(i) => {
                        rest = &word[at + i + 1..];
                        break;
                    }
                }
            }
        }
        true
    }

    #[test]
    fn built_programs_take_every_exit_code_from_rust() {
        let parts = [LIBRARY, INBOUND, OUTBOUND, FALLBACK];
        for (what, text) in every_program() {
            for (i, _) in text.match_indices("_ss_die ") {
                let rest = &text[i + 8..];
                assert!(
                    !rest.starts_with(|c: char| c.is_ascii_digit()),
                    "{what}: a literal exit code: {}",
                    &rest[..rest.len().min(40)]
                );
            }
            // A toolbox command is the wrapper and quoted words.
            if let Some(args) = text.strip_prefix(&toolbox::wrapper_prefix().unwrap()) {
                assert!(quoted_words(args), "{what}: not only quoted words: {args}");
                continue;
            }
            // What Rust adds around the parts: calls with quoted
            // arguments, assignments, markers; never control flow.
            let mut own = text.clone();
            for part in parts {
                own = own.replace(part, "");
            }
            let own = own.replace(BOOTSTRAP, "");
            for line in own.lines() {
                let words: Vec<&str> = line.split_whitespace().collect();
                for kw in ["fi", "esac", ";;", "then", "do", "done"] {
                    assert!(
                        !words.contains(&kw) && !line.contains(";;"),
                        "{what}: Rust wrote shell control flow ({kw}): {line}"
                    );
                }
            }
        }
    }

    #[test]
    fn nul_is_refused() {
        let mut s = InboundScript::new("/w", 0, ".paperclip-upload-t");
        assert!(s.put_file("f0", "/w", "a\0b", None).is_err());
    }
}
