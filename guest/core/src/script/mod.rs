//! The in-sandbox POSIX `sh` programs and how they are framed.
//!
//! One exec per sync call. Its argv is the constant [`argv`] bootstrap plus
//! one number: the length of the script that follows on stdin. The bootstrap
//! reads exactly that many bytes (`head -c` where it is exact — GNU
//! coreutils — else `dd bs=1`, which is exact everywhere but slow, fine for a
//! script) and `eval`s it. For sync-in the archive follows the script, read
//! by the last reader of stdin: GNU tar itself (it stops at the end marker),
//! other tars behind one `head -c N` (BusyBox `head` reads ahead, so nothing
//! may read stdin after it). Nothing ever waits for stdin EOF.
//!
//! Every string spliced into script text is single-quoted by
//! [`crate::quote::sh_quote`]; post-upload commands are not spliced at all:
//! they ride in the archive and reach `sh -c` as a positional parameter.
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
mod protocol;
pub mod toolbox;

pub use protocol::{
    choice_name, gunzip, parse_caps, parse_listing, parse_marker, parse_outbound_report,
    parse_status, Caps, Codec, Listing, ListingParser, Marker, Probe, Status, TooManyListed, TAG,
};

/// The constant `sh -c` program every exec starts with.
pub const BOOTSTRAP: &str =
    "case $(head --version 2>/dev/null) in *GNU*) _ss_s=$(head -c \"$1\");; \
*) _ss_s=$(dd bs=1 count=\"$1\" 2>/dev/null);; esac || exit 70; eval \"$_ss_s\"";

/// `$0` of the bootstrap shell.
pub const ARGV0: &str = "sandbox-sync";

/// The exec argv for a script of `script_len` bytes.
pub fn argv(script_len: usize) -> Vec<String> {
    vec![
        "/bin/sh".into(),
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
    let _ = writeln!(s, "_ss_statefile={}", crate::STATE_FILE);
    s
}

fn preamble(root: &str, timeout_ms: u64, scratch: &str) -> Result<String, Error> {
    check_scratch(scratch)?;
    let mut s = String::with_capacity(LIBRARY.len() + 1024);
    s.push_str(&constants());
    let _ = writeln!(s, "_ss_rootarg={}", sh_quote(root)?);
    let _ = writeln!(s, "_ss_scratch={scratch}");
    let _ = writeln!(s, "_ss_deadline={}", deadline(timeout_ms));
    s.push_str(LIBRARY);
    Ok(s)
}

/// The base64 fallback's helpers (see [`FallbackStep`]).
const FALLBACK: &str = include_str!("fallback.sh");

/// One step of the base64 fallback, run as `_ss_fb_*` with every argument
/// quoted (see `fallback.sh`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FallbackStep<'a> {
    /// An empty 0600 temp `temp` in `parent`, for the target `target`.
    Create {
        /// The target the temp stands in for (confined too).
        target: &'a str,
        /// Its parent directory.
        parent: &'a str,
        /// The temp's name.
        temp: &'a str,
    },
    /// Appends `len` base64 bytes from stdin, decoded, to the temp.
    Append {
        /// The temp's directory.
        parent: &'a str,
        /// The temp's name.
        temp: &'a str,
        /// Bytes of base64 on stdin.
        len: usize,
    },
    /// Gives the temp `mode` and renames it onto `base`.
    Promote {
        /// The temp's directory.
        parent: &'a str,
        /// The temp's name.
        temp: &'a str,
        /// The target's name in `parent`.
        base: &'a str,
        /// The mode to apply first.
        mode: Option<u32>,
    },
    /// Removes the temp.
    Remove {
        /// The temp's directory.
        parent: &'a str,
        /// The temp's name.
        temp: &'a str,
    },
    /// Extracts the staged tar into this exec's scratch as `d`.
    Extract {
        /// The tar's directory.
        dir: &'a str,
        /// The tar's name.
        tar: &'a str,
    },
    /// Replaces the remote dir's contents with `d`, all or nothing.
    ReplaceRoot {
        /// The mode to apply first.
        mode: Option<u32>,
    },
    /// Replaces the directory `parent/base` with `d`.
    ReplaceDir {
        /// The target's parent.
        parent: &'a str,
        /// The target's name.
        base: &'a str,
        /// The mode to apply first.
        mode: Option<u32>,
    },
    /// Runs the `len`-byte command on stdin in `cwd`.
    Command {
        /// Its confined working directory.
        cwd: &'a str,
        /// Bytes of command on stdin.
        len: usize,
    },
    /// Archives the file `source` into the staged tar `name`.
    PackFile {
        /// The staged tar under the remote dir.
        name: &'a str,
        /// The sandbox file.
        source: &'a str,
    },
    /// Archives the directory `source` into the staged tar `name`.
    PackDir {
        /// The staged tar under the remote dir.
        name: &'a str,
        /// The sandbox directory.
        source: &'a str,
        /// Dereference symlinks (`tar -h`).
        follow: bool,
        /// Exclude patterns (the defaults are added).
        exclude: &'a [String],
    },
    /// Removes the staged tar `name`.
    Unstage {
        /// The staged tar under the remote dir.
        name: &'a str,
    },
    /// Prints chunk `index` (of `size` bytes) of the staged tar as base64.
    Chunk {
        /// The staged tar under the remote dir.
        name: &'a str,
        /// Chunk size.
        size: usize,
        /// Which chunk.
        index: u64,
    },
}

