# A writer through a shared mapping (tests/src/mapped.rs,
# js/test/support/mapped.js): maps the file whose path's bytes argv[1]
# gives as hex, says "mapped", then per stdin line "<offset> <hex bytes>"
# writes them through the mapping (no msync: the pages stay dirty), cut
# at the file's end, and says "ok".
import mmap, os, sys

fd = os.open(bytes.fromhex(sys.argv[1]), os.O_RDWR)
m = mmap.mmap(fd, 0)
print("mapped", flush=True)
for line in sys.stdin:
    off, data = line.split()
    b = bytes.fromhex(data)[: max(0, min(len(m), os.fstat(fd).st_size) - int(off))]
    m[int(off):int(off) + len(b)] = b
    print("ok", flush=True)
