_ss_mark() { printf '%-511s\n' "$_ss_TAG $1"; }
# The directory mapping whose keep list the next _ss_odir excludes.
_ss_kf=
# Bytes of the first archive _ss_worth sends as a probe of the link (none:
# the codec is chosen without one; see _ss_canprobe).
_ss_aprobe=
# Incremental: frames the regular files of source $2 (directory mapping
# $1, symlinks followed where $3 is 1) as one listing (a "list <k> <bytes>
# <probe>" marker, the "<identity> ./path" lines of _ss_files, zeros to a
# whole block), the probe being the filesystem's clock read before any
# file was listed ("<device> <ctime>", or "-"): the host keeps a record of
# what landed only for files whose identity lies before it. Where the
# files cannot be kept (see _ss_okeepable and _ss_bwalk) the listing is
# empty. With $4 and $5, the files whose ctimes lie in [$4, $5) are
# digested (_ss_odigest).
_ss_olist() {
  : >"$_ss_S/l$1" || _ss_die "$_ss_E_EXTRACT" 'cannot create the listing'
  if [ "$_ss_ikeep" = 1 ] && [ -d "$2" ] && [ ! -L "$2" ] && _ss_canon "$2" && _ss_in_root "$_ss_r"; then
    if [ "$_ss_gnutar" = 1 ]; then
      _ss_files "$_ss_r" >"$_ss_S/l$1"
    elif [ "${3:-0}" = 0 ]; then
      _ss_bwalk "$1" "$_ss_r"
    fi
    [ -z "${5-}" ] || _ss_odigest "$1" "$_ss_r" "$4" "$5"
  fi
  _ss_oframe "$1"
}
# Appends to listing l$1 of the files under $2 an "=<md5> <line>" line per
# file whose ctime lies in [$3, $4): the last sync's racy window, files a
# writer through a shared mapping may have changed since without moving
# their ctimes, so the host compares their contents with what it landed.
# Without md5sum there are none, and those files are sent. (GNU md5sum
# starts the line of a name with a backslash with one: such a file is
# sent too.)
_ss_odigest() {
  [ -s "$_ss_S/l$1" ] && command -v md5sum >/dev/null 2>&1 || return 0
  (cd -P "$2" && LC_ALL=C awk -v lo="$3" -v hi="$4" '
      { c = $4 " " $5 " " $6 }
      c >= lo && c < hi { print substr($0, length($1 $2 $3 $4 $5 $6) + 7) }' "$_ss_S/l$1" \
    | tr '\n' '\000' | xargs -0 -r md5sum) >"$_ss_S/D$1" 2>/dev/null
  [ -s "$_ss_S/D$1" ] || { rm -f "$_ss_S/D$1"; return 0; }
  LC_ALL=C awk -v d="$_ss_S/D$1" '
      BEGIN { while ((getline l < d) > 0) if (l !~ /^\\/) h[substr(l, 35)] = substr(l, 1, 32) }
      { p = substr($0, length($1 $2 $3 $4 $5 $6) + 7) }
      p in h { print "=" h[p], NR }' "$_ss_S/l$1" >"$_ss_S/D$1.l" \
    && cat "$_ss_S/D$1.l" >>"$_ss_S/l$1"
  rm -f "$_ss_S/D$1" "$_ss_S/D$1.l"
}
# Where tar has no -X (BusyBox), the archive names its members, all but
# the kept files, as the arguments of one tar (_ss_onamed): that takes
# symlinks not followed, no name with a newline under source $2, and names
# that fit one command line (ARG_MAX is 2 MiB in a pod: at most 1.5 MB of
# names and pointers, about 25,000 entries). One walk stats every entry
# but provider scratch at the top, parents first: the regular files'
# identities make listing l$1, every entry's ./path a line of a$1, the
# members _ss_onamed names. A name with a newline (it prints a line "NL"
# too; only a name holding a newline can print one otherwise), a tree too
# big or a walk that fails (an unreadable directory: its files would be
# missing) leaves the listing empty: the tree is sent whole, by tar's own
# walk; the first two, which only a tar with -X could take, are reported
# as this tar's shortfall. (BusyBox find never runs an `-exec {} +`
# inside parentheses.)
_ss_bwalk() {
  if ! (cd -P "$2" && TZ=UTC0 find . ! -name . ! \( -path "./$_ss_reserved*" -prune \) \
    -exec stat -c '%f %d %i %s %z %n' {} + -name "*$_ss_nl*" -exec stat -c NL {} \;) \
    >"$_ss_S/a$1.w" 2>/dev/null; then
    : >"$_ss_S/l$1"; rm -f "$_ss_S/a$1" "$_ss_S/a$1.w"
    return 0
  fi
  LC_ALL=C awk -v l="$_ss_S/l$1" -v a="$_ss_S/a$1" '
      BEGIN { printf "" > a }
      $0 == "NL" { bad = 1; exit }
      {
        p = substr($0, length($1 $2 $3 $4 $5 $6 $7) + 8)
        n += length(p) + 7
        if (n > 1500000) { bad = 1; exit }
        print p > a
        if (substr($1, 1, length($1) - 3) == "8") print substr($0, length($1) + 2) > l
      }
      END { exit bad }' "$_ss_S/a$1.w" \
    || { : >"$_ss_S/l$1"; rm -f "$_ss_S/a$1"; _ss_off incremental-out tar; }
  rm -f "$_ss_S/a$1.w"
}
# The same for the regular file $2 of file mapping $1: one line, "./f"
# (and its digest, where its ctime lies in [$3, $4)).
_ss_olistf() {
  : >"$_ss_S/l$1" || _ss_die "$_ss_E_EXTRACT" 'cannot create the listing'
  if [ "$_ss_ikeep" = 1 ] && [ -f "$2" ] && [ ! -L "$2" ] && _ss_canon "$2" && _ss_in_root "$_ss_r"; then
    TZ=UTC0 stat -c '%d %i %s %z ./f' "$_ss_r" >"$_ss_S/l$1" 2>/dev/null || : >"$_ss_S/l$1"
    if [ -n "${4-}" ] && [ -s "$_ss_S/l$1" ] && command -v md5sum >/dev/null 2>&1 \
      && [ "$(LC_ALL=C awk -v lo="$3" -v hi="$4" '{ c = $4 " " $5 " " $6 } c >= lo && c < hi { print "y" }' "$_ss_S/l$1")" = y ] \
      && _ss_l=$(md5sum <"$_ss_r" 2>/dev/null); then
      printf '=%s 1\n' "${_ss_l%% *}" >>"$_ss_S/l$1"
    fi
  fi
  _ss_oframe "$1"
}
# Whether this sandbox can leave kept files out of its archive (GNU tar's
# -X, or BusyBox tar given its members with tr and xargs; a way to read
# exactly the host's answer, see _ss_readn; find and stat for the
# listing, cat, head and wc to frame it, awk to read the answer), and the
# filesystem's clock before any listing. Without them every listing is
# empty: nothing kept.
_ss_okeepable() {
  _ss_ikeep=0; _ss_ghead=0
  # The bootstrap's dd read the program exactly (_ss_xdd): no probe to fork.
  if [ "${_ss_xdd-}" = 1 ]; then
    _ss_ikeep=1
  else
    case $(head --version 2>/dev/null) in *GNU*) _ss_ghead=1 ;; esac
    if [ "$_ss_ghead" = 1 ] || [ "$(printf xy | dd bs=64 count=1 iflag=count_bytes,fullblock 2>/dev/null)" = x ]; then
      _ss_ikeep=1
    fi
  fi
  _ss_m=$(_ss_lacks find stat cat head wc awk)
  [ "$_ss_gnutar" = 1 ] || _ss_m="$_ss_m $(_ss_lacks tr xargs)"
  [ "$_ss_ikeep" = 1 ] || _ss_m="GNU-head|dd-iflag=count_bytes,fullblock $_ss_m"
  case $_ss_m in *[!\ ]*) _ss_ikeep=0; _ss_off incremental-out "$_ss_m" ;; esac
  _ss_oprobe
}
# Copies exactly $1 bytes of stdin to stdout and reads no further (the
# host's next answer follows): GNU head does; BusyBox head reads ahead, so
# there dd, whose fullblock keeps a pipe's short reads from cutting it.
_ss_readn() {
  if [ "$_ss_ghead" = 1 ]; then
    head -c "$1"
  else
    dd bs=65536 count="$1" iflag=count_bytes,fullblock 2>/dev/null
  fi
}
# Reads the filesystem's clock for the listings, once, before the first.
_ss_oprobe() {
  _ss_probed=
  if [ "$_ss_ikeep" = 1 ] && _ss_probe; then _ss_probed="$_ss_pdev $_ss_pct"; fi
}
# Sends listing l$1 as one frame, or, in a report program of its own (a
# toolbox sandbox: _ss_report=1), as text between two tagged lines (base64
# of gzip where it is big: "blist", see _ss_zip).
# An empty listing (nothing to keep) needs none of the tools that frame
# one, so a sandbox without them still syncs, whole.
_ss_oframe() {
  if [ "$_ss_report" = 1 ]; then
    _ss_how=list
    [ ! -s "$_ss_S/l$1" ] || _ss_how=$(_ss_zip "$_ss_S/l$1")
    [ "$_ss_how" = blist ] && _ss_f="$_ss_S/Z" || _ss_f="$_ss_S/l$1"
    printf '%s %s %s %s\n' "$_ss_TAG" "$_ss_how" "$1" "${_ss_probed:--}"
    [ ! -s "$_ss_f" ] || cat "$_ss_f" || _ss_die "$_ss_E_EXTRACT" 'cannot send the listing'
    printf '%s listed %s\n' "$_ss_TAG" "$1"
    rm -f "$_ss_S/Z"
    return 0
  fi
  if [ ! -s "$_ss_S/l$1" ]; then
    _ss_mark "list $1 0 ${_ss_probed:--}"
    rm -f "$_ss_S/l$1"
    return 0
  fi
  _ss_how=$(_ss_zip "$_ss_S/l$1")
  [ "$_ss_how" = zlist ] && _ss_f="$_ss_S/Z" || _ss_f="$_ss_S/l$1"
  _ss_n=$(wc -c <"$_ss_f") || _ss_die "$_ss_E_EXTRACT" 'cannot read the listing'
  _ss_n=$((_ss_n))
  _ss_mark "$_ss_how $1 $_ss_n ${_ss_probed:--}"
  { cat "$_ss_f" && _ss_zeros $(((512 - _ss_n % 512) % 512)); } \
    || _ss_die "$_ss_E_EXTRACT" 'cannot send the listing'
  rm -f "$_ss_S/Z"
}
# Reads the host's answer for mapping $1: a line with a length, then that
# many bytes of "<first> <last>" lines, ascending ranges of the lines of
# its listing (l$1) whose files the host target already holds; their
# names (one a line, without the ./) go to k$1, to be left out of the
# archive. Lines, not names, cross the link: an unchanged tree is one.
_ss_okeep() {
  read -r _ss_n || _ss_die "$_ss_E_EXTRACT" 'the host sent no keep list'
  case $_ss_n in '' | *[!0-9]*) _ss_die "$_ss_E_EXTRACT" 'the host sent a bad keep list' ;; esac
  [ "$_ss_n" -eq 0 ] && return 0
  [ "$_ss_ikeep" = 1 ] && [ -f "$_ss_S/l$1" ] || _ss_die "$_ss_E_EXTRACT" 'the host sent a keep list this sandbox cannot use'
  _ss_readn "$_ss_n" >"$_ss_S/r$1" || _ss_die "$_ss_E_EXTRACT" 'cannot read the keep list'
  [ "$(wc -c <"$_ss_S/r$1")" -eq "$_ss_n" ] || _ss_die "$_ss_E_EXTRACT" 'the keep list was cut'
  LC_ALL=C awk -v r="$_ss_S/r$1" '
    BEGIN { while ((getline l < r) > 0) { split(l, f, " "); a[++n] = f[1] + 0; b[n] = f[2] + 0 }; i = 1 }
    {
      while (i <= n && FNR > b[i]) i++
      if (i > n) exit
      if (FNR >= a[i]) print substr($0, length($1 $2 $3 $4 $5 $6) + 9)
    }' "$_ss_S/l$1" >"$_ss_S/k$1" || _ss_die "$_ss_E_EXTRACT" 'cannot read the keep list'
}
_ss_ofile() {
  # The host keeps its copy: an empty archive.
  if [ -n "$_ss_kf" ] && [ -s "$_ss_S/k$_ss_kf" ]; then _ss_zeros 1024; return; fi
  [ -e "$1" ] || [ -L "$1" ] || _ss_die "$_ss_E_MISSING" "source $1 does not exist"
  _ss_check "$1"
  exec 7<"$_ss_r" || _ss_die "$_ss_E_NOTREG" "REPLACED: cannot open $1"
  _ss_check /proc/self/fd/7
  [ -f /proc/self/fd/7 ] || _ss_die "$_ss_E_NOTREG" "NOTREG: $1 is not a regular file"
  # GNU tar archives the pinned file itself, as member f: no link, no
  # copy, and the file's ctime is left alone (a link would move it, and
  # with it every incremental record of the file).
  if [ "$_ss_gnutar" = 1 ]; then
    (cd -P /proc/self/fd && exec tar -c -f - -h --transform='s|^7$|f|' 7) \
      || _ss_die "$_ss_E_EXTRACT" "archiving $1 failed"
    exec 7<&-
    return 0
  fi
  rm -f /proc/self/fd/9/f
  # A hard link to the pinned file names it for tar without copying it; a
  # copy where linking is refused (another filesystem, protected_hardlinks,
  # a BusyBox ln without -L), with its mode and mtime.
  ln -L /proc/self/fd/7 /proc/self/fd/9/f 2>/dev/null \
    || cp -p /proc/self/fd/7 /proc/self/fd/9/f || _ss_die "$_ss_E_EXTRACT" "snapshot copy of $1 failed"
  exec 7<&-
  (cd -P /proc/self/fd/9 && exec tar -c -f - f) || _ss_die "$_ss_E_EXTRACT" "archiving $1 failed"
}
_ss_odir() {
  [ -e "$1" ] || [ -L "$1" ] || _ss_die "$_ss_E_MISSING" "source $1 does not exist"
  _ss_pin "$1" 8
  _ss_src=$1; _ss_follow=$2; shift 2
  (
    cd -P /proc/self/fd/8 || exit "$_ss_E_MKDIR"
    if [ "$_ss_gnutar" = 0 ] && [ -n "$_ss_kf" ] && [ -s "$_ss_S/k$_ss_kf" ]; then
      exec 8<&- 9<&-
      _ss_onamed "$_ss_S/k$_ss_kf"
    fi
    _ss_n=$#
    for _ss_x do [ "$_ss_gnutar" = 0 ] || set -- "$@" --exclude "$_ss_x"; done
    shift "$_ss_n"
    # Literal, whole-name patterns, after the request's own.
    [ -z "$_ss_kf" ] || [ ! -s "$_ss_S/k$_ss_kf" ] || set -- "$@" --no-wildcards --anchored -X "$_ss_S/k$_ss_kf"
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
    if [ "$_ss_k" -eq 0 ]; then _ss_zeros 1024; exit 0; fi
    LC_ALL=C exec tar -c -f - "$@"
  ) || _ss_die "$_ss_E_EXTRACT" "archiving $_ss_src failed"
  exec 8<&-
}
# Archives the current directory but the files keep list $1 names, with a
# tar that has no -X: the members the listing's walk found (a<k>, see
# _ss_bwalk) as arguments, each once (--no-recursion), parents first, in
# one tar. What appeared since the listing is not sent (as if the sync had
# started before it), what went since fails tar, loudly. They are
# filtered once per mapping (m<k>, whole or not at all): the compression
# sample (_ss_worth) archives the first mapping just before its body does.
_ss_onamed() {
  _ss_mf="$_ss_S/m$_ss_kf"
  if [ ! -f "$_ss_mf" ]; then
    [ -f "$_ss_S/a$_ss_kf" ] || exit "$_ss_E_EXTRACT"
    LC_ALL=C awk -v keep="$1" '
      BEGIN { while ((getline l < keep) > 0) k["./" l] = 1 }
      !($0 in k) { print substr($0, 3) }' "$_ss_S/a$_ss_kf" >"$_ss_mf.p" && mv -f "$_ss_mf.p" "$_ss_mf" \
      || exit "$_ss_E_EXTRACT"
  fi
  [ -s "$_ss_mf" ] || { _ss_zeros 1024; exit 0; }
  tr '\n' '\000' <"$_ss_mf" | LC_ALL=C xargs -0 -s 1800000 tar -c -f - --no-recursion --
  exit
}
# Sets _ss_codec to the first codec of "$@" this sandbox can run, or none.
_ss_pick() {
  _ss_codec=none
  command -v mkfifo >/dev/null 2>&1 || { _ss_off compressed-sync-out mkfifo; return 0; }
  for _ss_z do
    if command -v "$_ss_z" >/dev/null 2>&1; then _ss_codec=$_ss_z; return 0; fi
  done
  [ $# = 0 ] || _ss_off compressed-sync-out "$(IFS='|'; printf %s "$*")"
}
# True when the archive on stdin gzips to less than 90% of its size,
# judged from 64 KiB read at 0, 1, 2, 4 ... 64 MiB into it, each counted
# for the span up to the next: the bulk decides, not whatever the first
# MiB holds (a tree whose binaries come first is mostly text). Without
# dd, its first MiB. With _ss_aprobe, the first sample is that many bytes,
# gzip is timed on it (this stream, this sandbox's CPU), and where the
# archive passes 4 MiB it goes to the host as a probe of the link
# (_ss_linkprobe).
_ss_worth() {
  _ss_n=0; _ss_z=0; _ss_gs=0
  if ! command -v dd >/dev/null 2>&1; then
    head -c 1048576 >"$_ss_S/w" 2>/dev/null && _ss_wadd "$_ss_S/w" 1048576 1
  else
    _ss_p=0; _ss_s=0
    if [ -n "$_ss_aprobe" ]; then
      _ss_b=$((_ss_aprobe / 65536))
      dd bs=65536 count="$_ss_b" iflag=fullblock >"$_ss_S/p" 2>/dev/null || return 1
      _ss_a=; ! _ss_now || _ss_a=$_ss_t
      if _ss_wadd "$_ss_S/p" "$_ss_aprobe" $(((16 + _ss_b - 1) / _ss_b)); then
        if [ -n "$_ss_a" ] && _ss_now && [ "$_ss_t" -gt "$_ss_a" ]; then
          _ss_gs=$((_ss_aprobe * 1000000 / (_ss_t - _ss_a)))
        fi
        _ss_p=16; _ss_s=$((16 - _ss_b))
      else
        _ss_p=2048
      fi
    fi
    while [ "$_ss_p" -le 1024 ]; do
      dd bs=65536 skip="$_ss_s" count=1 iflag=fullblock >"$_ss_S/w" 2>/dev/null || break
      _ss_q=$((_ss_p < 16 ? 16 : _ss_p * 2))
      _ss_wadd "$_ss_S/w" 65536 $((_ss_q - _ss_p)) || break
      # Past 4 MiB the link decides first: below, a slow gzip loses about
      # what the probe costs a slow link (0.1 s at 5 MB/s). Where the link
      # outruns gzip, the rest of the sample would only delay a plain
      # stream: no sample counts, the verdict is plain.
      if [ "$_ss_p" -eq 64 ] && [ "$_ss_gs" -gt 0 ] && ! _ss_linkprobe "$_ss_gs"; then
        _ss_n=0
        break
      fi
      _ss_s=$((_ss_q - _ss_p - 1)); _ss_p=$_ss_q
    done
  fi
  rm -f "$_ss_S/w" "$_ss_S/p"
  [ "$_ss_n" -gt 0 ] && [ $((_ss_z * 10)) -lt $((_ss_n * 9)) ]
}
# Sends the kept sample p as a probe frame, which the host times and
# drops, and reads the link's rate it answers with (bytes a second) on fd
# 6, the exec's stdin; false where gzip, at $1 bytes a second on this
# stream, is not faster than that by 15% (it shares the CPU with tar):
# BusyBox's gzip ignores -1 and runs at 25-35 MB/s, slower than a fast
# link.
_ss_linkprobe() {
  _ss_mark "probe $_ss_aprobe"
  cat "$_ss_S/p" || exit 1
  read -r _ss_l <&6 || _ss_l=
  case $_ss_l in '' | *[!0-9]*) _ss_l=0 ;; esac
  [ $(($1 * 20)) -gt $((_ss_l * 23)) ]
}
# Counts sample $1 as standing for $3 times its size where it is whole ($2
# bytes); false when the stream has ended (a short or empty sample stands
# for itself).
_ss_wadd() {
  _ss_c=$(wc -c <"$1") && _ss_g=$(gzip -1 -c <"$1" | wc -c) || return 1
  [ "$_ss_c" -eq "$2" ] && _ss_w=$3 || _ss_w=1
  _ss_n=$((_ss_n + _ss_c * _ss_w)); _ss_z=$((_ss_z + _ss_g * _ss_w))
  [ "$_ss_c" -eq "$2" ]
}
# From here on stdout is compressed with $1 as one stream, by a compressor
# that reads a fifo in the scratch dir and writes the exec's stdout.
_ss_zstart() {
  mkfifo "$_ss_S/z" || _ss_die "$_ss_E_EXTRACT" 'cannot create the compression pipe'
  case $1 in
    zstd) zstd -1 -q -c <"$_ss_S/z" & ;;
    *) gzip -1 -c <"$_ss_S/z" & ;;
  esac
  _ss_zp=$!
  exec >"$_ss_S/z"
}
# Sets _ss_aprobe to $1 (bytes, a multiple of 64 KiB) where this sandbox
# can keep a probe and time its gzip; else says what it lacks.
_ss_canprobe() {
  _ss_m=$(_ss_lacks dd wc cat)
  [ -n "$_ss_m" ] || [ "${_ss_xdd-}" = 1 ] || [ "$(printf xyz | dd bs=2 count=1 iflag=fullblock 2>/dev/null)" = xy ] \
    || _ss_m=dd-iflag=fullblock
  _ss_now || _ss_m="${_ss_m:+$_ss_m }EPOCHREALTIME|date+%N"
  if [ -n "$_ss_m" ]; then _ss_off measured-compression "$_ss_m"; else _ss_aprobe=$1; fi
}
# Sets _ss_t to the time in microseconds: the shell's $EPOCHREALTIME (bash,
# BusyBox ash) or GNU date's nanoseconds; false without either.
_ss_now() {
  # shellcheck disable=SC3028 # unset in a shell without it: then date.
  case ${EPOCHREALTIME-} in
    [0-9]*[.,][0-9]*) _ss_t=${EPOCHREALTIME%[.,]*}${EPOCHREALTIME#*[.,]} ;;
    *)
      _ss_t=$(date +%s%N 2>/dev/null) || return 1
      # A date without %N prints it, or zeros.
      case $_ss_t in *000000000) return 1 ;; esac
      _ss_t=${_ss_t%???} ;;
  esac
  case $_ss_t in '' | *[!0-9]*) return 1 ;; esac
}
# Ends the compressed stream and waits for the compressor to flush it.
_ss_zend() {
  exec >/dev/null
  wait "$_ss_zp"; _ss_rc=$?
  _ss_zp=
  [ "$_ss_rc" -eq 0 ] || _ss_die "$_ss_E_EXTRACT" 'compressing the output failed'
}