impl FallbackStep<'_> {
    /// The call, every argument quoted.
    fn line(&self) -> Result<String, Error> {
        let q = |s: &str| sh_quote(s);
        let m = |mode: &Option<u32>| sh_quote(&mode_arg(*mode));
        Ok(match self {
            Self::Create {
                target,
                parent,
                temp,
            } => {
                format!("_ss_fb_create {} {} {}", q(target)?, q(parent)?, q(temp)?)
            }
            Self::Append { parent, temp, len } => {
                format!("_ss_fb_append {} {} {len}", q(parent)?, q(temp)?)
            }
            Self::Promote {
                parent,
                temp,
                base,
                mode,
            } => format!(
                "_ss_fb_promote {} {} {} {}",
                q(parent)?,
                q(temp)?,
                q(base)?,
                m(mode)?
            ),
            Self::Remove { parent, temp } => format!("_ss_fb_remove {} {}", q(parent)?, q(temp)?),
            Self::Extract { dir, tar } => format!("_ss_fb_extract {} {}", q(dir)?, q(tar)?),
            Self::ReplaceRoot { mode } => format!("_ss_dir_root d {}", m(mode)?),
            Self::ReplaceDir { parent, base, mode } => {
                format!("_ss_dir d {} {} {}", q(parent)?, q(base)?, m(mode)?)
            }
            Self::Command { cwd, len } => format!("_ss_fb_cmd {} {len}", q(cwd)?),
            Self::PackFile { name, source } => {
                format!("_ss_fb_pack {} file {}", q(name)?, q(source)?)
            }
            Self::PackDir {
                name,
                source,
                follow,
                exclude,
            } => format!(
                "_ss_fb_pack {} dir {}",
                q(name)?,
                dir_args(source, *follow, exclude)?
            ),
            Self::Unstage { name } => format!("_ss_fb_unstage {}", q(name)?),
            Self::Chunk { name, size, index } => {
                format!("_ss_fb_chunk {} {size} {index}", q(name)?)
            }
        })
    }
}

