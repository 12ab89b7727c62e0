//! The in-sandbox POSIX `sh` programs and how they are framed.
//!
//! One exec per sync call. Its argv is the constant [`argv`] bootstrap plus
//! one number: the length of the script that follows on stdin. The bootstrap
//! reads exactly that many bytes (`head -c` where it is exact — GNU
//! coreutils — else `dd bs=1`, which is exact everywhere but slow, fine for a
//! script) and `eval`s it. For sync-in the archive follows the script and is
//! read by one `head -c N | tar -x`, the last reader of stdin, because BusyBox
//! `head` reads ahead. Nothing ever waits for stdin EOF.
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
use crate::SyncError;

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

/// Prefix of every status line and frame marker the scripts print.
pub const TAG: &str = "SANDBOX-SYNC";

/// Exit codes of the scripts (40-48 as in the seeds, the rest ours).
pub mod exit {
    /// Neither `realpath` nor `readlink -f` exists.
    pub const NO_CANONICALIZER: i32 = 40;
    /// The remote dir cannot be resolved or is not a directory.
    pub const ROOT: i32 = 41;
    /// A path resolves outside the remote dir.
    pub const ESCAPE: i32 = 42;
    /// Extracting, archiving or copying failed.
    pub const EXTRACT: i32 = 43;
    /// A rename onto a target failed.
    pub const RENAME: i32 = 44;
    /// An outbound source was replaced or is not a regular file.
    pub const NOTREG: i32 = 45;
    /// A directory could not be created, opened or entered.
    pub const MKDIR: i32 = 46;
    /// A pinning open failed.
    pub const OPEN: i32 = 47;
    /// `chmod` failed.
    pub const CHMOD: i32 = 48;
    /// The archive's commit marker is missing: a source changed or the stream was cut.
    pub const INCOMPLETE: i32 = 50;
    /// A post-upload command exited non-zero.
    pub const COMMAND: i32 = 51;
    /// A post-upload command ran past its timeout.
    pub const COMMAND_TIMEOUT: i32 = 52;
    /// An outbound source does not exist.
    pub const MISSING: i32 = 53;
    /// The program reached its own deadline and stopped.
    pub const DEADLINE: i32 = 54;
    /// The bootstrap could not read the script.
    pub const BOOTSTRAP: i32 = 70;
}

