# The base64 fallback's steps, one exec each (see guest/base64-fallback).
# Creates an empty 0600 temp $3 beside a target (in its parent dir $2, the
# target itself being $1), confined like any target.
_ss_fb_create() {
  _ss_confine_ancestor "$1"
  _ss_confine_ancestor "$2"
  _ss_mkdirs "$2"
  (umask 077; : > "/proc/self/fd/8/$3") || _ss_die "$_ss_E_MKDIR" 'cannot create the temp file'
}
# Appends $3 base64 bytes from stdin, decoded, to the temp $2 in dir $1.
_ss_fb_append() {
  _ss_pin "$1" 8
  [ -f "/proc/self/fd/8/$2" ] && [ ! -L "/proc/self/fd/8/$2" ] || _ss_die "$_ss_E_NOTREG" 'temp file replaced'
  head -c "$3" | base64 -d >> "/proc/self/fd/8/$2" || _ss_die "$_ss_E_EXTRACT" 'base64 -d failed'
}
# Gives the temp $2 in dir $1 the mode $4 (none if empty) and renames it onto $3.
_ss_fb_promote() {
  _ss_pin "$1" 8
  [ -z "$4" ] || chmod "$4" "/proc/self/fd/8/$2" || _ss_die "$_ss_E_CHMOD" 'chmod failed'
  mv -f -T "/proc/self/fd/8/$2" "/proc/self/fd/8/$3" || _ss_die "$_ss_E_RENAME" 'rename failed'
}
# Removes the temp $2 in dir $1.
_ss_fb_remove() {
  _ss_pin "$1" 8
  rm -f "/proc/self/fd/8/$2"
}
# Extracts the staged tar $2 (in dir $1) into this exec's scratch as `d`.
_ss_fb_extract() {
  _ss_pin "$1" 8
  mkdir /proc/self/fd/9/d && tar -x -p -o -f "/proc/self/fd/8/$2" -C /proc/self/fd/9/d \
    || _ss_die "$_ss_E_EXTRACT" 'extract failed'
  exec 8<&-
}
# Runs the $2-byte command on stdin in the confined cwd $1, with stdin
# /dev/null, and exits with its status. In a session of its own where the
# sandbox has setsid, as inbound.sh runs one: the cleanup trap's _ss_stop
# signals its process group, so a timeout ends all it started.
_ss_fb_cmd() {
  _ss_pin "$1" 8
  _ss_c=$(head -c "$2"; echo x); _ss_c=${_ss_c%x}
  _ss_spawn_cmd "$_ss_c" "$_ss_S/cmd-out"
  wait "$_ss_cp"; _ss_rc=$?; _ss_cp=
  _ss_relay_out "$_ss_S/cmd-out"
  exit "$_ss_rc"
}
# Archives a file (`file SRC`) or a directory (`dir SRC FOLLOW PATTERNS...`)
# into the staged tar $1 under the remote dir and prints its size.
_ss_fb_pack() {
  _ss_n=$1; _ss_k=$2; shift 2
  umask 077
  case $_ss_k in
    file) _ss_ofile "$@" ;;
    *) _ss_odir "$@" ;;
  esac > "$_ss_root/$_ss_n" || exit
  wc -c < "$_ss_root/$_ss_n"
}
# Removes the staged tar $1.
_ss_fb_unstage() { rm -f "$_ss_root/$1"; }
# Prints chunk $3 of $2 bytes of the staged tar $1 as base64.
_ss_fb_chunk() {
  _ss_check "$_ss_root/$1"
  exec 7<"$_ss_r" || _ss_die "$_ss_E_NOTREG" 'REPLACED'
  _ss_check /proc/self/fd/7
  dd if=/proc/self/fd/7 bs="$2" skip="$3" count=1 2>/dev/null | base64
}