/// A base64-fallback program: the whole library, then `steps` in order.
///
/// # Errors
/// When a path cannot be quoted (NUL) or the scratch name is bad.
pub fn fallback(
    root: &str,
    timeout_ms: u64,
    scratch: &str,
    steps: &[FallbackStep<'_>],
) -> Result<String, Error> {
    let mut s = preamble(root, timeout_ms, scratch)?;
    s.push_str(INBOUND);
    s.push_str(OUTBOUND);
    s.push_str(FALLBACK);
    for step in steps {
        s.push_str(&step.line()?);
        s.push('\n');
    }
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
    let _ = writeln!(
        s,
        "_ss_n=0\n\
while [ -e \"$_ss_root/{stale}\" ] && [ \"$_ss_n\" -lt 50 ]; do\n\
  rm -rf \"$_ss_root/{stale}\" 2>/dev/null || sleep 0.1\n\
  _ss_n=$((_ss_n + 1))\n\
done"
    );
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

/// Builds the sync-in program: extract one archive into the scratch dir,
/// then apply operations in order.
#[derive(Debug)]
pub struct InboundScript {
    root: String,
    timeout_ms: u64,
    scratch: String,
    preflight: String,
    ops: String,
    compression: bool,
    /// Listings of targets a re-sync may keep files from, and the steps
    /// that keep them; whether what lands is recorded.
    listing: String,
    keeping: String,
    record: bool,
    zip: bool,
    /// The report program's scratch dir, whose listings this one takes
    /// over (a toolbox sandbox).
    adopt: Option<String>,
}

impl InboundScript {
    /// Starts a program for remote dir `root` (normalized) that stops
    /// itself shortly before `timeout_ms` (0: no deadline) and stages in
    /// `<root>/<scratch>` (a fresh `.paperclip-upload-*` name).
    pub fn new(root: &str, timeout_ms: u64, scratch: &str) -> Self {
        InboundScript {
            root: root.to_owned(),
            timeout_ms,
            scratch: scratch.to_owned(),
            preflight: String::new(),
            ops: String::new(),
            compression: false,
            listing: String::new(),
            keeping: String::new(),
            record: false,
            zip: false,
            adopt: None,
        }
    }

    /// Lets directory mapping `k` (staged as `d<k>`) keep files its target
    /// already holds (see [`crate::incremental`]): before extracting, the
    /// program lists the target's files still exactly as a sync-in landed
    /// them (`<TAG> list <k>`, then `<token> ./<path>` lines, then `<TAG>
    /// listed <k>`; see [`ListingParser`](super::ListingParser)). Where the
    /// archive then brings a member `k<k>` (the listed names the host does
    /// *not* keep, one a line) and anything is kept, the target is updated
    /// in place: what the new tree does not hold goes, the staged tree is
    /// linked in over what stays, and the kept files are not touched;
    /// without one nothing is kept and the staged tree replaces the target
    /// as ever. Once the operation landed, before its commands, the program
    /// records a fact for every file the token member `t<k>` (`<token>
    /// ./<path>` lines) names.
    ///
    /// # Errors
    /// When the target cannot be quoted (NUL).
    pub fn reuse_dir(&mut self, k: usize, target: &str) -> Result<(), Error> {
        // The remote dir itself holds provider scratch, which is not its.
        let root = if target == self.root { " root" } else { "" };
        let target = sh_quote(target)?;
        let _ = writeln!(self.listing, "_ss_list {k} {target}{root}");
        let _ = writeln!(self.keeping, "_ss_keep {k} {target}");
        Ok(())
    }

    /// Offers a compressed archive: before extracting, the program prints
    /// which codecs it can run (a `caps` line, see
    /// [`parse_caps`](super::parse_caps)) and reads the host's choice
    /// (`none`, `gzip` or `zstd`) as one line from stdin. A compressed
    /// archive is the rest of stdin, which the host then closes.
    pub fn offer_compression(&mut self) {
        self.compression = true;
    }

    /// Confines `target`'s deepest existing ancestor before any data is read,
    /// so an escaping target fails before the transfer, not after.
    ///
    /// # Errors
    /// When `target` cannot be quoted (NUL).
    pub fn preflight(&mut self, target: &str) -> Result<(), Error> {
        let _ = writeln!(self.preflight, "_ss_confine_ancestor {}", sh_quote(target)?);
        Ok(())
    }

    /// Promotes staged file `staged` onto `parent/base` with `mode`.
    ///
    /// # Errors
    /// When a path cannot be quoted (NUL).
    pub fn put_file(
        &mut self,
        staged: &str,
        parent: &str,
        base: &str,
        mode: Option<u32>,
    ) -> Result<(), Error> {
        self.put("_ss_file", staged, parent, base, mode)
    }

    /// Lets file mapping `k` keep the file its target `target` already
    /// holds: before extracting, the program reports `<TAG> file <k>
    /// <token>` when the target is a regular file inside the remote dir
    /// still exactly as a sync-in landed it (see
    /// [`ListingParser`](super::ListingParser)). Where the archive then
    /// brings an empty member `kf<k>` instead of `f<k>`, the program
    /// links the target, once checked, into the scratch dir as `f<k>`, and
    /// [`Self::put_file`] lands it as it lands a sent file (so an earlier
    /// mapping of the same sync that replaced the path through another
    /// name changes nothing); a sent file's token rides in `tf<k>`.
    ///
    /// # Errors
    /// When the target cannot be quoted (NUL).
    pub fn reuse_file(&mut self, k: usize, target: &str) -> Result<(), Error> {
        let target = sh_quote(target)?;
        let _ = writeln!(self.listing, "_ss_listf {k} {target}");
        let _ = writeln!(self.keeping, "_ss_keepf {k} {target}");
        Ok(())
    }

    /// Lets the program record what it lands for the next sync-in to keep
    /// (where the sandbox has the tools: `awk`, `find`, `stat`); it then
    /// says `record` in its caps, and the host sends tokens.
    pub fn record(&mut self) {
        self.record = true;
    }

    /// Lets the program gzip a big listing (`zlist`, see
    /// [`ListingParser`](super::ListingParser)): for a slow link, on a
    /// stream (a toolbox's text answers cannot carry it).
    pub fn zip_listings(&mut self) {
        self.zip = true;
    }

    /// Replaces directory `parent/base` with the staged tree `staged`.
    ///
    /// # Errors
    /// When a path cannot be quoted (NUL).
    pub fn put_dir(
        &mut self,
        staged: &str,
        parent: &str,
        base: &str,
        mode: Option<u32>,
    ) -> Result<(), Error> {
        self.put("_ss_dir", staged, parent, base, mode)
    }

    fn put(
        &mut self,
        function: &str,
        staged: &str,
        parent: &str,
        base: &str,
        mode: Option<u32>,
    ) -> Result<(), Error> {
        let _ = writeln!(
            self.ops,
            "{function} {} {} {} {}",
            sh_quote(staged)?,
            sh_quote(parent)?,
            sh_quote(base)?,
            sh_quote(&mode_arg(mode))?
        );
        Ok(())
    }

    /// Replaces the contents of the remote dir itself with the staged tree
    /// (the remote dir is often a mount point, and it holds the scratch dir).
    ///
    /// # Errors
    /// When a path cannot be quoted (NUL).
    pub fn put_root(&mut self, staged: &str, mode: Option<u32>) -> Result<(), Error> {
        let _ = writeln!(
            self.ops,
            "_ss_dir_root {} {}",
            sh_quote(staged)?,
            sh_quote(&mode_arg(mode))?
        );
        Ok(())
    }

    /// Runs the staged command `staged` (operation `op`, index `k`) in `cwd`.
    ///
    /// # Errors
    /// When a path cannot be quoted (NUL).
    pub fn command(
        &mut self,
        op: usize,
        k: usize,
        staged: &str,
        cwd: &str,
        timeout_ms: Option<u64>,
    ) -> Result<(), Error> {
        let timeout = timeout_ms.map(seconds).unwrap_or_default();
        // What the operation landed is recorded before any command runs.
        self.ops.push_str("_ss_recop\n");
        let _ = writeln!(
            self.ops,
            "_ss_cmd {op} {k} {} {} {}",
            sh_quote(staged)?,
            sh_quote(cwd)?,
            sh_quote(&timeout)?
        );
        Ok(())
    }

    /// Reports operation `op` as complete.
    pub fn op_done(&mut self, op: usize) {
        self.ops.push_str("_ss_recop\n");
        let _ = writeln!(self.ops, "printf '%s op %s\\n' \"$_ss_TAG\" {op}");
    }

    /// Finishes the program. With an `archive` to extract it first reports
    /// (its listings and codecs, see [`InboundScript::reuse_dir`] and
    /// [`InboundScript::offer_compression`]), then reads the host's answer
    /// line, `<codec> <archive length>` (codec `none`, `gzip` or `zstd`;
    /// anything else makes it stop, changing nothing; the length only
    /// bounds a plain archive for a tar that cannot stream), extracts the
    /// archive, and refuses to apply anything unless the member `commit`
    /// holds `token`.
    ///
    /// The host plans while the program starts and reports: nothing in the
    /// program depends on what the host's walk finds.
    ///
    /// A plain archive's length is whole tar records
    /// ([`tar_write::archive_len`](crate::tar_write::archive_len)): GNU tar
    /// then reads exactly the archive by itself (it reads whole records and
    /// stops at the end marker), saving the `head -c` hop that copies every
    /// byte once more; other tars are bounded by `head -c`.
    ///
    /// # Errors
    /// When the root or token cannot be quoted.
    pub fn finish(self, archive: bool, token: &str) -> Result<String, Error> {
        self.finish_with(archive, token, true)
    }

    /// The report alone, as a program of its own, for a transport on which
    /// the host must have the report before it starts the program (a
    /// toolbox sandbox, whose commands take no stdin): the preflights, the
    /// listings (see [`InboundScript::reuse_dir`]), then the `caps` line.
    /// It changes nothing but its own scratch dir `scratch` (a fresh name),
    /// which it leaves behind holding its listings for the program that
    /// follows ([`InboundScript::finish_reported`]), or removes when it
    /// fails. `None` when nothing is listed.
    ///
    /// # Errors
    /// When the root cannot be quoted or `scratch` is not a scratch name.
    pub fn report_program(&self, scratch: &str) -> Result<Option<String>, Error> {
        if self.listing.is_empty() {
            return Ok(None);
        }
        let mut s = preamble(&self.root, self.timeout_ms, scratch)?;
        s.push_str(INBOUND);
        s.push_str(&self.preflight);
        if self.record {
            s.push_str("_ss_canrecord && _ss_rec=1\n");
        }
        s.push_str(&self.listing);
        s.push_str(
            "_ss_c=$(_ss_caps); [ \"$_ss_rec\" = 0 ] || _ss_c=\"$_ss_c record\"
printf '%s caps%s\\n' \"$_ss_TAG\" \"$_ss_c\"
_ss_keepS=1\n",
        );
        Ok(Some(s))
    }

    /// [`InboundScript::finish`] for a program whose report ran before it
    /// ([`InboundScript::report_program`] with scratch dir `report`): it
    /// lists nothing itself, takes over the report's listings, and keeps
    /// what the archive's members say as ever.
    ///
    /// # Errors
    /// As [`InboundScript::finish`], or when `report` is not a scratch name.
    pub fn finish_reported(
        mut self,
        archive: bool,
        token: &str,
        report: &str,
    ) -> Result<String, Error> {
        check_scratch(report)?;
        self.adopt = Some(report.to_owned());
        self.finish_with(archive, token, false)
    }

    fn finish_with(self, archive: bool, token: &str, lists: bool) -> Result<String, Error> {
        let mut s = preamble(&self.root, self.timeout_ms, &self.scratch)?;
        s.push_str(INBOUND);
        if let Some(report) = &self.adopt {
            let _ = writeln!(s, "_ss_adopt {report}");
        }
        s.push_str(&self.preflight);
        if self.record {
            s.push_str("_ss_canrecord && _ss_rec=1\n");
        }
        if self.zip {
            s.push_str("_ss_zlist=1\n");
        }
        if archive {
            let plain = format!(
                "if [ \"$_ss_gnutar\" = 1 ]; then tar -x -b {blocking} -p -o -f - -C /proc/self/fd/9; \
else head -c \"$_ss_len\" | tar -x -p -o -f - -C /proc/self/fd/9; fi || _ss_die 43 'extracting the archive failed'",
                blocking = crate::tar_write::RECORD / 512
            );
            if lists {
                s.push_str(&self.listing);
            }
            let caps = if self.compression { "$(_ss_caps)" } else { "" };
            // GNU tar stops at the end marker: the host may then send
            // while it walks, with no length up front.
            let _ = writeln!(
                s,
                "_ss_codec={caps}; [ \"$_ss_gnutar\" = 1 ] && _ss_codec=\"$_ss_codec stream\"\n\
[ \"$_ss_rec\" = 0 ] || _ss_codec=\"$_ss_codec record\"\n\
printf '%s caps%s\\n' \"$_ss_TAG\" \"$_ss_codec\"\n\
read -r _ss_codec _ss_len || _ss_die 43 'the host sent no answer'\n\
case $_ss_codec in\n\
none) {plain} ;;\n\
gzip|zstd) _ss_unpack \"$_ss_codec\" || _ss_die 43 'extracting the compressed archive failed' ;;\n\
*) _ss_die 43 'the host sent no archive' ;;\n\
esac"
            );
            let _ = writeln!(
                s,
                "_ss_tok=; {{ read -r _ss_tok </proc/self/fd/9/commit; }} 2>/dev/null; [ \"$_ss_tok\" = {} ] || _ss_die 50 'archive incomplete: a source changed or the stream was cut'",
                sh_quote(token)?
            );
            s.push_str(&self.keeping);
        }
        s.push_str(&self.ops);
        if archive {
            s.push_str("_ss_savestate\n");
        }
        Ok(s)
    }
}

/// Builds the sync-out program: one framed tar stream per mapping on stdout.
#[derive(Debug, Clone)]
pub struct OutboundScript {
    root: String,
    timeout_ms: u64,
    scratch: String,
    body: String,
    /// Chooses and starts the transport codec, when one is offered.
    codec: Option<String>,
    /// Incremental: lists sources, then reads the host's keep lists.
    listing: String,
    answer: String,
    zip: bool,
}

impl OutboundScript {
    /// Starts a program for remote dir `root` (normalized) that stops
    /// itself shortly before `timeout_ms` (0: no deadline) and stages in
    /// `<root>/<scratch>` (a fresh `.paperclip-upload-*` name).
    pub fn new(root: &str, timeout_ms: u64, scratch: &str) -> Self {
        OutboundScript {
            root: root.to_owned(),
            timeout_ms,
            scratch: scratch.to_owned(),
            body: String::new(),
            codec: None,
            listing: String::new(),
            answer: String::new(),
            zip: false,
        }
    }

    /// Lets the program gzip a big listing (a [`Marker::Listing`] with
    /// `zipped`): for a slow link, on a stream (not in
    /// [`Self::report_program`]'s text).
    pub fn zip_listings(&mut self) {
        self.zip = true;
    }

    /// Lets directory mapping `k` (the index among all mappings, with
    /// source `source`) leave out files the host target already holds:
    /// before anything else (and before the codec's marker, so the host
    /// reads it while the program waits) the program frames the source's
    /// regular files as a [`Marker::Listing`]; once every listing is out it
    /// reads the host's answer for each, in order: a line with a length,
    /// then that many bytes of relative names, one a line, which its
    /// archive then leaves out (see [`Self::dir`]).
    ///
    /// # Errors
    /// When the source cannot be quoted (NUL).
    pub fn list_dir(&mut self, k: usize, source: &str) -> Result<(), Error> {
        let _ = writeln!(self.listing, "_ss_olist {k} {}", sh_quote(source)?);
        let _ = writeln!(self.answer, "_ss_okeep {k}");
        Ok(())
    }

    /// [`Self::list_dir`] for file mapping `k`'s regular file `source`: its
    /// listing is one line, for `./f`, and a non-empty answer (naming `f`)
    /// makes the program send an empty archive for it (see [`Self::file`]).
    ///
    /// # Errors
    /// When the source cannot be quoted (NUL).
    pub fn list_file(&mut self, k: usize, source: &str) -> Result<(), Error> {
        let _ = writeln!(self.listing, "_ss_olistf {k} {}", sh_quote(source)?);
        let _ = writeln!(self.answer, "_ss_okeep {k}");
        Ok(())
    }

    /// Compresses the output with the first of `prefer` the sandbox can
    /// run: the program first prints a plain [`Marker::Codec`] naming it
    /// (or `none`), then everything else through it. With `sample` (a
    /// source and whether it is a directory), gzip is used only if the
    /// source's first MiB samples as compressible.
    ///
    /// # Errors
    /// When the sample path cannot be quoted (NUL).
    pub fn offer_compression(
        &mut self,
        prefer: &[Codec],
        sample: Option<(&str, bool)>,
    ) -> Result<(), Error> {
        let mut s = String::from("_ss_pick");
        for c in prefer {
            let _ = write!(s, " {}", c.name());
        }
        s.push('\n');
        if let Some((path, dir)) = sample {
            let kind = if dir { "dir" } else { "file" };
            let _ = writeln!(
                s,
                "[ \"$_ss_codec\" != gzip ] || _ss_worth {kind} {} || _ss_codec=none",
                sh_quote(path)?
            );
        }
        s.push_str("_ss_mark \"codec $_ss_codec\"\n[ \"$_ss_codec\" = none ] || _ss_zstart \"$_ss_codec\"\n");
        self.codec = Some(s);
        Ok(())
    }

    fn mark(&mut self, m: &Marker) {
        let _ = writeln!(self.body, "_ss_mark '{}'", m.words());
    }

    /// Streams the regular file `source` (snapshotted through a pinned fd),
    /// or an empty archive where the host's answer for `listed` (the index
    /// [`Self::list_file`] was given) keeps it.
    ///
    /// # Errors
    /// When the path cannot be quoted (NUL).
    pub fn file(
        &mut self,
        op: usize,
        map: usize,
        source: &str,
        listed: Option<usize>,
    ) -> Result<(), Error> {
        self.mark(&Marker::Mapping { op, map });
        let keep = listed.map(|k| k.to_string()).unwrap_or_default();
        let _ = writeln!(self.body, "_ss_kf={keep}; _ss_ofile {}", sh_quote(source)?);
        Ok(())
    }

    /// Streams the directory `source` (entered through a pinned fd),
    /// leaving out what the host's answer for `listed` names (the index
    /// [`Self::list_dir`] was given).
    ///
    /// # Errors
    /// When a path or pattern cannot be quoted (NUL).
    pub fn dir(
        &mut self,
        op: usize,
        map: usize,
        source: &str,
        follow: bool,
        exclude: &[String],
        listed: Option<usize>,
    ) -> Result<(), Error> {
        self.mark(&Marker::Mapping { op, map });
        let keep = listed.map(|k| k.to_string()).unwrap_or_default();
        let line = format!(
            "_ss_kf={keep}; _ss_odir {}",
            dir_args(source, follow, exclude)?
        );
        let _ = writeln!(self.body, "{line}");
        Ok(())
    }

    /// Marks operation `op` complete.
    pub fn op_done(&mut self, op: usize) {
        self.mark(&Marker::OpDone(op));
    }

    /// Finishes the program.
    ///
    /// # Errors
    /// When the root cannot be quoted.
    pub fn finish(self) -> Result<String, Error> {
        self.finish_with(None)
    }

    /// The listings alone, as a program of its own, for a transport on
    /// which the host must answer before the program starts (a toolbox
    /// sandbox, whose commands take no stdin): the listings
    /// ([`Self::list_dir`], [`Self::list_file`]) as text, each between
    /// `<TAG> list <k> <probe>` and `<TAG> listed <k>` lines (see
    /// [`parse_outbound_report`](super::parse_outbound_report)), in a scratch dir
    /// `scratch` of its own. `None` when nothing is listed.
    ///
    /// # Errors
    /// When the root cannot be quoted or `scratch` is not a scratch name.
    pub fn report_program(&self, scratch: &str) -> Result<Option<String>, Error> {
        if self.listing.is_empty() {
            return Ok(None);
        }
        let mut s = preamble(&self.root, self.timeout_ms, scratch)?;
        s.push_str(OUTBOUND);
        s.push_str("_ss_report=1\n");
        s.push_str(KEEP_DETECT);
        s.push_str(&self.listing);
        Ok(Some(s))
    }

    /// [`Self::finish`] for a program whose listings a report program
    /// printed ([`Self::report_program`]): it lists nothing, and takes the
    /// host's `answer` (what it would have read from stdin: per listed
    /// mapping a length line and that many bytes of names) from its own
    /// text.
    ///
    /// # Errors
    /// When the root or the answer cannot be quoted (NUL).
    pub fn finish_answered(self, answer: &[u8]) -> Result<String, Error> {
        self.finish_with(Some(answer))
    }

    fn finish_with(mut self, answer: Option<&[u8]>) -> Result<String, Error> {
        self.mark(&Marker::End);
        let mut s = preamble(&self.root, self.timeout_ms, &self.scratch)?;
        s.push_str(OUTBOUND);
        if !self.listing.is_empty() {
            s.push_str(KEEP_DETECT);
            match answer {
                None => {
                    if self.zip {
                        s.push_str("_ss_zlist=1\n");
                    }
                    s.push_str(&self.listing);
                }
                Some(bytes) => {
                    let text = std::str::from_utf8(bytes)
                        .map_err(|_| Error::invalid("a keep list that is not UTF-8"))?;
                    let _ = writeln!(
                        s,
                        "printf '%s' {} >\"$_ss_S/a\" || _ss_die \"$_ss_E_EXTRACT\" 'cannot write the keep lists'\n\
exec <\"$_ss_S/a\"",
                        sh_quote(text)?
                    );
                }
            }
            s.push_str(&self.answer);
        }
        if let Some(codec) = &self.codec {
            s.push_str(codec);
        }
        s.push_str(&self.body);
        if self.codec.is_some() {
            s.push_str("[ \"$_ss_codec\" = none ] || _ss_zend\n");
        }
        Ok(s)
    }
}

/// Whether this sandbox can leave kept files out of its archive (GNU tar's
/// `-X`, a `head` that reads exactly the host's answer, `find` and `stat`
/// for the listing), and the filesystem's clock before any listing.
const KEEP_DETECT: &str = "_ss_ikeep=0
[ \"$_ss_gnutar\" = 0 ] || case $(head --version 2>/dev/null) in *GNU*) _ss_ikeep=1 ;; esac
_ss_have find stat || _ss_ikeep=0
_ss_oprobe
";

#[cfg(test)]
mod tests {
    use super::*;

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
        assert!(text.contains("head -c \"$_ss_len\" | tar -x"));
        assert!(text.contains("tar -x -b 20 -p"));
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

    #[test]
    fn nul_is_refused() {
        let mut s = InboundScript::new("/w", 0, ".paperclip-upload-t");
        assert!(s.put_file("f0", "/w", "a\0b", None).is_err());
    }
}
