set -u
unset TAR_OPTIONS CDPATH
case $(tar --version 2>/dev/null) in *'GNU tar'*) _ss_gnutar=1;; *) _ss_gnutar=0;; esac
_ss_die() { printf 'sandbox-sync: %s\n' "$2" >&2; exit "$1"; }
# Directories are pinned by fd and reached through /proc/self/fd: without
# /proc nothing could be confined, so nothing runs.
[ -d /proc/self/fd ] || _ss_die "$_ss_E_NOT_FOUND" 'the sandbox has no /proc (/proc/self/fd)'
# Feature $1 is off for this call for want of $2 (space-separated): a
# line on stderr, which the component hands on to the host for the
# call's result (README, "What the sandbox needs").
_ss_off() { printf '%s off %s %s\n' "$_ss_TAG" "$1" "$2" >&2; }
# Writes $1 zero bytes (tar padding, an empty archive) with the shell's
# own printf: no /dev/zero (a pod root whose /dev is empty has none) and
# no fork.
_ss_zeros() {
  _ss_zn=$1
  while [ "$_ss_zn" -ge 64 ]; do
    printf '\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0'
    _ss_zn=$((_ss_zn - 64))
  done
  while [ "$_ss_zn" -gt 0 ]; do printf '\0'; _ss_zn=$((_ss_zn - 1)); done
}
# The tools of "$@" the sandbox lacks, space-separated.
_ss_lacks() {
  _ss_m=
  for _ss_t do command -v "$_ss_t" >/dev/null 2>&1 || _ss_m="$_ss_m $_ss_t"; done
  printf %s "${_ss_m# }"
}
if command -v realpath >/dev/null 2>&1; then _ss_resolve() { realpath "$1"; }
elif command -v readlink >/dev/null 2>&1; then _ss_resolve() { readlink -f "$1"; }
else _ss_die "$_ss_E_NO_CANONICALIZER" 'no path canonicalizer (realpath or readlink -f) in the sandbox'; fi
# Resolves $1 into _ss_r exactly. A directory the shell can enter is
# resolved by the kernel without a fork: `cd -P` sets PWD to getcwd's
# physical path (a shell that falls back to a logical one is caught by -ef:
# PWD must name the directory entered), and the shell goes back to /, as
# nothing here uses a relative path. So is a file that is not a symlink:
# it is its resolved directory and its own name (paths here are
# normalized: no . or .. leaf), as the tool would say. Anything else goes
# to the tool, and since $(...) strips every trailing newline, which would
# silently make a path ending in one another path, its output is fenced
# with an x and exactly the x and the one newline the tool added come off.
_ss_canon() {
  _ss_cpd=$1; _ss_leaf=
  if [ ! -d "$1" ] && [ -e "$1" ] && [ ! -L "$1" ]; then
    _ss_cpd=${1%/*}; [ -n "$_ss_cpd" ] || _ss_cpd=/
    _ss_leaf=/${1##*/}
  fi
  if [ -d "$_ss_cpd" ] && cd -P "$_ss_cpd" 2>/dev/null; then
    _ss_r=$PWD
    # -ef is not POSIX but dash, BusyBox, bash and mksh have it; a shell
    # without it fails the test and takes the tool's path.
    # shellcheck disable=SC3013
    if [ "$_ss_r" -ef . ] && cd /; then
      [ -z "$_ss_leaf" ] || _ss_r=${_ss_r%/}$_ss_leaf
      return 0
    fi
    cd / || return 1
  fi
  _ss_r=$(_ss_resolve "$1" && echo x) || return 1; _ss_r=${_ss_r%?x}
}
_ss_canon "$_ss_rootarg" && _ss_root=$_ss_r && [ -d "$_ss_root" ] || _ss_die "$_ss_E_ROOT" "cannot resolve the remote dir $_ss_rootarg"
_ss_in_root() { case "$1/" in "$_ss_root"/*) return 0 ;; esac; return 1; }
_ss_check() {
  _ss_canon "$1" || _ss_die "$_ss_E_ESCAPE" "ESCAPE: cannot resolve $1"
  _ss_in_root "$_ss_r" || _ss_die "$_ss_E_ESCAPE" "ESCAPE: $1 resolves outside the remote dir"
}
_ss_confine_ancestor() {
  _ss_a=$1
  while [ ! -e "$_ss_a" ] && [ ! -L "$_ss_a" ]; do
    # dirname without a fork: paths here are absolute and normalized.
    _ss_p=${_ss_a%/*}; [ -n "$_ss_p" ] || _ss_p=/
    [ "$_ss_p" = "$_ss_a" ] && break; _ss_a=$_ss_p
  done
  _ss_canon "$_ss_a" || _ss_die "$_ss_E_ESCAPE" "ESCAPE: cannot resolve $_ss_a"
  _ss_in_root "$_ss_r" || _ss_die "$_ss_E_ESCAPE" "ESCAPE: $1 has an ancestor outside the remote dir"
}
_ss_pin() {
  _ss_check "$1"
  eval "exec $2<\"\$_ss_r\"" || _ss_die "$_ss_E_OPEN" "cannot open $1"
  _ss_check "/proc/self/fd/$2"
  [ -d "/proc/self/fd/$2" ] || _ss_die "$_ss_E_MKDIR" "$1 is not a directory"
}
# Creates the directory $1 (lexically under the remote dir) one component
# at a time through pinned fds, never by path: a directory swapped for a
# symlink mid-walk can only ever be followed into a place that is re-checked
# (through /proc/self/fd) before anything is created in it. Leaves fd 8 on $1.
_ss_mkdirs() {
  _ss_pin "$_ss_root" 8
  case "$1" in "$_ss_rootarg") return 0 ;; "$_ss_rootarg"/*) ;; *) _ss_die "$_ss_E_ESCAPE" "ESCAPE: $1 is not under the remote dir" ;; esac
  _ss_rel=${1#"$_ss_rootarg"/}
  _ss_ifs=$IFS; IFS=/; set -f
  for _ss_c in $_ss_rel; do
    IFS=$_ss_ifs
    [ -e "/proc/self/fd/8/$_ss_c" ] || [ -L "/proc/self/fd/8/$_ss_c" ] || mkdir "/proc/self/fd/8/$_ss_c" 2>/dev/null
    exec 7<"/proc/self/fd/8/$_ss_c" || _ss_die "$_ss_E_MKDIR" "cannot open $_ss_c in $1"
    _ss_check /proc/self/fd/7
    [ -d /proc/self/fd/7 ] || _ss_die "$_ss_E_MKDIR" "$_ss_c in $1 is not a directory"
    exec 8<&7 7<&-
  done
  IFS=$_ss_ifs; set +f
}
_ss_S="$_ss_root/$_ss_scratch"
# Incremental sync-in's record lives outside the remote dir, so nothing of
# ours stays in the agent's view: in the sandbox user's state directory
# ($XDG_STATE_HOME, else ~/.local/state), else a directory of theirs in
# the temp dir, named $_ss_statekey there. A candidate counts only as an
# absolute, real directory the user owns and may write, outside the
# remote dir. _ss_findstate sets _ss_state to the record's path in the
# first that exists, or with $1 = 1 the first it can make; none: empty,
# and nothing is kept (the next sync sends everything). A record anywhere
# in the sandbox is the sandbox's to forge either way (THREAT_MODEL D25).
_ss_state=
_ss_stateat() {
  case $1 in /?*) ;; *) return 1 ;; esac
  # Only the record's own dir is private; the parents are the user's.
  # shellcheck disable=SC2174
  if [ "$2" = 1 ] && [ ! -e "$1" ] && [ ! -L "$1" ]; then mkdir -p -m 700 "$1" 2>/dev/null || return 1; fi
  # -O is not POSIX (dash, BusyBox, bash have it): a shell without it
  # keeps no record.
  { [ -d "$1" ] && [ ! -L "$1" ] && [ -O "$1" ] && [ -w "$1" ]; } 2>/dev/null || return 1
  _ss_canon "$1" && ! _ss_in_root "$_ss_r" || return 1
  _ss_state="$_ss_r/$_ss_statekey"
}
_ss_findstate() {
  _ss_state=
  case ${XDG_STATE_HOME:-} in /?*) _ss_stateat "$XDG_STATE_HOME/sandbox-sync" "$1" && return 0 ;; esac
  case ${HOME:-} in /?*) _ss_stateat "${HOME%/}/.local/state/sandbox-sync" "$1" && return 0 ;; esac
  _ss_u=$(id -u 2>/dev/null) || return 0
  _ss_stateat "${TMPDIR:-/tmp}/sandbox-sync-$_ss_u" "$1" || _ss_state=
}
_ss_rec=0
_ss_keepS=
_ss_pend=
_ss_report=0
# The scratch dir names its program (pid and PID namespace, see the sweep
# below) the moment it exists: a program killed in between would leave a
# dir the sweep must keep for the hour.
_ss_ns=$(readlink /proc/self/ns/pid 2>/dev/null) || _ss_ns=
case $_ss_ns in *[!a-z0-9:\[\]]* | '') _ss_ns=- ;; esac
mkdir -m 700 "$_ss_S" || _ss_die "$_ss_E_MKDIR" 'cannot create the scratch dir'
printf '%s %s\n' "$$" "$_ss_ns" >"$_ss_S/pid" 2>/dev/null
_ss_tag=$_ss_scratch
_ss_pending=
_ss_watch=
_ss_cp=
_ss_zp=
_ss_nl='
'
# Watchers are stopped with USR2, which nothing in this program traps: a
# forked subshell keeps its parent's handlers for trapped signals until it
# resets them, and dash and BusyBox sh drop a signal caught in that window
# (a TERM there was lost, so a watcher slept on to its timeout). An
# untrapped USR2 kills the child outright until it installs its own trap.
# The watchers' sleeps are KILLed for the same reason.
_ss_cleanup() {
  [ -z "$_ss_watch" ] || kill -USR2 "$_ss_watch" 2>/dev/null
  [ -z "$_ss_cp" ] || _ss_stop "$_ss_cp" TERM
  [ -z "$_ss_pending" ] || _ss_rmtree "$_ss_pending"
  # A compressor ends once its pipe has no writer: let it flush what it has.
  if [ -n "$_ss_zp" ]; then exec >/dev/null; wait "$_ss_zp"; fi
  # A report hands its scratch (its listings) on to the program after it.
  [ -n "$_ss_keepS" ] || _ss_rmtree "$_ss_S"
}
# Removes the tree $1, its read-only directories too: a sandbox user that
# is not root cannot empty a directory it may not write (a Go module
# cache, a read-only source). Each is opened before find reads it.
_ss_rmtree() {
  rm -rf "$1" 2>/dev/null && return 0
  find "$1" -type d ! -perm -u+rwx -exec chmod u+rwx {} \; 2>/dev/null
  rm -rf "$1"
}
# Scratch of earlier calls that ended without their cleanup (a SIGKILL, a
# dropped connection, a restarted pod) is swept: a top-level reserved name
# whose program is gone. Each scratch dir names its program's pid and PID
# namespace: one whose pid runs here is kept (a live program, or a pid
# reused since); one of this namespace whose pid is gone goes at once; any
# other (another namespace's, whose pid says nothing here, or a dir whose
# pid is not written yet) once it is an hour old. The record the remote
# dir held before issue 46 goes too. Never a name with a newline or a
# slash (a planted one could name a path outside the remote dir).
# Only where a reserved name other than ours exists: the glob is the
# shell's, find a process on every call.
_ss_sweep=
for _ss_o in "$_ss_root/$_ss_reserved"-*; do
  case ${_ss_o##*/} in "$_ss_scratch") continue ;; esac
  [ -e "$_ss_o" ] || [ -L "$_ss_o" ] || continue
  _ss_sweep=1; break
