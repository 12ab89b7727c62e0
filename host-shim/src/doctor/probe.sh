# sandbox-sync doctor: what the sandbox offers, probed in one exec, as
# key=value lines. $1 is the remote dir, $2 the scratch prefix (its probe
# directory is a scratch name, which nothing syncs and every program sweeps).
r=$1 prefix=$2
echo "shell=$(readlink /proc/$$/exe 2>/dev/null || echo unknown)"
# No grep: the programs need none, so a sandbox may lack it.
tarv=$(tar --version 2>/dev/null) tarh=$(tar --help 2>&1)
case $tarv in *'GNU tar'*) echo tar=gnu ;; *)
  case $tarh in *[Bb]usy[Bb]ox*) echo tar=busybox ;; *)
    if command -v tar >/dev/null 2>&1; then echo tar=other; else echo tar=missing; fi ;;
  esac ;;
esac
for f in --exclude --no-xattrs --delay-directory-restore --null; do
  case $tarh in *"$f"*) echo "tar$f=yes" ;; *) echo "tar$f=no" ;; esac
done
case $(head --version 2>/dev/null) in
  *GNU*) echo head_c=exact ;;
  *) if command -v head >/dev/null 2>&1 && head -c 1 </dev/null >/dev/null 2>&1; then echo head_c=reads-ahead
     else echo head_c=missing; fi ;;
esac
command -v realpath >/dev/null 2>&1 && echo realpath=yes || echo realpath=no
readlink -f / >/dev/null 2>&1 && echo readlink_f=yes || echo readlink_f=no
[ -d /proc/self/fd ] && echo proc_self_fd=yes || echo proc_self_fd=no
for c in mkdir mv rm dd mktemp base64 gzip zstd; do command -v $c >/dev/null 2>&1 && echo "$c=yes" || echo "$c=no"; done
echo "uid=$(id -u 2>/dev/null || echo unknown)"
if [ -d "$r" ]; then
  d="$r/$prefix-doctor-$$"
  if mkdir -m 700 "$d" 2>/dev/null; then rmdir "$d"; echo remote_dir=writable; else echo remote_dir=read-only; fi
else echo remote_dir=missing; fi
# Each feature the programs turn off by themselves where the sandbox lacks
# a tool it needs (guest/core/src/script: _ss_have, command -v): on, or off
# naming what is missing. A transfer never needs these.
feature() {
  n=$1; shift; m=
  for t do
    case $t in
      /*) [ -e "$t" ] || m="$m $t" ;;
      exact-read) [ -n "$exact" ] || m="$m GNU-head|dd-iflag=count_bytes,fullblock" ;;
      dd-fullblock) ! command -v dd >/dev/null 2>&1 \
          || [ "$(printf xyz | dd bs=2 count=1 iflag=fullblock 2>/dev/null)" = xy ] || m="$m dd-iflag=fullblock" ;;
      clock) [ -n "${EPOCHREALTIME-}" ] || case $(date +%s%N 2>/dev/null) in
          '' | *[!0-9]* | *000000000) m="$m EPOCHREALTIME|date+%N" ;; esac ;;
      *'|'*) o=${t%%|*} p=${t#*|}
        command -v "$o" >/dev/null 2>&1 || command -v "$p" >/dev/null 2>&1 || m="$m $o|$p" ;;
      *) command -v "$t" >/dev/null 2>&1 || m="$m $t" ;;
    esac
  done
  if [ -z "$m" ]; then echo "feature.$n=on"; else echo "feature.$n=off:${m# }"; fi
}
# Reading exactly N bytes of a pipe and no further: GNU head, or a dd
# with count_bytes and fullblock, as _ss_readn reads (BusyBox head reads ahead).
exact=
case $(head --version 2>/dev/null) in *GNU*) exact=1 ;; esac
[ -n "$exact" ] || [ "$(printf xy | dd bs=64 count=1 iflag=count_bytes,fullblock 2>/dev/null)" = x ] && exact=1
feature command-timeouts sleep
feature command-sessions setsid
feature sandbox-deadline sleep
feature incremental-in-record awk find stat
feature incremental-in-keep cp xargs tr
if [ "${tarv#*GNU tar}" != "$tarv" ]; then
  feature incremental-out exact-read find stat cat head wc awk
else
  feature incremental-out exact-read find stat cat head wc awk tr xargs
fi
feature compressed-sync-in cat /dev/null 'zstd|gzip'
feature compressed-sync-out mkfifo 'zstd|gzip'
# As _ss_canprobe (outbound.sh) checks before `auto` times its gzip.
feature measured-compression dd dd-fullblock wc cat clock
feature compressed-listings gzip
