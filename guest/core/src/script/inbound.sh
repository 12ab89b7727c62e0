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
# Sets _ss_pending to where the staged $1 (f<k> or d<k>) is renamed onto
# its target from, in directory $2 (fd 8): first into $2 under a pending
# name, since the scratch dir may be on another filesystem (a mount point
# below the remote dir) and mv would then copy, in view, onto the target;
# but where $2 is the remote dir itself, the scratch dir is its own entry
# (one filesystem), so the staged entry goes straight on: a process fewer.
_ss_stage() {
  if [ "$2" = "$_ss_rootarg" ]; then
    _ss_pending="/proc/self/fd/9/$1"
    return 0
  fi
  _ss_pending="/proc/self/fd/8/$_ss_tag.$1"
  mv -f -T "/proc/self/fd/9/$1" "$_ss_pending" || _ss_die "$_ss_E_RENAME" "cannot stage into $2"
}
# Lands the staged file $1 (f<k>) as $3 in directory $2 with mode $4 (a
# kept one too: see _ss_keepf), and queues its fact.
_ss_file() {
  _ss_mkparent "$2"
  _ss_landed "$1" "$2/$3"
  # -ef: see _ss_canon (dash, BusyBox, bash and mksh have it; without it
  # the file is simply renamed into place).
  # shellcheck disable=SC3013
  if [ -e "/proc/self/fd/9/k$1" ] && [ "/proc/self/fd/9/$1" -ef "/proc/self/fd/8/$3" ]; then
    # Kept, and still the very file: nothing to move.
    rm -f "/proc/self/fd/9/$1"
    exec 8<&-
    return 0
  fi
  [ -z "$4" ] || chmod "$4" "/proc/self/fd/9/$1" || _ss_die "$_ss_E_CHMOD" "chmod failed for $2/$3"
  _ss_stage "$1" "$2"
  mv -f -T "$_ss_pending" "/proc/self/fd/8/$3" || _ss_die "$_ss_E_RENAME" "cannot rename onto $2/$3"
  _ss_pending=
  exec 8<&-
}
_ss_clear() {
  for _ss_e in "$1"/* "$1"/.[!.]* "$1"/..?*; do
    [ -e "$_ss_e" ] || [ -L "$_ss_e" ] || continue
    case ${_ss_e##*/} in "$_ss_reserved"*) continue ;; esac
    _ss_rmtree "$_ss_e" || _ss_die "$_ss_E_RENAME" "cannot remove ${_ss_e##*/} from the target"
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
  if [ -s "$_ss_S/K${1#d}" ]; then
    _ss_merge "$1" "$_ss_rootarg" "$2" root
    exec 8<&-
    _ss_landed "${1#d}" "$_ss_rootarg"
    return 0
  fi
  _ss_aside="/proc/self/fd/9/$1.old"
  mkdir -m 700 "$_ss_aside" || _ss_die "$_ss_E_MKDIR" 'cannot create scratch for the old contents'
  _ss_m=$(stat -c %a /proc/self/fd/8/. 2>/dev/null) || _ss_m=
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
  _ss_landed "${1#d}" "$_ss_rootarg"
}
_ss_dir() {
  _ss_mkparent "$2"
  # Something kept: the target is updated in place.
  if [ -s "$_ss_S/K${1#d}" ] && [ -d "/proc/self/fd/8/$3" ] && [ ! -L "/proc/self/fd/8/$3" ]; then
    _ss_pin "$2/$3" 8
    _ss_merge "$1" "$2/$3" "$4"
    exec 8<&-
    _ss_landed "${1#d}" "$2/$3"
    return 0
  fi
  [ -z "$4" ] || chmod "$4" "/proc/self/fd/9/$1" || _ss_die "$_ss_E_CHMOD" "chmod failed for $2/$3"
  _ss_stage "$1" "$2"
  _ss_old="/proc/self/fd/8/$_ss_tag.$1.old"
  if [ -e "/proc/self/fd/8/$3" ] || [ -L "/proc/self/fd/8/$3" ]; then
    mv -f -T "/proc/self/fd/8/$3" "$_ss_old" || _ss_die "$_ss_E_RENAME" "cannot replace $2/$3 (is it a mount point?)"
  fi
  if ! mv -f -T "$_ss_pending" "/proc/self/fd/8/$3"; then
    [ ! -e "$_ss_old" ] || mv -f -T "$_ss_old" "/proc/self/fd/8/$3"
    _ss_die "$_ss_E_RENAME" "cannot rename onto $2/$3"
  fi
  if [ -e "$_ss_old" ] || [ -L "$_ss_old" ]; then
    _ss_pending=$_ss_old
    _ss_rmtree "$_ss_old" || _ss_die "$_ss_E_RENAME" "cannot remove the replaced $2/$3"
  fi
  _ss_pending=
  exec 8<&-
  _ss_landed "${1#d}" "$2/$3"
}
_ss_cmd() {
  _ss_pin "$4" 8
  # Read with the shell's own `read` (no `cat`: a sandbox without one
  # would run an empty command), every byte kept, a last line without its
  # newline too.
  _ss_c=
  { while IFS= read -r _ss_l; do _ss_c=$_ss_c$_ss_l$_ss_nl; done; _ss_c=$_ss_c$_ss_l; } \
    <"/proc/self/fd/9/$3" || _ss_die "$_ss_E_EXTRACT" 'cannot read a staged command'
  rm -f /proc/self/fd/9/timeout
  # The timeout's watcher counts with `sleep`: without one it could not
  # end the command, so the command does not start (never untimed).
  if [ -n "$5" ] && ! command -v sleep >/dev/null 2>&1; then
    printf '%s cmd %s %s %s 0\n' "$_ss_TAG" "$1" "$2" "$_ss_E_NOT_FOUND"
    _ss_die "$_ss_E_COMMAND" "post-upload command not run: its timeout needs sleep, which the sandbox lacks"
  fi
  [ -n "$_ss_setsid" ] || _ss_off command-sessions setsid
  _ss_spawn_cmd "$_ss_c" "$_ss_S/cmd-out"
  _ss_wp=
  if [ -n "$5" ]; then
    # At the timeout the command, and all it started, gets TERM, and KILL
    # a second later.
    (_ss_watchfor "$5" || exit 0
     : >/proc/self/fd/9/timeout
     _ss_stop "$_ss_cp" TERM; sleep 1; _ss_stop "$_ss_cp" KILL) </dev/null >/dev/null 2>&1 &
    _ss_wp=$!
  fi
  wait "$_ss_cp"; _ss_rc=$?
  _ss_cp=
  if [ -n "$_ss_wp" ]; then kill -USR2 "$_ss_wp" 2>/dev/null; wait "$_ss_wp" 2>/dev/null; fi
  _ss_relay_out "$_ss_S/cmd-out"
  exec 8<&-
  if [ -e /proc/self/fd/9/timeout ]; then
    printf '%s cmd %s %s %s 1\n' "$_ss_TAG" "$1" "$2" "$_ss_rc"; _ss_die "$_ss_E_COMMAND_TIMEOUT" "post-upload command timed out after $5s"
  fi
  if [ "$_ss_rc" -ne 0 ]; then
    printf '%s cmd %s %s %s 0\n' "$_ss_TAG" "$1" "$2" "$_ss_rc"; _ss_die "$_ss_E_COMMAND" "post-upload command failed (exit $_ss_rc)"
  fi
}
# Incremental sync-in. The state file holds a fact per file a sync-in
# landed: "<identity> <token>", the identity as _ss_files prints it and the
# token the host's name for what it sent. A file still exactly as landed
# (same identity) holds what that token names.
#
# Lists every entry under directory $1 as "<type> <identity> ./path",
# type f (a regular file), d or o (anything else), and each directory's
# mode as "<mode> ./path" lines in file $3 (see _ss_same); paths with a
# newline are left out (they are never kept, and go before a merge). With
# $2 set (the remote dir itself) provider scratch at the top is left out
# too, and not walked (another call's may come and go meanwhile). A walk
# that failed anywhere (a directory the sandbox user cannot read, an
# entry gone before its stat) ends with a line "E": what it missed would
# be neither kept nor pruned by a merge, so _ss_join fails the listing
# and the target is replaced whole.
_ss_entries() {
  _ss_x=$1; _ss_y=$3
  if [ -n "$2" ]; then set -- -path "./$_ss_reserved*" -prune -o; else set --; fi
  (cd -P "$_ss_x" && TZ=UTC0 find . "$@" ! -name . ! -path "*$_ss_nl*" -exec stat -c '%f %d %i %s %z %n' {} + \
    || echo E) 2>/dev/null \
    | LC_ALL=C awk -v dirs="$_ss_y" '
      BEGIN { printf "" > dirs }
      $0 == "E" { print; next }
      {
        t = substr($1, 1, length($1) - 3)
        if (t == "4") print $1, substr($0, length($1 $2 $3 $4 $5 $6 $7) + 8) > dirs
        sub(/^[^ ]* /, (t == "8" ? "f " : t == "4" ? "d " : "o ")); print
      }'
}
# Joins the lines of _ss_entries on stdin with the state file's facts: the
# files still exactly as a sync-in landed them go to $1 as "<token>
# ./path" and to $2 as their identity lines; every regular file seen goes
# to $3 as "device inode" (its old fact is replaced or dropped); every
# entry goes to $4 as "<type> ./path" (what a merge prunes).
_ss_join() {
  LC_ALL=C awk -v state="$_ss_state" -v j="$1" -v i="$2" -v seen="$3" -v all="$4" '
    BEGIN {
      while ((getline l < state) > 0)
        if (split(l, f, " ") == 7) fact[f[1] " " f[2]] = f[3] " " f[4] " " f[5] " " f[6] " " f[7]
      printf "" > j; printf "" > i; printf "" > all
    }
    # The walk failed (see _ss_entries): no listing.
    NF < 8 { bad = 1; exit }
    {
      p = substr($0, length($1 $2 $3 $4 $5 $6 $7) + 8)
      print $1 " " p > all
      if ($1 != "f") next
      k = $2 " " $3
      print k >> seen
      if (!(k in fact)) next
      split(fact[k], v, " ")
      if (v[1] != $4 || v[2] != $5 || v[3] != $6 || v[4] != $7) next
      print v[5] " " p > j
      print substr($0, 3) > i
    }
    END { exit bad }'
}
# Lists the files under target $2 of directory mapping $1 that are still
# exactly as a sync-in landed them, as "<token> ./path" lines between two
# tagged lines (kept as J$1, with their identities as I$1 and every entry
# as A$1): "<TAG> list <k>", the lines, "<TAG> listed <k>"; or, gzipped
# (see _ss_zip), "<TAG> zlist <k> <bytes>", that many bytes of gzip (or
# "blist", of base64 of gzip), then
# "<TAG> listed <k>"; nothing where it lists nothing (no state, no
# target). With $3 set the target is the remote dir itself.
_ss_list() {
  if [ "$_ss_rec" = 1 ] && [ -f "$_ss_state" ] && _ss_keepable && [ -d "$2" ] && [ ! -L "$2" ] \
    && _ss_canon "$2" && _ss_in_root "$_ss_r" \
    && _ss_entries "$_ss_r" "${3-}" "$_ss_S/M$1" | _ss_join "$_ss_S/J$1" "$_ss_S/I$1" "$_ss_S/N" "$_ss_S/A$1"; then
    _ss_how=$(_ss_zip "$_ss_S/J$1")
    if [ "$_ss_how" != list ]; then
      _ss_n=$(wc -c <"$_ss_S/Z"); _ss_n=$((_ss_n))
      printf '%s %s %s %s\n' "$_ss_TAG" "$_ss_how" "$1" "$_ss_n"
      cat "$_ss_S/Z"
    else
      printf '%s list %s\n' "$_ss_TAG" "$1"
      cat "$_ss_S/J$1"
    fi
    printf '%s listed %s\n' "$_ss_TAG" "$1"
  fi
  # Nothing listed, nothing said: the host then keeps nothing there.
  return 0
}
# Reports the target $2 of file mapping $1 as "<TAG> file <k> <token>" when
# it is a regular file inside the remote dir still exactly as a sync-in
# landed it (kept as JF$1 and IF$1).
_ss_listf() {
  if [ "$_ss_rec" = 1 ] && [ -f "$_ss_state" ] && [ -f "$2" ] && [ ! -L "$2" ] \
    && _ss_canon "$2" && _ss_in_root "$_ss_r"; then
    { TZ=UTC0 stat -c 'f %d %i %s %z ./f' "$_ss_r" 2>/dev/null || return 0; } \
      | _ss_join "$_ss_S/JF$1" "$_ss_S/IF$1" "$_ss_S/N" "$_ss_S/AF$1" || return 0
    _ss_t=; read -r _ss_t _ss_x 2>/dev/null <"$_ss_S/JF$1"
    [ -z "$_ss_t" ] || printf '%s file %s %s\n' "$_ss_TAG" "$1" "$_ss_t"
  fi
  return 0
}
# A directory keeps its unchanged files in place: the merge takes cp's -a
# and -l, xargs -0 and tr (GNU and BusyBox have them all), and a cp that
# merges `SRC/.` into DST as GNU's does. uutils' cp (Ubuntu's since 25.10;
# 0.0.17 at least) copies SRC itself into DST instead, so a merge after
# the prune would leave the target partial: a cp is tried on a tree of
# two entries in the scratch dir first, once a program.
_ss_cpmerge=
_ss_keepable() {
  _ss_have cp xargs tr || return 1
  if [ -z "$_ss_cpmerge" ]; then
    _ss_cpmerge=0
    mkdir -p "/proc/self/fd/9/cpm/a/d" "/proc/self/fd/9/cpm/b" 2>/dev/null && : >"/proc/self/fd/9/cpm/a/d/f" \
      && cp -a "/proc/self/fd/9/cpm/a/." "/proc/self/fd/9/cpm/b/" 2>/dev/null \
      && [ -f "/proc/self/fd/9/cpm/b/d/f" ] && [ ! -e "/proc/self/fd/9/cpm/b/a" ] && _ss_cpmerge=1
  fi
  [ "$_ss_cpmerge" = 1 ]
}
# For directory mapping $1 (target $2): the files it listed (J$1) that the
# host's member k$1 names (ascending "<first> <last>" ranges of J$1's
# lines; nothing without one, nothing the host did not name) stay where
# they are, as K$1 (names) and KI$1 (their device and inode). With any, the target
# is updated in place (_ss_merge) instead of replaced: nothing it keeps is
# touched. A listing the host kept by but that is lost fails the sync (the
# host did not send those files).
_ss_keep() {
  [ -e "/proc/self/fd/9/k$1" ] || return 0
  [ -e "$_ss_S/J$1" ] || _ss_die "$_ss_E_EXTRACT" "the listing of $2 was lost"
  LC_ALL=C awk -v keep="/proc/self/fd/9/k$1" -v was="$_ss_S/I$1" -v ki="$_ss_S/KI$1" '
    function rel(l, f) { split(l, f, " "); return substr(l, length(f[1] f[2] f[3] f[4] f[5] f[6]) + 7) }
    BEGIN {
      while ((getline l < keep) > 0) { split(l, f, " "); a[++n] = f[1] + 0; b[n] = f[2] + 0 }
      while ((getline l < was) > 0) { split(l, f, " "); id[rel(l)] = f[1] " " f[2] }
      printf "" > ki; i = 1
    }
    {
      while (i <= n && FNR > b[i]) i++
      if (i > n) exit
      if (FNR < a[i]) next
      # The token is one word: 16 characters, or 49 for a racy file.
      p = substr($0, length($1) + 2); print p; print id[p] > ki
    }' "$_ss_S/J$1" >"$_ss_S/K$1" \
    || _ss_die "$_ss_E_EXTRACT" "cannot read the keep list of $2"
}
# Keeps the target $2 of file mapping $1 where the host sent member kf$1
# instead of its file: after checking it is still exactly as listed, it is
# linked (copied across filesystems) into the scratch dir as f$1 and lands
# like a sent file (see _ss_file), so whatever an earlier mapping of this
# sync did to the path, it ends up as a full sync would leave it.
_ss_keepf() {
  [ -e "/proc/self/fd/9/kf$1" ] || return 0
  _ss_w=; read -r _ss_w 2>/dev/null <"$_ss_S/IF$1"
  _ss_check "$2"
  _ss_l=$(TZ=UTC0 stat -c '%d %i %s %z ./f' "$_ss_r" 2>/dev/null)
  [ -n "$_ss_w" ] && [ "$_ss_l" = "$_ss_w" ] || _ss_die "$_ss_E_EXTRACT" "the unchanged file $2 changed during the sync"
  rm -f "/proc/self/fd/9/f$1"
  ln "$_ss_r" "/proc/self/fd/9/f$1" 2>/dev/null || cp -p "$_ss_r" "/proc/self/fd/9/f$1" \
    || _ss_die "$_ss_E_EXTRACT" "cannot keep the unchanged file $2"
}
# True when the target (pinned as fd 8) already is what the staged tree $1
# (d<k>) and the files kept in place (K<k>) make, so a merge would change
# nothing: every file in the target is one the host kept (K<k>); the staged
# tree's directories are exactly the target's, each with the same mode;
# its symlinks exactly the target's (`stat -c %N`: name and target); it
# holds nothing else, and the target nothing else but kept files (no name
# with a newline either). Directory mtimes are not compared: no tar lands
# them the same twice (GNU tar sets a directory's before it fills it with
# subdirectories, BusyBox tar never), so a full sync does not either. An
# unchanged tree costs a stat of its directories.
_ss_same() {
  _ss_k=${1#d}; _ss_d="/proc/self/fd/9/$1"
  [ -e "/proc/self/fd/9/k$_ss_k" ] && [ -f "$_ss_S/M$_ss_k" ] || return 1
  _ss_x=$(stat -c %f /proc/self/fd/8/.) || return 1
  # A name with a newline, either side, would not be one line.
  (cd -P "$_ss_d" && find . -name "*$_ss_nl*" -prune -print) >"$_ss_S/T" 2>/dev/null \
    && [ ! -s "$_ss_S/T" ] || return 1
  # Provider scratch at the top of the remote dir is not walked (see _ss_entries).
  if [ -n "$2" ]; then set -- -path "./$_ss_reserved*" -prune -o; else set --; fi
  (cd -P /proc/self/fd/8 && find . "$@" ! -name . -name "*$_ss_nl*" -prune -print) >"$_ss_S/T" 2>/dev/null \
    && [ ! -s "$_ss_S/T" ] || return 1
  (cd -P "$_ss_d" && find . ! -type l -exec stat -c '%f %n' {} + \
    && find . -type l -exec stat -c %N {} +) >"$_ss_S/S" 2>/dev/null || return 1
  if LC_ALL=C awk '$1 == "o" { o = 1; exit } END { exit !o }' "$_ss_S/A$_ss_k"; then
    (cd -P /proc/self/fd/8 && find . "$@" ! -name . -type l -exec stat -c %N {} +) >"$_ss_S/T" 2>/dev/null || return 1
  fi
  LC_ALL=C awk -v kept="$_ss_S/K$_ss_k" -v dirs="$_ss_S/M$_ss_k" -v staged="$_ss_S/S" -v links="$_ss_S/T" \
    -v top="$_ss_x" '
    # exit runs END, which says no where anything was amiss.
    function no() { bad = 1; exit }
    BEGIN {
      while ((getline l < kept) > 0) k[l] = 1
      while ((getline l < dirs) > 0) { split(l, f, " "); d[substr(l, length(f[1]) + 2)] = f[1]; n++ }
      while ((getline l < links) > 0) { t[l] = 1; nt++ }
    }
    $1 == "f" && (substr($0, 3) in k) { next }
    $1 == "o" { o++; next }
    $1 != "d" { no() }
    END {
      if (bad || o != nt) exit 1
      while ((getline l < staged) > 0) {
        if (l in t) { s++; continue }
        split(l, f, " "); p = substr(l, length(f[1]) + 2)
        if (p == ".") { if (f[1] != top) exit 1 }
        else if (!(p in d) || d[p] != f[1]) exit 1
        else s++
      }
      exit (s != n + nt)
    }' "$_ss_S/A$_ss_k"
}
# Updates target $2 (a directory, pinned as fd 8 by the caller) in place
# from the staged tree $1 (d<k>), keeping the files K<k> names, with mode
# $3 (none: the staged tree's; $4 set, for the remote dir: the target's
# own): first everything the listing saw (A<k>) that the new tree does not
# hold goes (a file not kept, a directory the tree has not, anything
# else; any name with a newline), then the staged tree is hard-linked in
# (copied across filesystems) over what stays. Not atomic, as the contract
# allows a directory mapping to be; a failure fails the sync, loudly.
_ss_merge() {
  _ss_k=${1#d}
  if [ -n "$3" ]; then
    chmod "$3" "/proc/self/fd/9/$1" || _ss_die "$_ss_E_CHMOD" "chmod failed for the staged $2"
  elif [ -n "${4-}" ]; then
    _ss_m=$(stat -c %a /proc/self/fd/8/.) && chmod "$_ss_m" "/proc/self/fd/9/$1" \
      || _ss_die "$_ss_E_CHMOD" "chmod failed for the staged $2"
  fi
  # A mapping the host sent a file for (s<k>) is not what it lands yet:
  # no need to look.
  if [ ! -e "/proc/self/fd/9/s$_ss_k" ] && _ss_same "$1" "${4-}"; then
    _ss_rmtree "/proc/self/fd/9/$1" || _ss_die "$_ss_E_RENAME" "cannot remove the staged $2"
    return 0
  fi
  (cd -P "/proc/self/fd/9/$1" && find . -type d) >"$_ss_S/D$_ss_k" \
    || _ss_die "$_ss_E_EXTRACT" "cannot list the staged $2"
  LC_ALL=C awk -v kept="$_ss_S/K$_ss_k" -v dirs="$_ss_S/D$_ss_k" '
    BEGIN {
      while ((getline l < kept) > 0) k[l] = 1
      while ((getline l < dirs) > 0) d[l] = 1
    }
    {
      p = substr($0, 3)
      for (q = p; (i = match(q, /\/[^\/]*$/)) > 0; ) { q = substr(q, 1, i - 1); if (q in gone) next }
      if (($1 == "f" && (p in k)) || ($1 == "d" && (p in d))) next
      gone[p] = 1
      print p
    }' "$_ss_S/A$_ss_k" >"$_ss_S/G$_ss_k" || _ss_die "$_ss_E_EXTRACT" "cannot plan the update of $2"
  if [ -n "${4-}" ]; then set -- "$1" "$2" "$3" -path "./$_ss_reserved*" -prune -o; else set -- "$1" "$2" "$3"; fi
  _ss_x=$1; _ss_y=$2; shift 3
  # One walk: a directory the sandbox user may not write (see _ss_rmtree)
  # is opened for the update (cp -a gives each its mode back), and any name
  # with a newline goes once the walk has opened everything under it
  # ({} + runs last; BusyBox find never runs one inside parentheses).
  (cd -P /proc/self/fd/8 \
    && LC_ALL=C find . "$@" \( -type d ! -perm -u+rwx -exec chmod u+rwx {} \; -o -name "*" \) \
      ! -name . -name "*$_ss_nl*" -exec rm -rf -- {} + \
    && tr '\n' '\000' <"$_ss_S/G$_ss_k" | xargs -0 -r rm -rf --) \
    || _ss_die "$_ss_E_RENAME" "cannot remove what $_ss_y no longer holds"
  cp -a -l "/proc/self/fd/9/$_ss_x/." /proc/self/fd/8/ 2>/dev/null || cp -a "/proc/self/fd/9/$_ss_x/." /proc/self/fd/8/ \
    || _ss_die "$_ss_E_RENAME" "cannot update $_ss_y in place"
  _ss_rmtree "/proc/self/fd/9/$_ss_x" || _ss_die "$_ss_E_RENAME" "cannot remove the staged $_ss_y"
}
# Queues mapping $1 (target $2) to record once its operation's mappings
# all landed (_ss_recop): the facts of what landed are read off the
# promoted target, before any post-upload command runs.
_ss_landed() {
  _ss_pend="$_ss_pend $1"
  eval "_ss_pt_$1=\$2"
}
# Records what the operation's mappings sent: for every file a directory
# mapping sent (t<k>: "<token> ./path" lines) and a file mapping's file
# (sent, tf<k>, or kept, JF<k>), a fact "<identity> <token>", once its
# identity lies before the filesystem's clock. (A directory's kept files
# were left as they were: their facts stand.) Landing changed the ctimes
# of what it linked or unlinked; by the time the clock is read that is
# usually a tick ago. Where a landed file's last change is not, so it
# would not count, the clock is read again once it has moved past the
# first reading (_ss_tick) and the facts once more.
_ss_recop() {
  [ "$_ss_rec" = 1 ] && [ -n "$_ss_pend" ] || { _ss_pend=; return 0; }
  # Nothing sent (an unchanged tree): nothing to record, no tick to wait.
  _ss_n=
  for _ss_k in $_ss_pend; do
    case $_ss_k in f*) _ss_n=1 ;; *) [ ! -s "/proc/self/fd/9/t$_ss_k" ] || _ss_n=1 ;; esac
  done
  [ -n "$_ss_n" ] || { _ss_pend=; return 0; }
  # The clock is read by the facts' own stat (no process of its own).
  _ss_clock || { _ss_pend=; return 0; }
  # The first facts go straight into F (a retry starts it over: nothing
  # else is in it yet), later ones through Fo.
  _ss_fo="$_ss_S/Fo"; [ -s "$_ss_S/F" ] || _ss_fo="$_ss_S/F"
  if ! _ss_facts; then
    _ss_readclock && _ss_tick || { _ss_pend=; return 0; }
    _ss_facts
  fi
  [ "$_ss_fo" = "$_ss_S/F" ] || cat "$_ss_S/Fo" >>"$_ss_S/F" 2>/dev/null
  _ss_pend=
}
# Probes the clock (_ss_probe) until it reads later than the last probe:
# a fine-grained (multigrain) clock at once, a coarse one within a tick
# (4 ms at HZ=250, 10 at HZ=100); not a fixed 20 ms wait. False when the
# probe fails, or the clock has not moved after ~25 tries.
_ss_tick() {
  _ss_was=$_ss_pct; _ss_i=0
  while _ss_probe; do
    [ "$_ss_pct" = "$_ss_was" ] || return 0
    _ss_i=$((_ss_i + 1)); [ "$_ss_i" -le 25 ] || return 1
    sleep 0.002 2>/dev/null
  done
  return 1
}
# The facts of what _ss_recop records, as of the probe file $_ss_pf, into
# $_ss_fo; false when a landed file's identity does not lie before the
# probe yet. Each stat reads the probe first (an absolute path, where the
# files' are ./ ones): its device and ctime are the clock. A directory
# mapping that kept nothing holds only what it sent (and what came since,
# left out by name), so find walks it instead of its list going through
# awk, tr and xargs: two processes fewer.
_ss_facts() {
  : >"$_ss_fo"; [ ! -e "$_ss_S/late" ] || rm -f "$_ss_S/late"
  for _ss_k in $_ss_pend; do
    eval "_ss_x=\$_ss_pt_$_ss_k"
    _ss_canon "$_ss_x" && _ss_in_root "$_ss_r" || continue
    case $_ss_k in
      f*)
        # A kept file keeps its token, unless the host sent a new one.
        _ss_t=
        if [ -s "/proc/self/fd/9/t$_ss_k" ]; then
          read -r _ss_t _ss_x 2>/dev/null <"/proc/self/fd/9/t$_ss_k"
        elif [ -e "/proc/self/fd/9/k$_ss_k" ]; then
          read -r _ss_t _ss_x 2>/dev/null <"$_ss_S/JF${_ss_k#f}"
        fi
        case $_ss_t in
          '') continue ;;
          r???????????????)
            _ss_l=$(md5sum <"$_ss_r" 2>/dev/null) || continue
            _ss_t="$_ss_t-${_ss_l%% *}" ;;
        esac
        _ss_l=$(TZ=UTC0 stat -c '%d %i %s %z' "$_ss_pf" "$_ss_r" 2>/dev/null) || continue
        printf '%s\n' "$_ss_l" | LC_ALL=C awk -v t="$_ss_t" -v out="$_ss_fo" -v late="$_ss_S/late" '
          NR == 1 { dev = $1; probe = $4 " " $5 " " $6; next }
          $1 != dev { next }
          ($4 " " $5 " " $6) < probe { print $0, t >> out; next }
          { printf "" > late }'
        ;;
      *)
        [ -s "/proc/self/fd/9/t$_ss_k" ] || continue
        if [ -s "$_ss_S/K$_ss_k" ]; then
          (cd -P "$_ss_r" && LC_ALL=C awk '{ print substr($0, 18) }' "/proc/self/fd/9/t$_ss_k" | tr '\n' '\000' \
            | TZ=UTC0 xargs -0 -r stat -c '%d %i %s %z %n' -- "$_ss_pf" 2>/dev/null)
        else
          # The remote dir itself: its provider scratch is not walked.
          if [ "$_ss_r" = "$_ss_root" ]; then set -- -path "./$_ss_reserved*" -prune -o; else set --; fi
          (cd -P "$_ss_r" && TZ=UTC0 find . "$@" -type f ! -path "*$_ss_nl*" -exec stat -c '%d %i %s %z %n' "$_ss_pf" {} + 2>/dev/null)
        fi | LC_ALL=C awk -v t="/proc/self/fd/9/t$_ss_k" -v out="$_ss_fo" -v late="$_ss_S/late" -v racy="$_ss_S/R" '
          BEGIN { while ((getline l < t) > 0) sent[substr(l, 18)] = substr(l, 1, 16) }
          {
            p = substr($0, length($1 $2 $3 $4 $5 $6) + 7)
            if (substr(p, 1, 1) == "/") { dev = $1; probe = $4 " " $5 " " $6; next }
            if (probe == "" || $1 != dev || !(p in sent)) next
            if (($4 " " $5 " " $6) >= probe) printf "" > late
            else if (substr(sent[p], 1, 1) == "r") print $1, $2, $3, $4, $5, $6, sent[p], p > racy
            else print $1, $2, $3, $4, $5, $6, sent[p] >> out
          }'
        [ ! -s "$_ss_S/R" ] || _ss_rfacts
        ;;
    esac
  done
  [ ! -e "$_ss_S/late" ]
}
# Records the racy files _ss_facts set aside in R ("<fact> <racy token>
# ./path" lines, paths under $_ss_r) with the digest of what landed:
# "<racy token>-<md5>", the token a re-sync lists them under, which the
# host compares with its file's digest then. Without md5sum (or for a
# name md5sum escapes) there is no fact: the file is sent again.
_ss_rfacts() {
  command -v md5sum >/dev/null 2>&1 \
    && (cd -P "$_ss_r" && LC_ALL=C awk '{ print substr($0, length($1 $2 $3 $4 $5 $6 $7) + 8) }' "$_ss_S/R" \
      | tr '\n' '\000' | xargs -0 -r md5sum) 2>/dev/null \
    | LC_ALL=C awk -v racy="$_ss_S/R" -v out="$_ss_fo" '
      $0 !~ /^\\/ { h[substr($0, 35)] = substr($0, 1, 32) }
      END {
        while ((getline l < racy) > 0) {
          split(l, f, " "); p = substr(l, length(f[1] f[2] f[3] f[4] f[5] f[6] f[7]) + 8)
          if (p in h) print f[1], f[2], f[3], f[4], f[5], f[6], f[7] "-" h[p] >> out
        }
      }'
  rm -f "$_ss_S/R"
}
# Writes the state file: the facts of this sync; the earlier ones of
# files it kept; and the earlier ones of files it did not see. A failed
# write only means more is sent next time.
_ss_savestate() {
  [ "$_ss_rec" = 1 ] && { [ -s "$_ss_S/F" ] || [ -s "$_ss_S/N" ]; } || return 0
  [ -n "$_ss_state" ] || _ss_findstate 1
  [ -n "$_ss_state" ] || return 0
  # The state dir may be on another filesystem than the scratch dir: a new
  # state is written beside the old one and renamed over it, so a reader
  # never sees half of one.
  _ss_new="$_ss_state.$$"
  # No state yet (a first sync): the facts are all it would hold, so they
  # become it as they are (no awk to fork: a reader takes a key's last
  # fact, as the merge below keeps it).
  if [ ! -e "$_ss_state" ] && [ ! -L "$_ss_state" ]; then
    [ ! -s "$_ss_S/F" ] || { mv -f "$_ss_S/F" "$_ss_new" && mv -f "$_ss_new" "$_ss_state"; } 2>/dev/null \
      || rm -f "$_ss_new"
    return 0
  fi
  # The kept lists as one file: a cat only where there are several.
  _ss_ki="$_ss_S/KIall"; _ss_kn=0
  for _ss_x in "$_ss_S"/KI[0-9]*; do
    [ -e "$_ss_x" ] || continue
    _ss_kn=$((_ss_kn + 1)); [ "$_ss_kn" -gt 1 ] || _ss_ki=$_ss_x
  done
  case $_ss_kn in
    0) : >"$_ss_ki" ;;
    1) ;;
    *) _ss_ki="$_ss_S/KIall"; cat "$_ss_S"/KI[0-9]* >"$_ss_ki" 2>/dev/null ;;
  esac
  # Nothing recorded and every file seen kept (each mapping's kept files
  # are among those it saw, so equal counts mean equal sets): the state
  # already says all there is.
  if [ ! -s "$_ss_S/F" ] && _ss_a=$(wc -l <"$_ss_S/N") && _ss_b=$(wc -l <"$_ss_ki") \
    && [ "$((_ss_a))" -eq "$((_ss_b))" ]; then
    return 0
  fi
  # Every file is read with getline, the old state too (none yet: no
  # lines), so no cat feeds it.
  LC_ALL=C awk -v old="$_ss_state" -v facts="$_ss_S/F" -v seen="$_ss_S/N" -v kept="$_ss_ki" '
    BEGIN {
      while ((getline l < facts) > 0) { split(l, f, " "); k = f[1] " " f[2]; if (!(k in new)) n[++c] = k; new[k] = l }
      while ((getline l < seen) > 0) gone[l] = 1
      while ((getline l < kept) > 0) delete gone[l]
      while ((getline l < old) > 0) {
        split(l, f, " "); k = f[1] " " f[2]
        if (!(k in new) && !(k in gone) && ++left <= 1000000) print l
      }
      for (i = 1; i <= c; i++) print new[n[i]]
    }' >"$_ss_new" 2>/dev/null \
    && mv -f "$_ss_new" "$_ss_state" 2>/dev/null || rm -f "$_ss_new"
  return 0
}
# The report program's caps line: the codecs, and whether it records. It
# then leaves its scratch dir, with the listings, to the program that
# follows (_ss_adopt).
_ss_reported() {
  _ss_c=$(_ss_caps); [ "$_ss_rec" = 0 ] || _ss_c="$_ss_c record"
  printf '%s caps%s\n' "$_ss_TAG" "$_ss_c"
  _ss_handon
}
# Reports the caps line (the codecs when $1 is 1; "stream" where GNU tar
# stops at the end marker by itself, so the host may send while it walks;
# "record"), reads the host's answer "<codec> <length>" and extracts the
# archive into the scratch dir: GNU tar reads exactly the plain archive
# (records of $2 blocks) itself, another tar takes <length> bytes through
# head. Any other answer stops the program, changing nothing.
_ss_extract() {
  _ss_codec=
  if [ "$1" = 1 ]; then _ss_codec=$(_ss_caps); [ -n "$_ss_codec" ] || _ss_nocaps; fi
  [ "$_ss_gnutar" = 1 ] && _ss_codec="$_ss_codec stream"
  [ "$_ss_rec" = 0 ] || _ss_codec="$_ss_codec record"
  printf '%s caps%s\n' "$_ss_TAG" "$_ss_codec"
  read -r _ss_codec _ss_len || _ss_die "$_ss_E_EXTRACT" 'the host sent no answer'
  case $_ss_codec in
  none)
    if [ "$_ss_gnutar" = 1 ]; then
      tar -x -b "$2" -p -o -f - -C /proc/self/fd/9
    else
      head -c "$_ss_len" | tar -x -p -o -f - -C /proc/self/fd/9
    fi || _ss_die "$_ss_E_EXTRACT" 'extracting the archive failed' ;;
  gzip|zstd) _ss_unpack "$_ss_codec" || _ss_die "$_ss_E_EXTRACT" 'extracting the compressed archive failed' ;;
  *) _ss_die "$_ss_E_EXTRACT" 'the host sent no archive' ;;
  esac
}
# Applies nothing unless the archive's last member, commit, holds the
# token $1: a source that changed or a stream that was cut never lands.
_ss_commit() {
  _ss_tok=
  { read -r _ss_tok </proc/self/fd/9/commit; } 2>/dev/null
  [ "$_ss_tok" = "$1" ] || _ss_die "$_ss_E_INCOMPLETE" 'archive incomplete: a source changed or the stream was cut'
}
