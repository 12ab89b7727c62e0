set -u
unset TAR_OPTIONS CDPATH
case $(tar --version 2>/dev/null) in *'GNU tar'*) _ss_gnutar=1;; *) _ss_gnutar=0;; esac
_ss_die() { printf 'sandbox-sync: %s\n' "$2" >&2; exit "$1"; }
if command -v realpath >/dev/null 2>&1; then _ss_resolve() { realpath "$1"; }
elif command -v readlink >/dev/null 2>&1; then _ss_resolve() { readlink -f "$1"; }
else _ss_die "$_ss_E_NO_CANONICALIZER" 'no path canonicalizer (realpath or readlink -f) in the sandbox'; fi
# Resolves $1 into _ss_r exactly. A directory the shell can enter is
# resolved by the kernel without a fork: `cd -P` sets PWD to getcwd's
# physical path (a shell that falls back to a logical one is caught by -ef:
# PWD must name the directory entered), and the shell goes back to /, as
# nothing here uses a relative path. Anything else goes to the tool, and
# since $(...) strips every trailing newline, which would silently make a
# path ending in one another path, its output is fenced with an x and
# exactly the x and the one newline the tool added come off.
_ss_canon() {
  if [ -d "$1" ] && cd -P "$1" 2>/dev/null; then
    _ss_r=$PWD
    # -ef is not POSIX but dash, BusyBox, bash and mksh have it; a shell
    # without it fails the test and takes the tool's path.
    # shellcheck disable=SC3013
    if [ "$_ss_r" -ef . ] && cd /; then return 0; fi
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
mkdir -m 700 "$_ss_S" || _ss_die "$_ss_E_MKDIR" 'cannot create the scratch dir'
_ss_tag=$_ss_scratch
_ss_pending=
_ss_now=
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
  [ -z "$_ss_cp" ] || kill "$_ss_cp" 2>/dev/null
  [ -z "$_ss_pending" ] || rm -rf "$_ss_pending"
  # A compressor ends once its pipe has no writer: let it flush what it has.
  if [ -n "$_ss_zp" ]; then exec >/dev/null; wait "$_ss_zp"; fi
  rm -rf "$_ss_S"
}
trap _ss_cleanup EXIT
trap 'exit 129' HUP; trap 'exit 130' INT; trap 'exit 141' PIPE; trap 'exit 143' TERM; trap 'exit "$_ss_E_DEADLINE"' USR1
if [ -n "$_ss_deadline" ]; then
  (trap 'kill -KILL "$_ss_ws" 2>/dev/null; exit 0' USR2
   sleep "$_ss_deadline" & _ss_ws=$!
   wait "$_ss_ws" && kill -USR1 $$) </dev/null >/dev/null 2>&1 &
  _ss_watch=$!
fi
_ss_pin "$_ss_S" 9
# The transport codecs this sandbox can run, each after a space.
_ss_caps() {
  for _ss_z in zstd gzip; do
    command -v "$_ss_z" >/dev/null 2>&1 && printf ' %s' "$_ss_z"
  done
  return 0
}
# Lists the regular files under directory $1 as "size mtime ctime mode
# ./path" lines (`stat -c` works on GNU and BusyBox, `find -printf` does
# not). Names with a newline are left out: such files are always sent.
_ss_files() {
  (cd -P "$1" && find . -type f ! -name "*$_ss_nl*" -exec stat -c '%s %Y %Z %a %n' {} +) 2>/dev/null
}