const LIBRARY: &str = r#"set -u
unset TAR_OPTIONS
case $(tar --version 2>/dev/null) in *'GNU tar'*) _ss_gnutar=1;; *) _ss_gnutar=0;; esac
_ss_die() { printf 'sandbox-sync: %s\n' "$2" >&2; exit "$1"; }
if command -v realpath >/dev/null 2>&1; then _ss_resolve() { realpath "$1"; }
elif command -v readlink >/dev/null 2>&1; then _ss_resolve() { readlink -f "$1"; }
else _ss_die 40 'no path canonicalizer (realpath or readlink -f) in the sandbox'; fi
# Resolves $1 into _ss_r exactly. $(...) strips every trailing newline, so
# a path ending in one would silently become another path: fence the output
# with an x and take off exactly the x and the one newline the tool added.
_ss_canon() { _ss_r=$(_ss_resolve "$1" && echo x) || return 1; _ss_r=${_ss_r%?x}; }
_ss_canon "$_ss_rootarg" && _ss_root=$_ss_r && [ -d "$_ss_root" ] || _ss_die 41 "cannot resolve the remote dir $_ss_rootarg"
_ss_in_root() { case "$1/" in "$_ss_root"/*) return 0 ;; esac; return 1; }
_ss_check() {
  _ss_canon "$1" || _ss_die 42 "ESCAPE: cannot resolve $1"
  _ss_in_root "$_ss_r" || _ss_die 42 "ESCAPE: $1 resolves outside the remote dir"
}
_ss_confine_ancestor() {
  _ss_a=$1
  while [ ! -e "$_ss_a" ] && [ ! -L "$_ss_a" ]; do
    # dirname without a fork: paths here are absolute and normalized.
    _ss_p=${_ss_a%/*}; [ -n "$_ss_p" ] || _ss_p=/
    [ "$_ss_p" = "$_ss_a" ] && break; _ss_a=$_ss_p
  done
  _ss_canon "$_ss_a" || _ss_die 42 "ESCAPE: cannot resolve $_ss_a"
  _ss_in_root "$_ss_r" || _ss_die 42 "ESCAPE: $1 has an ancestor outside the remote dir"
}
_ss_pin() {
  _ss_check "$1"
  eval "exec $2<\"\$_ss_r\"" || _ss_die 47 "cannot open $1"
  _ss_check "/proc/self/fd/$2"
  [ -d "/proc/self/fd/$2" ] || _ss_die 46 "$1 is not a directory"
}
# Creates the directory $1 (lexically under the remote dir) one component
# at a time through pinned fds, never by path: a directory swapped for a
# symlink mid-walk can only ever be followed into a place that is re-checked
# (through /proc/self/fd) before anything is created in it. Leaves fd 8 on $1.
_ss_mkdirs() {
  _ss_pin "$_ss_root" 8
  case "$1" in "$_ss_rootarg") return 0 ;; "$_ss_rootarg"/*) ;; *) _ss_die 42 "ESCAPE: $1 is not under the remote dir" ;; esac
  _ss_rel=${1#"$_ss_rootarg"/}
  _ss_ifs=$IFS; IFS=/; set -f
  for _ss_c in $_ss_rel; do
    IFS=$_ss_ifs
    [ -e "/proc/self/fd/8/$_ss_c" ] || [ -L "/proc/self/fd/8/$_ss_c" ] || mkdir "/proc/self/fd/8/$_ss_c" 2>/dev/null
    exec 7<"/proc/self/fd/8/$_ss_c" || _ss_die 46 "cannot open $_ss_c in $1"
    _ss_check /proc/self/fd/7
    [ -d /proc/self/fd/7 ] || _ss_die 46 "$_ss_c in $1 is not a directory"
    exec 8<&7 7<&-
  done
  IFS=$_ss_ifs; set +f
}
_ss_S="$_ss_root/$_ss_scratch"
mkdir -m 700 "$_ss_S" || _ss_die 46 'cannot create the scratch dir'
_ss_tag=$_ss_scratch
_ss_pending=
_ss_watch=
_ss_cp=
# Watchers are stopped with USR2, which nothing in this program traps: a
# forked subshell keeps its parent's handlers for trapped signals until it
# resets them, and dash and BusyBox sh drop a signal caught in that window
# (a TERM there was lost, so a watcher slept on to its timeout). An
# untrapped USR2 kills the child outright until it installs its own trap.
# The watchers' sleeps are KILLed for the same reason.
_ss_cleanup() {
  [ -z "$_ss_watch" ] || kill -USR2 "$_ss_watch" 2>/dev/null
  [ -z "$_ss_cp" ] || kill "$_ss_cp" 2>/dev/null
  [ -z "$_ss_pending" ] || rm -rf "$_ss_pending"
  rm -rf "$_ss_S"
}
trap _ss_cleanup EXIT
trap 'exit 129' HUP; trap 'exit 130' INT; trap 'exit 141' PIPE; trap 'exit 143' TERM; trap 'exit 54' USR1
if [ -n "$_ss_deadline" ]; then
  (trap 'kill -KILL "$_ss_ws" 2>/dev/null; exit 0' USR2
   sleep "$_ss_deadline" & _ss_ws=$!
   wait "$_ss_ws" && kill -USR1 $$) </dev/null >/dev/null 2>&1 &
  _ss_watch=$!
fi
_ss_pin "$_ss_S" 9
"#;

const INBOUND: &str = r#"_ss_mkparent() {
  _ss_confine_ancestor "$1"
  _ss_mkdirs "$1"
}
_ss_file() {
  _ss_mkparent "$2"
  [ -z "$4" ] || chmod "$4" "/proc/self/fd/9/$1" || _ss_die 48 "chmod failed for $2/$3"
  _ss_pending="/proc/self/fd/8/$_ss_tag.$1"
  mv -f -T "/proc/self/fd/9/$1" "$_ss_pending" || _ss_die 44 "cannot stage into $2"
  mv -f -T "$_ss_pending" "/proc/self/fd/8/$3" || _ss_die 44 "cannot rename onto $2/$3"
  _ss_pending=
  exec 8<&-
}
_ss_clear() {
  for _ss_e in "$1"/* "$1"/.[!.]* "$1"/..?*; do
    [ -e "$_ss_e" ] || [ -L "$_ss_e" ] || continue
    case ${_ss_e##*/} in "$_ss_reserved"*) continue ;; esac
    rm -rf "$_ss_e" || _ss_die 44 "cannot remove ${_ss_e##*/} from the target"
  done
}
# Moves every entry of $1 but provider scratch into $2.
_ss_move_all() {
  for _ss_e in "$1"/* "$1"/.[!.]* "$1"/..?*; do
    [ -e "$_ss_e" ] || [ -L "$_ss_e" ] || continue
    case ${_ss_e##*/} in "$_ss_reserved"*) continue ;; esac
    mv -f -T "$_ss_e" "$2/${_ss_e##*/}" || return 1
  done
}
# Replaces the remote dir's contents (it is often a mount point, and it
# holds the scratch dir) with the staged tree $1, all or nothing: the old
# entries move aside into the scratch dir, the mode is set, the new ones
# move in, and a failure at any step moves everything back.
_ss_dir_root() {
  _ss_pin "$_ss_root" 8
  _ss_aside="/proc/self/fd/9/$1.old"
  mkdir -m 700 "$_ss_aside" || _ss_die 46 'cannot create scratch for the old contents'
  _ss_m=$(stat -c %a /proc/self/fd/8 2>/dev/null) || _ss_m=
  if ! _ss_move_all /proc/self/fd/8 "$_ss_aside"; then
    _ss_move_all "$_ss_aside" /proc/self/fd/8
    _ss_die 44 'cannot move the old contents of the remote dir aside (a mount point inside?)'
  fi
  if [ -n "$2" ] && ! chmod "$2" /proc/self/fd/8; then
    _ss_move_all "$_ss_aside" /proc/self/fd/8
    _ss_die 48 'chmod failed for the remote dir'
  fi
  if ! _ss_move_all "/proc/self/fd/9/$1" /proc/self/fd/8; then
    _ss_move_all /proc/self/fd/8 "/proc/self/fd/9/$1"
    [ -z "$_ss_m" ] || chmod "$_ss_m" /proc/self/fd/8
    _ss_move_all "$_ss_aside" /proc/self/fd/8
    _ss_die 44 'cannot move the new contents into the remote dir'
  fi
  exec 8<&-
}
_ss_dir() {
  _ss_mkparent "$2"
  [ -z "$4" ] || chmod "$4" "/proc/self/fd/9/$1" || _ss_die 48 "chmod failed for $2/$3"
  _ss_pending="/proc/self/fd/8/$_ss_tag.$1"
  mv -f -T "/proc/self/fd/9/$1" "$_ss_pending" || _ss_die 44 "cannot stage into $2"
  _ss_old="/proc/self/fd/8/$_ss_tag.$1.old"
  if [ -e "/proc/self/fd/8/$3" ] || [ -L "/proc/self/fd/8/$3" ]; then
    mv -f -T "/proc/self/fd/8/$3" "$_ss_old" || _ss_die 44 "cannot replace $2/$3 (is it a mount point?)"
  fi
  if ! mv -f -T "$_ss_pending" "/proc/self/fd/8/$3"; then
    [ ! -e "$_ss_old" ] || mv -f -T "$_ss_old" "/proc/self/fd/8/$3"
    _ss_die 44 "cannot rename onto $2/$3"
  fi
  _ss_pending=$_ss_old
  rm -rf "$_ss_old" || _ss_die 44 "cannot remove the replaced $2/$3"
  _ss_pending=
  exec 8<&-
}
_ss_cmd() {
  _ss_pin "$4" 8
  _ss_c=$(cat "/proc/self/fd/9/$3"; echo x) || _ss_die 43 'cannot read a staged command'
  _ss_c=${_ss_c%x}
  rm -f /proc/self/fd/9/timeout
  (cd -P /proc/self/fd/8 || exit 46; exec /bin/sh -c "$_ss_c" sandbox-sync-post-upload 8<&- 9<&-) </dev/null 1>&2 &
  _ss_cp=$!
  _ss_wp=
  if [ -n "$5" ]; then
    (trap 'kill -KILL "$_ss_sp" 2>/dev/null; exit 0' USR2
     sleep "$5" & _ss_sp=$!
     wait "$_ss_sp" || exit 0
     : >/proc/self/fd/9/timeout
     kill -TERM "$_ss_cp" 2>/dev/null; sleep 1; kill -KILL "$_ss_cp" 2>/dev/null) </dev/null >/dev/null 2>&1 &
    _ss_wp=$!
  fi
  wait "$_ss_cp"; _ss_rc=$?
  _ss_cp=
  if [ -n "$_ss_wp" ]; then kill -USR2 "$_ss_wp" 2>/dev/null; wait "$_ss_wp" 2>/dev/null; fi
  exec 8<&-
  if [ -e /proc/self/fd/9/timeout ]; then
    printf 'SANDBOX-SYNC cmd %s %s %s 1\n' "$1" "$2" "$_ss_rc"; _ss_die 52 "post-upload command timed out after $5s"
  fi
  if [ "$_ss_rc" -ne 0 ]; then
    printf 'SANDBOX-SYNC cmd %s %s %s 0\n' "$1" "$2" "$_ss_rc"; _ss_die 51 "post-upload command failed (exit $_ss_rc)"
  fi
}
"#;

