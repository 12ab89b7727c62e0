# sandbox-sync doctor: what the sandbox offers, probed in one exec, as
# key=value lines. $1 is the remote dir, $2 the scratch prefix (its probe
# directory is a scratch name, which nothing syncs and every program sweeps).
r=$1 prefix=$2
echo "shell=$(readlink /proc/$$/exe 2>/dev/null || echo unknown)"
if tar --version 2>/dev/null | grep -q 'GNU tar'; then echo tar=gnu
elif tar --help 2>&1 | grep -qi busybox; then echo tar=busybox
elif command -v tar >/dev/null 2>&1; then echo tar=other
else echo tar=missing; fi
for f in --exclude --no-xattrs --delay-directory-restore --null; do
  if tar --help 2>&1 | grep -q -- "$f"; then echo "tar$f=yes"; else echo "tar$f=no"; fi
done
if head --version 2>/dev/null | grep -q GNU; then echo head_c=exact
elif command -v head >/dev/null 2>&1 && head -c 1 </dev/null >/dev/null 2>&1; then echo head_c=reads-ahead
else echo head_c=missing; fi
command -v realpath >/dev/null 2>&1 && echo realpath=yes || echo realpath=no
readlink -f / >/dev/null 2>&1 && echo readlink_f=yes || echo readlink_f=no
[ -d /proc/self/fd ] && echo proc_self_fd=yes || echo proc_self_fd=no
for c in dd mktemp base64 gzip zstd; do command -v $c >/dev/null 2>&1 && echo "$c=yes" || echo "$c=no"; done
echo "uid=$(id -u 2>/dev/null || echo unknown)"
if [ -d "$r" ]; then
  d="$r/$prefix-doctor-$$"
  if mkdir -m 700 "$d" 2>/dev/null; then rmdir "$d"; echo remote_dir=writable; else echo remote_dir=read-only; fi
else echo remote_dir=missing; fi
