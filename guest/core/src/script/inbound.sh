# Extracts the compressed archive ($1 names the codec) that is the rest of
# stdin; the host closes stdin after it. The decompressor's status checks
# the stream (checksum, length): tar stops at the end blocks, so the rest
# is drained for the decompressor to reach its end.
_ss_unpack() {
  { "$1" -d -c || : >/proc/self/fd/9/zfail; } | {
    tar -x -p -o -f - -C /proc/self/fd/9 || exit 1
    cat >/dev/null
  } || return 1
  [ ! -e /proc/self/fd/9/zfail ]
}
_ss_mkparent() {
  _ss_confine_ancestor "$1"
  _ss_mkdirs "$1"
}
_ss_file() {
  _ss_mkparent "$2"
  [ -z "$4" ] || chmod "$4" "/proc/self/fd/9/$1" || _ss_die "$_ss_E_CHMOD" "chmod failed for $2/$3"
  _ss_pending="/proc/self/fd/8/$_ss_tag.$1"
  mv -f -T "/proc/self/fd/9/$1" "$_ss_pending" || _ss_die "$_ss_E_RENAME" "cannot stage into $2"
  mv -f -T "$_ss_pending" "/proc/self/fd/8/$3" || _ss_die "$_ss_E_RENAME" "cannot rename onto $2/$3"
  _ss_pending=
  exec 8<&-
}
_ss_clear() {
  for _ss_e in "$1"/* "$1"/.[!.]* "$1"/..?*; do
    [ -e "$_ss_e" ] || [ -L "$_ss_e" ] || continue
    case ${_ss_e##*/} in "$_ss_reserved"*) continue ;; esac
    rm -rf "$_ss_e" || _ss_die "$_ss_E_RENAME" "cannot remove ${_ss_e##*/} from the target"
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
  mkdir -m 700 "$_ss_aside" || _ss_die "$_ss_E_MKDIR" 'cannot create scratch for the old contents'
  _ss_m=$(stat -c %a /proc/self/fd/8 2>/dev/null) || _ss_m=
  if ! _ss_move_all /proc/self/fd/8 "$_ss_aside"; then
    _ss_move_all "$_ss_aside" /proc/self/fd/8
    _ss_die "$_ss_E_RENAME" 'cannot move the old contents of the remote dir aside (a mount point inside?)'
  fi
  if [ -n "$2" ] && ! chmod "$2" /proc/self/fd/8; then
    _ss_move_all "$_ss_aside" /proc/self/fd/8
    _ss_die "$_ss_E_CHMOD" 'chmod failed for the remote dir'
  fi
  if ! _ss_move_all "/proc/self/fd/9/$1" /proc/self/fd/8; then
    _ss_move_all /proc/self/fd/8 "/proc/self/fd/9/$1"
    [ -z "$_ss_m" ] || chmod "$_ss_m" /proc/self/fd/8
    _ss_move_all "$_ss_aside" /proc/self/fd/8
    _ss_die "$_ss_E_RENAME" 'cannot move the new contents into the remote dir'
  fi
  exec 8<&-
}
_ss_dir() {
  _ss_mkparent "$2"
  [ -z "$4" ] || chmod "$4" "/proc/self/fd/9/$1" || _ss_die "$_ss_E_CHMOD" "chmod failed for $2/$3"
  _ss_pending="/proc/self/fd/8/$_ss_tag.$1"
  mv -f -T "/proc/self/fd/9/$1" "$_ss_pending" || _ss_die "$_ss_E_RENAME" "cannot stage into $2"
  _ss_old="/proc/self/fd/8/$_ss_tag.$1.old"
  if [ -e "/proc/self/fd/8/$3" ] || [ -L "/proc/self/fd/8/$3" ]; then
    mv -f -T "/proc/self/fd/8/$3" "$_ss_old" || _ss_die "$_ss_E_RENAME" "cannot replace $2/$3 (is it a mount point?)"
  fi
  if ! mv -f -T "$_ss_pending" "/proc/self/fd/8/$3"; then
    [ ! -e "$_ss_old" ] || mv -f -T "$_ss_old" "/proc/self/fd/8/$3"
    _ss_die "$_ss_E_RENAME" "cannot rename onto $2/$3"
  fi
  _ss_pending=$_ss_old
  rm -rf "$_ss_old" || _ss_die "$_ss_E_RENAME" "cannot remove the replaced $2/$3"
  _ss_pending=
  exec 8<&-
}
_ss_cmd() {
  _ss_pin "$4" 8
  _ss_c=$(cat "/proc/self/fd/9/$3"; echo x) || _ss_die "$_ss_E_EXTRACT" 'cannot read a staged command'
  _ss_c=${_ss_c%x}
  rm -f /proc/self/fd/9/timeout
  (cd -P /proc/self/fd/8 || exit "$_ss_E_MKDIR"; exec /bin/sh -c "$_ss_c" sandbox-sync-post-upload 8<&- 9<&-) </dev/null 1>&2 &
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
    printf '%s cmd %s %s %s 1\n' "$_ss_TAG" "$1" "$2" "$_ss_rc"; _ss_die "$_ss_E_COMMAND_TIMEOUT" "post-upload command timed out after $5s"
  fi
  if [ "$_ss_rc" -ne 0 ]; then
    printf '%s cmd %s %s %s 0\n' "$_ss_TAG" "$1" "$2" "$_ss_rc"; _ss_die "$_ss_E_COMMAND" "post-upload command failed (exit $_ss_rc)"
  fi
}
# Lists the regular files under target $2 of directory mapping $1 that a
# re-sync may keep, as "size mtime ctime mode ./path" between two tagged
# lines.
# Names with a newline are left out (those files are always sent).
_ss_list() {
  printf '%s list %s\n' "$_ss_TAG" "$1"
  if _ss_keepable && [ -d "$2" ] && [ ! -L "$2" ] && _ss_canon "$2" && _ss_in_root "$_ss_r"; then
    _ss_files "$_ss_r"
    _ss_now=${_ss_now:-date}
  fi
  printf '%s listed %s\n' "$_ss_TAG" "$1"
}
# Reports the target $2 of file mapping $1 as "<TAG> file <k> size mtime
# ctime mode" when it is a regular file inside the remote dir. The same
# stat reads the scratch dir's ctime, which stands for the sandbox's clock
# (read after the host sent the program, it bounds the clock's skew as
# `date` would, without a fork of its own).
_ss_listf() {
  if [ -f "$2" ] && [ ! -L "$2" ] && _ss_canon "$2" && _ss_in_root "$_ss_r"; then
    _ss_l=$(stat -c '%s %Y %Z %a' "$_ss_r" "$_ss_S" 2>/dev/null) || return 0
    printf '%s file %s %s\n' "$_ss_TAG" "$1" "${_ss_l%%"$_ss_nl"*}"
    _ss_l=${_ss_l##*"$_ss_nl"}; _ss_l=${_ss_l#* }; _ss_l=${_ss_l#* }
    [ "$_ss_now" = date ] || _ss_now=${_ss_l%% *}
  fi
  return 0
}
# Reports the sandbox's clock once anything was listed.
_ss_clock() {
  [ "$_ss_now" != date ] || _ss_now=$(date +%s)
  [ -z "$_ss_now" ] || printf '%s now %s\n' "$_ss_TAG" "$_ss_now"
}
# Files can be kept with GNU tar's -T or, elsewhere (BusyBox tar has no
# -T), with cpio.
_ss_keepable() { [ "$_ss_gnutar" = 1 ] || command -v cpio >/dev/null 2>&1; }
# Keeps the files member k$1 names (unchanged since the listing) from
# target $2 in the staged tree d$1, before it is promoted, with their modes
# and mtimes: hard-linked with GNU cp (no byte is copied; rsync's
# --link-dest does the same), else, or when linking fails (another
# filesystem, tools without -d or --parents), copied. A file that vanished
# meanwhile fails the sync.
_ss_keep() {
  [ -s "/proc/self/fd/9/k$1" ] || return 0
  _ss_check "$2"
  if [ "$_ss_gnutar" = 1 ]; then
    (cd -P "$_ss_r" && exec xargs -d '\n' -r cp -l -P --parents -t "/proc/self/fd/9/d$1" -- <"/proc/self/fd/9/k$1") 2>/dev/null \
      || { { (cd -P "$_ss_r" && exec tar -c -f - -T "/proc/self/fd/9/k$1") || : >/proc/self/fd/9/kfail; } \
        | tar -x -p -o -f - -C "/proc/self/fd/9/d$1"; }
  else
    { (cd -P "$_ss_r" && exec cpio -o -H newc <"/proc/self/fd/9/k$1") 2>/dev/null || : >/proc/self/fd/9/kfail; } \
      | (cd "/proc/self/fd/9/d$1" && umask 0 && exec cpio -i -d -m 2>/dev/null)
  fi || _ss_die "$_ss_E_EXTRACT" "cannot keep the unchanged files of $2"
  [ ! -e /proc/self/fd/9/kfail ] || _ss_die "$_ss_E_EXTRACT" "an unchanged file of $2 vanished"
  rm -f "/proc/self/fd/9/k$1"
}