const OUTBOUND: &str = r#"_ss_mark() { printf '%-511s\n' "SANDBOX-SYNC $1"; }
_ss_ofile() {
  [ -e "$1" ] || [ -L "$1" ] || _ss_die 53 "source $1 does not exist"
  _ss_check "$1"
  exec 7<"$_ss_r" || _ss_die 45 "REPLACED: cannot open $1"
  _ss_check /proc/self/fd/7
  [ -f /proc/self/fd/7 ] || _ss_die 45 "NOTREG: $1 is not a regular file"
  rm -f /proc/self/fd/9/f
  # A hard link to the pinned file names it for tar without copying it; a
  # copy where linking is refused (another filesystem, protected_hardlinks,
  # a BusyBox ln without -L).
  ln -L /proc/self/fd/7 /proc/self/fd/9/f 2>/dev/null \
    || cp /proc/self/fd/7 /proc/self/fd/9/f || _ss_die 43 "snapshot copy of $1 failed"
  exec 7<&-
  (cd -P /proc/self/fd/9 && exec tar -c -f - f) || _ss_die 43 "archiving $1 failed"
}
_ss_odir() {
  [ -e "$1" ] || [ -L "$1" ] || _ss_die 53 "source $1 does not exist"
  _ss_pin "$1" 8
  _ss_src=$1; _ss_follow=$2; shift 2
  (
    cd -P /proc/self/fd/8 || exit 46
    _ss_n=$#
    for _ss_x do [ "$_ss_gnutar" = 0 ] || set -- "$@" --exclude "$_ss_x"; done
    shift "$_ss_n"
    [ "$_ss_follow" = 0 ] || set -- -h "$@"
    set -- "$@" --
    _ss_k=0
    for _ss_e in * .[!.]* ..?*; do
      [ -e "$_ss_e" ] || [ -L "$_ss_e" ] || continue
      # Provider scratch (ours, or a fallback's staged tar) is not data.
      case $_ss_e in "$_ss_reserved"*) continue ;; esac
      set -- "$@" "$_ss_e"; _ss_k=$((_ss_k + 1))
    done
    exec 8<&- 9<&-
    if [ "$_ss_k" -eq 0 ]; then exec head -c 1024 /dev/zero; fi
    LC_ALL=C exec tar -c -f - "$@"
  ) || _ss_die 43 "archiving $_ss_src failed"
  exec 8<&-
}
"#;

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
fn check_scratch(name: &str) -> Result<(), SyncError> {
    let ok = name.starts_with(crate::SCRATCH_PREFIX)
        && name.len() <= 64
        && name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'.');
    if ok {
        Ok(())
    } else {
        Err(SyncError::invalid(format!("bad scratch name {name:?}")))
    }
}

