_ss_mark() { printf '%-511s\n' "$_ss_TAG $1"; }
_ss_ofile() {
  [ -e "$1" ] || [ -L "$1" ] || _ss_die "$_ss_E_MISSING" "source $1 does not exist"
  _ss_check "$1"
  exec 7<"$_ss_r" || _ss_die "$_ss_E_NOTREG" "REPLACED: cannot open $1"
  _ss_check /proc/self/fd/7
  [ -f /proc/self/fd/7 ] || _ss_die "$_ss_E_NOTREG" "NOTREG: $1 is not a regular file"
  rm -f /proc/self/fd/9/f
  # A hard link to the pinned file names it for tar without copying it; a
  # copy where linking is refused (another filesystem, protected_hardlinks,
  # a BusyBox ln without -L).
  ln -L /proc/self/fd/7 /proc/self/fd/9/f 2>/dev/null \
    || cp /proc/self/fd/7 /proc/self/fd/9/f || _ss_die "$_ss_E_EXTRACT" "snapshot copy of $1 failed"
  exec 7<&-
  (cd -P /proc/self/fd/9 && exec tar -c -f - f) || _ss_die "$_ss_E_EXTRACT" "archiving $1 failed"
}
_ss_odir() {
  [ -e "$1" ] || [ -L "$1" ] || _ss_die "$_ss_E_MISSING" "source $1 does not exist"
  _ss_pin "$1" 8
  _ss_src=$1; _ss_follow=$2; shift 2
  (
    cd -P /proc/self/fd/8 || exit "$_ss_E_MKDIR"
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
  ) || _ss_die "$_ss_E_EXTRACT" "archiving $_ss_src failed"
  exec 8<&-
}
