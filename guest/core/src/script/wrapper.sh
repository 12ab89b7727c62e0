# The command every program runs in on a toolbox sandbox (Daytona), whose
# commands take no stdin and return stdout and stderr combined once they
# have ended: it keeps the body's stderr apart and prints its tail (the
# last $3 bytes: one past the cap says it went past) after a line holding
# the separator $2 once the body has ended, and exits with the body's
# status. Arguments: $1 the body (in, out or plain), $2, $3, $4 a spare
# directory for the stderr file ('' for none), then the body's own.
#
# Stderr goes into a temp file (in $TMPDIR or /tmp, else in the spare
# dir) unlinked as soon as the wrapper holds it open: a process the body
# left behind (a post-upload command's child, say) can keep writing to it
# without holding the command open. With no writable place at all, stderr
# is piped into tail instead, whose end waits for every writer.

# Runs a program: "inline TEXT" as the argument of sh -c, or "uploaded
# PATH LEN", the first LEN bytes of file PATH read by the bootstrap, with
# the rest of the file as its stdin (PATH is unlinked once open).
_ss_run() {
  case $1 in
  inline) /bin/sh -c "$2" "$_ss_argv0" 0 </dev/null ;;
  uploaded)
    if [ -f "$2" ] && exec 0<"$2"; then
      rm -f -- "$2"
      /bin/sh -c "$_ss_boot" "$_ss_argv0" "$3"
    else
      (exit "$_ss_E_BOOTSTRAP")
    fi ;;
  *) (exit "$_ss_E_BOOTSTRAP") ;;
  esac
}
# in UPLOAD LEN CODEC: the sync-in program uploaded with its input; without
# CODEC's decompressor (when one is named) it exits NO_CODEC, removing the
# upload. out FILE PROGRAM...: the program with its stdout in the new file
# FILE (0600, refused if the name exists), removed on failure. plain
# PROGRAM...: the program as it is.
_ss_body() {
  case $_ss_mode in
  in)
    if [ -n "$3" ] && ! command -v "$3" >/dev/null 2>&1; then
      rm -f -- "$1"
      (exit "$_ss_E_NO_CODEC")
    else
      _ss_run uploaded "$1" "$2"
    fi ;;
  out)
    _ss_out=$1; shift
    _ss_made=0
    if (set -C; umask 077; : >"$_ss_out"); then
      _ss_made=1; _ss_run "$@" >"$_ss_out"; _ss_rc=$?
    else
      _ss_rc=$_ss_E_EXTRACT
    fi
    [ "$_ss_rc" = 0 ] || [ "$_ss_made" = 0 ] || rm -f -- "$_ss_out"
    (exit "$_ss_rc") ;;
  plain) _ss_run "$@" ;;
  *) (exit "$_ss_E_BOOTSTRAP") ;;
  esac
}
_ss_mode=$1 _ss_sep=$2 _ss_keep=$3 _ss_spare=$4
shift 4
# A temp file for stderr, in the spare dir when there is no other.
_ss_spared() { [ -n "$_ss_spare" ] && mktemp "$_ss_spare/$_ss_reserved-XXXXXXXX" 2>/dev/null; }
# One fd appends, the other reads the tail back: the same file on purpose.
# shellcheck disable=SC2094
if _ss_e=$(mktemp 2>/dev/null || _ss_spared) && exec 3>>"$_ss_e" 4<"$_ss_e"; then
  rm -f -- "$_ss_e"
  _ss_body "$@" 2>&3 3>&- 4<&-
  _ss_rc=$?
  printf '\n%s\n' "$_ss_sep"
  tail -c "$_ss_keep" <&4
  exit "$_ss_rc"
fi
exec 4>&1
_ss_rc=$({ { _ss_body "$@" 2>&1 1>&4 4>&- 5>&-; echo "$?" >&5; } | { _ss_t=$(tail -c "$_ss_keep"; echo x); printf '\n%s\n%s' "$_ss_sep" "${_ss_t%x}"; } >&4; } 5>&1)
exit "${_ss_rc:-$_ss_E_BOOTSTRAP}"