fn preamble(root: &str, timeout_ms: u64, scratch: &str) -> Result<String, SyncError> {
    check_scratch(scratch)?;
    let mut s = String::with_capacity(LIBRARY.len() + 256);
    let _ = writeln!(s, "_ss_rootarg={}", sh_quote(root)?);
    let _ = writeln!(s, "_ss_scratch={scratch}");
    let _ = writeln!(s, "_ss_reserved={}", sh_quote(crate::SCRATCH_PREFIX)?);
    let _ = writeln!(s, "_ss_deadline={}", deadline(timeout_ms));
    s.push_str(LIBRARY);
    Ok(s)
}

/// The whole function library (common, inbound and outbound helpers) for
/// remote dir `root`, for providers that compose their own programs.
///
/// # Errors
/// When `root` cannot be quoted (NUL).
pub fn library(root: &str, timeout_ms: u64, scratch: &str) -> Result<String, SyncError> {
    let mut s = preamble(root, timeout_ms, scratch)?;
    s.push_str(INBOUND);
    s.push_str(OUTBOUND);
    Ok(s)
}

/// A program that removes the scratch dir `stale` a killed program left
/// behind (a SIGKILLed shell cannot run its trap). It uses its own scratch.
///
/// # Errors
/// When a name is not a valid scratch name.
pub fn cleanup(root: &str, stale: &str, scratch: &str) -> Result<String, SyncError> {
    check_scratch(stale)?;
    let mut s = preamble(root, 10_000, scratch)?;
    let _ = writeln!(s, "rm -rf \"$_ss_root/{stale}\"");
    Ok(s)
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
        }
    }

    /// Confines `target`'s deepest existing ancestor before any data is read,
    /// so an escaping target fails before the transfer, not after.
    ///
    /// # Errors
    /// When `target` cannot be quoted (NUL).
    pub fn preflight(&mut self, target: &str) -> Result<(), SyncError> {
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
    ) -> Result<(), SyncError> {
        let _ = writeln!(
            self.ops,
            "_ss_file {} {} {} {}",
            sh_quote(staged)?,
            sh_quote(parent)?,
            sh_quote(base)?,
            sh_quote(&mode_arg(mode))?
        );
        Ok(())
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
    ) -> Result<(), SyncError> {
        let _ = writeln!(
            self.ops,
            "_ss_dir {} {} {} {}",
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
    pub fn put_root(&mut self, staged: &str, mode: Option<u32>) -> Result<(), SyncError> {
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
    ) -> Result<(), SyncError> {
        let timeout = timeout_ms.map(seconds).unwrap_or_default();
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
        let _ = writeln!(self.ops, "printf '{TAG} op %s\\n' {op}");
    }

    /// Finishes the program: it extracts `archive_len` bytes from stdin and
    /// refuses to apply anything unless the member `commit` holds `token`.
    ///
    /// `archive_len` must be whole tar records ([`tar_write::archive_len`]):
    /// GNU tar then reads exactly the archive by itself (it reads whole
    /// records and stops at the end marker), saving the `head -c` hop that
    /// copies every byte once more; other tars are bounded by `head -c`.
    ///
    /// # Errors
    /// When the root or token cannot be quoted.
    pub fn finish(self, archive_len: u64, token: &str) -> Result<String, SyncError> {
        let mut s = preamble(&self.root, self.timeout_ms, &self.scratch)?;
        s.push_str(INBOUND);
        s.push_str(&self.preflight);
        if archive_len > 0 {
            let _ = writeln!(
                s,
                "if [ \"$_ss_gnutar\" = 1 ]; then tar -x -b {blocking} -p -o -f - -C /proc/self/fd/9; \
else head -c {archive_len} | tar -x -p -o -f - -C /proc/self/fd/9; fi || _ss_die 43 'extracting the archive failed'",
                blocking = crate::tar_write::RECORD / 512
            );
            let _ = writeln!(
                s,
                "_ss_tok=; {{ read -r _ss_tok </proc/self/fd/9/commit; }} 2>/dev/null; [ \"$_ss_tok\" = {} ] || _ss_die 50 'archive incomplete: a source changed or the stream was cut'",
                sh_quote(token)?
            );
        }
        s.push_str(&self.ops);
        Ok(s)
    }
}

/// Builds the sync-out program: one framed tar stream per mapping on stdout.
#[derive(Debug)]
pub struct OutboundScript {
    root: String,
    timeout_ms: u64,
    scratch: String,
    body: String,
}

/// A frame marker the outbound program prints between tar streams.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Marker {
    /// The next tar stream is mapping `map` of operation `op`.
    Mapping {
        /// Operation index.
        op: usize,
        /// Mapping index within the operation.
        map: usize,
    },
    /// Operation `op` is complete.
    OpDone(usize),
    /// The program finished.
    End,
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
        }
    }

    fn mark(&mut self, m: &Marker) {
        let text = match m {
            Marker::Mapping { op, map } => format!("map {op} {map}"),
            Marker::OpDone(op) => format!("op {op}"),
            Marker::End => "end".to_owned(),
        };
        let _ = writeln!(self.body, "_ss_mark '{text}'");
    }

    /// Streams the regular file `source` (snapshotted through a pinned fd).
    ///
    /// # Errors
    /// When the path cannot be quoted (NUL).
    pub fn file(&mut self, op: usize, map: usize, source: &str) -> Result<(), SyncError> {
        self.mark(&Marker::Mapping { op, map });
        let _ = writeln!(self.body, "_ss_ofile {}", sh_quote(source)?);
        Ok(())
    }

    /// Streams the directory `source` (entered through a pinned fd).
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
    ) -> Result<(), SyncError> {
        self.mark(&Marker::Mapping { op, map });
        let mut line = format!("_ss_odir {} {}", sh_quote(source)?, u8::from(follow));
        // The sandbox's tar only saves bytes on the wire; the component
        // applies the exact patterns to what arrives. Its tar runs in the C
        // locale, where an ASCII pattern excludes a subset of what the
        // component does; other patterns are left to the component alone.
        for p in crate::exclude::DEFAULT_EXCLUDES
            .iter()
            .copied()
            .chain(exclude.iter().map(String::as_str))
            .filter(|p| p.is_ascii())
        {
            line.push(' ');
            line.push_str(&sh_quote(p)?);
        }
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
    pub fn finish(mut self) -> Result<String, SyncError> {
        self.mark(&Marker::End);
        let mut s = preamble(&self.root, self.timeout_ms, &self.scratch)?;
        s.push_str(OUTBOUND);
        s.push_str(&self.body);
        Ok(s)
    }
}