done
[ -z "$_ss_sweep" ] || (cd -P "$_ss_root" 2>/dev/null && find . -maxdepth 1 -name "$_ss_reserved-*" ! -name "*$_ss_nl*" \
  \( -mmin +60 -exec printf 'old %s\n' {} \; -o -exec printf 'new %s\n' {} \; \) 2>/dev/null) |
  while IFS=' ' read -r _ss_age _ss_o; do
    _ss_o=${_ss_o#./}
    case $_ss_o in "$_ss_reserved"-*/* | "$_ss_scratch" | "$_ss_scratch".*) continue ;; "$_ss_oldstate" | "$_ss_oldstate".*) rm -f "$_ss_root/$_ss_o"; continue ;; "$_ss_reserved"-*) ;; *) continue ;; esac
    _ss_id=${_ss_o#"$_ss_reserved"-}
    _ss_p=; _ss_pns=
    read -r _ss_p _ss_pns 2>/dev/null <"$_ss_root/$_ss_reserved-${_ss_id%%.*}/pid" || :
    case $_ss_p in '' | *[!0-9]*) _ss_p= ;; esac
    # Unnamed and holding nothing else: a program killed between making
    # its dir and writing its pid (it names itself at once, so that is an
    # instant), or in its cleanup after the pid file went. rmdir takes only
    # an empty directory.
    if [ -z "$_ss_p" ] && [ ! -s "$_ss_root/$_ss_o/pid" ] && [ ! -L "$_ss_root/$_ss_o" ]; then
      rm -f "$_ss_root/$_ss_o/pid" 2>/dev/null
      ! rmdir "$_ss_root/$_ss_o" 2>/dev/null || continue
    fi
    # A pid of this namespace that runs keeps it, whatever its age; a
    # zombie (killed, not yet reaped by whoever started it) runs no more.
    if [ -n "$_ss_p" ] && [ -d "/proc/$_ss_p" ]; then
      _ss_x=; read -r _ss_x </proc/"$_ss_p"/stat 2>/dev/null || :
      case ${_ss_x##*") "} in Z* | X*) ;; *) continue ;; esac
    fi
    [ "$_ss_age" = old ] || { [ -n "$_ss_p" ] && [ "$_ss_pns" = "$_ss_ns" ] && [ "$_ss_ns" != - ]; } || continue
    _ss_rmtree "$_ss_root/$_ss_o"
  done
# Post-upload commands run in a session of their own where the sandbox
# has setsid (GNU, BusyBox): then a signal reaches everything a command
# started, not only its shell.
_ss_setsid=
command -v setsid >/dev/null 2>&1 && _ss_setsid=setsid
# Starts the command text $1 in the background in the pinned cwd (fd 8),
# stdin /dev/null, its output into the scratch file $2 (sets _ss_cp). Not
# into the exec's own output: a child the command leaves running would
# hold that open, and a kubelet keeps an exec open until every holder of
# its output lets go, so the sync would hang as long as the child lives.
_ss_spawn_cmd() {
  (cd -P /proc/self/fd/8 || exit "$_ss_E_MKDIR"; exec $_ss_setsid sh -c "$1" sandbox-sync-post-upload 8<&- 9<&-) </dev/null >"$2" 2>&1 &
  _ss_cp=$!
}
# Hands a command's output file $1 on to stderr (the host keeps its tail
# for the error report) and removes it.
_ss_relay_out() {
  cat "$1" >&2 2>/dev/null
  rm -f "$1"
}
# Sends signal $2 to command $1: its whole process group where it has one.
_ss_stop() {
  if [ -n "$_ss_setsid" ]; then kill "-$2" "-$1" 2>/dev/null; else kill "-$2" "$1" 2>/dev/null; fi
}
# For a watcher (a subshell): sleeps $1 seconds (fractions too) a second
# at a time, KILLing the current sleep on USR2, and fails once this
# program is gone (the subshell's parent is no longer $$): a watcher never
# outlives the program, even one KILLed before it could stop it.
_ss_watchfor() {
  trap 'kill -KILL "$_ss_ws" 2>/dev/null; exit 0' USR2
  _ss_i=${1%%.*}; _ss_f=${1#"$_ss_i"}
  while [ "$_ss_i" -gt 0 ]; do
    sleep 1 & _ss_ws=$!
    wait "$_ss_ws" || return 1
    # Field 4 of /proc/self/stat: this subshell's parent.
    _ss_x=; read -r _ss_y _ss_y _ss_y _ss_x _ss_y </proc/self/stat 2>/dev/null
    [ -z "$_ss_x" ] || [ "$_ss_x" = "$$" ] || return 1
    _ss_i=$((_ss_i - 1))
  done
  # The fraction; a sleep that takes none fires early, never late.
  [ -z "$_ss_f" ] || { sleep "0$_ss_f" 2>/dev/null & _ss_ws=$!; wait "$_ss_ws"; }
  return 0
}
# At the deadline, for the watcher: USR1 tells program $1 to stop. A
# shell runs that trap only once its foreground command returns, and one
# blocked on a stdin that never ends (a kubelet whose client went away
# may never close it) would keep the program alive for good; so the
# program's other children get TERM as well (never this watcher).
_ss_expire() {
  kill -USR1 "$1" 2>/dev/null
  read -r _ss_me _ss_x </proc/self/stat 2>/dev/null || _ss_me=
  for _ss_k in /proc/[0-9]*/stat; do
    read -r _ss_l 2>/dev/null <"$_ss_k" || continue
    _ss_l=${_ss_l##*) }; _ss_l=${_ss_l#* }
    _ss_p=${_ss_k#/proc/}; _ss_p=${_ss_p%/stat}
    [ "${_ss_l%% *}" = "$1" ] && [ "$_ss_p" != "$_ss_me" ] && kill -TERM "$_ss_p" 2>/dev/null
  done
  return 0
}
trap _ss_cleanup EXIT
trap 'exit 129' HUP; trap 'exit 130' INT; trap 'exit 141' PIPE; trap 'exit 143' TERM; trap 'exit "$_ss_E_DEADLINE"' USR1
if [ -n "$_ss_deadline" ]; then
  # The watcher counts with sleep; without one only the host ends the call.
  command -v sleep >/dev/null 2>&1 || _ss_off sandbox-deadline sleep
  (_ss_watchfor "$_ss_deadline" && _ss_expire $$) </dev/null >/dev/null 2>&1 &
  _ss_watch=$!
fi
_ss_pin "$_ss_S" 9
# Leaves this program's scratch dir, with what it holds, to the program
# that runs next (_ss_adopt). Handed on, the dir names no program: the
# next one's sweep leaves it to the hour rule, not to this one's exit.
_ss_handon() {
  _ss_keepS=1
  printf 'handed -\n' >"$_ss_S/pid" 2>/dev/null
}
# Takes over what the report program run before this one left in its
# scratch dir $1 (a toolbox sandbox: see InboundScript::report_program).
_ss_adopt() {
  _ss_a="$_ss_root/$1"
  [ -d "$_ss_a" ] && [ ! -L "$_ss_a" ] || return 0
  set --
  for _ss_e in "$_ss_a"/*; do
    # Not its pid: this scratch dir names this program.
    [ "${_ss_e##*/}" != pid ] && [ -f "$_ss_e" ] && [ ! -L "$_ss_e" ] && set -- "$@" "$_ss_e"
  done
  # One mv for them all: a process each cost a millisecond apiece.
  [ $# -eq 0 ] || mv -f -- "$@" "$_ss_S/"
  _ss_rmtree "$_ss_a"
}
# The transport codecs this sandbox can run, each after a space: none
# where the unpacking pipeline could not run (_ss_unpack drains what tar
# leaves with cat into /dev/null), so the host sends plain, not a stream
# the program cannot read.
_ss_caps() {
  command -v cat >/dev/null 2>&1 && [ -c /dev/null ] || return 0
  for _ss_z in zstd gzip; do
    command -v "$_ss_z" >/dev/null 2>&1 && printf ' %s' "$_ss_z"
  done
  return 0
}
# Reports compressed sync-in off when _ss_caps offers no codec.
_ss_nocaps() {
  _ss_m=$(_ss_lacks cat)
  [ -c /dev/null ] || _ss_m="$_ss_m /dev/null"
  command -v zstd >/dev/null 2>&1 || command -v gzip >/dev/null 2>&1 || _ss_m="$_ss_m zstd|gzip"
  _ss_off compressed-sync-in "${_ss_m# }"
}
# Incremental sync keys its records on a file's identity: "device inode
# size ctime", the ctime as `TZ=UTC0 stat -c %z` prints it (three words, to
# the nanosecond on GNU and BusyBox; `stat -c` works on both, `find
# -printf` does not). This lists the regular files under directory $1 as
# "<identity> ./path" lines. Paths with a newline (in any component) are
# left out: such files are always sent.
_ss_files() {
  (cd -P "$1" && TZ=UTC0 find . -type f ! -path "*$_ss_nl*" -exec stat -c '%d %i %s %z %n' {} +) 2>/dev/null
}
# The filesystem's clock, read off a file created in the scratch dir: its
# device in _ss_pdev and its ctime in _ss_pct. An identity counts only
# once it lies before this (a change in the same clock tick would not
# move a ctime).
_ss_probe() {
  _ss_pdev=; _ss_pct=
  _ss_clock || return 1
  _ss_readclock
}
# Creates the probe file $_ss_pf, whose ctime is the clock's reading. A new
# file each time (they go with the scratch dir; a report hands its scratch
# on, hence the pid): no rm to fork.
_ss_clock() {
  _ss_pn=$((${_ss_pn:-0} + 1)); _ss_pf="$_ss_S/P$$.$_ss_pn"
  : >"$_ss_pf" 2>/dev/null
}
# Reads the probe file $_ss_pf into _ss_pdev and _ss_pct.
_ss_readclock() {
  _ss_l=$(TZ=UTC0 stat -c '%d %z' "$_ss_pf" 2>/dev/null) || return 1
  _ss_pdev=${_ss_l%% *}; _ss_pct=${_ss_l#* }
}
# True when the sandbox has every tool named.
_ss_have() {
  for _ss_t do command -v "$_ss_t" >/dev/null 2>&1 || return 1; done
}
# Over a network link (the host sets _ss_zlist=1) a listing of more than
# 16 KiB goes gzipped where the sandbox has gzip: _ss_zip prints "zlist"
# and gzips $1 into $_ss_S/Z. Where the listing travels as text (a toolbox
# command's output: _ss_zlist=b64) it goes as base64 of that, where the
# sandbox has base64 too: "blist". Else it prints "list".
_ss_zlist=0
_ss_zip() {
  if [ "$_ss_zlist" != 0 ]; then
    _ss_x=$(wc -c <"$1") || _ss_x=0
    if [ $((_ss_x)) -le 16384 ]; then
      :
    elif ! command -v gzip >/dev/null 2>&1; then
      _ss_off compressed-listings gzip
    elif [ "$_ss_zlist" = 1 ] && gzip -1 -c <"$1" >"$_ss_S/Z" 2>/dev/null; then
      printf zlist
      return 0
    elif [ "$_ss_zlist" = b64 ] && ! command -v base64 >/dev/null 2>&1; then
      _ss_off compressed-listings base64
    elif [ "$_ss_zlist" = b64 ] && { gzip -1 -c <"$1" | base64; } >"$_ss_S/Z" 2>/dev/null; then
      printf blist
      return 0
    fi
  fi
  printf list
}
# The tools an incremental sync-in's records take.
_ss_canrecord() { _ss_have awk find stat; }
# Turns incremental sync-in's records on where the sandbox can keep them,
# and says which part is off where it cannot.
_ss_recordable() {
  if _ss_canrecord; then
    _ss_rec=1
    _ss_findstate 0
    # None lacking: cp is there but does not merge (_ss_keepable).
    _ss_keepable || { _ss_m=$(_ss_lacks cp xargs tr); _ss_off incremental-in-keep "${_ss_m:-cp}"; }
  else
    _ss_off incremental-in-record "$(_ss_lacks awk find stat)"
  fi
}
# Removes the scratch dir $1 a killed program left behind (a SIGKILLed
# shell cannot run its trap). Its children may still be writing into it
# (a transport that kills only the shell, or none at all), so it removes
# until the dir stays gone, for up to five seconds. Only ever a scratch
# name: never the root, never a path.
_ss_sweep() {
  case $1 in "$_ss_reserved"-*/* | "$_ss_reserved"-*..*) return 1 ;; "$_ss_reserved"-?*) ;; *) return 1 ;; esac
  _ss_n=0
  while [ -e "$_ss_root/${1:?}" ] && [ "$_ss_n" -lt 50 ]; do
    rm -rf "$_ss_root/${1:?}" 2>/dev/null || sleep 0.1
    _ss_n=$((_ss_n + 1))
  done
}