/// Parses a 512-byte block as a frame marker.
pub fn parse_marker(block: &[u8]) -> Option<Marker> {
    if block.len() != 512 || block[511] != b'\n' {
        return None;
    }
    let text = std::str::from_utf8(&block[..511])
        .ok()?
        .trim_end_matches(' ');
    let mut words = text.split(' ');
    if words.next()? != TAG {
        return None;
    }
    let m = match (words.next()?, words.next(), words.next()) {
        ("map", Some(op), Some(map)) => Marker::Mapping {
            op: op.parse().ok()?,
            map: map.parse().ok()?,
        },
        ("op", Some(op), None) => Marker::OpDone(op.parse().ok()?),
        ("end", None, None) => Marker::End,
        _ => return None,
    };
    words.next().is_none().then_some(m)
}

/// A status line of the inbound program.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Status {
    /// Operation complete.
    OpDone(usize),
    /// A post-upload command failed.
    CommandFailed {
        /// Operation index.
        op: usize,
        /// Command index.
        cmd: usize,
        /// Its exit status as the shell saw it.
        code: i32,
        /// It was killed by its timeout.
        timed_out: bool,
    },
}

/// Parses one status line (without the newline).
pub fn parse_status(line: &str) -> Option<Status> {
    let mut w = line.split(' ');
    if w.next()? != TAG {
        return None;
    }
    let s = match w.next()? {
        "op" => Status::OpDone(w.next()?.parse().ok()?),
        "cmd" => Status::CommandFailed {
            op: w.next()?.parse().ok()?,
            cmd: w.next()?.parse().ok()?,
            code: w.next()?.parse().ok()?,
            timed_out: w.next()? == "1",
        },
        _ => return None,
    };
    w.next().is_none().then_some(s)
}

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
    fn markers_round_trip() {
        for m in [
            Marker::Mapping { op: 3, map: 17 },
            Marker::OpDone(2),
            Marker::End,
        ] {
            let text = match &m {
                Marker::Mapping { op, map } => format!("{TAG} map {op} {map}"),
                Marker::OpDone(op) => format!("{TAG} op {op}"),
                Marker::End => format!("{TAG} end"),
            };
            let block = format!("{text:<511}\n");
            assert_eq!(parse_marker(block.as_bytes()), Some(m));
        }
        assert_eq!(parse_marker(&[0u8; 512]), None);
        let bad = format!("{:<511}\n", "SANDBOX-SYNC map 1");
        assert_eq!(parse_marker(bad.as_bytes()), None);
    }

    #[test]
    fn status_lines_parse_strictly() {
        assert_eq!(parse_status("SANDBOX-SYNC op 4"), Some(Status::OpDone(4)));
        assert_eq!(
            parse_status("SANDBOX-SYNC cmd 1 2 3 0"),
            Some(Status::CommandFailed {
                op: 1,
                cmd: 2,
                code: 3,
                timed_out: false
            })
        );
        assert_eq!(parse_status("SANDBOX-SYNC op 4 extra"), None);
        assert_eq!(parse_status("op 4"), None);
    }

    #[test]
    fn every_path_is_quoted() {
        let mut s = InboundScript::new("/w", 0, ".paperclip-upload-t");
        s.put_file("f0", "/w/a b", "x'y;touch /tmp/pwn", Some(0o600))
            .unwrap();
        let text = s.finish(10240, "tok").unwrap();
        assert!(
            text.contains("_ss_file 'f0' '/w/a b' 'x'\\''y;touch /tmp/pwn' '0600'"),
            "{text}"
        );
        assert!(text.contains("head -c 10240 | tar -x"));
        assert!(text.contains("tar -x -b 20 -p"));
    }

    #[test]
    fn nul_is_refused() {
        let mut s = InboundScript::new("/w", 0, ".paperclip-upload-t");
        assert!(s.put_file("f0", "/w", "a\0b", None).is_err());
    }
}
