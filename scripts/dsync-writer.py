# A program writing a raw image file with synchronous writes, the ways the
# trace importer must read as FUA (scripts/record-trace-fixtures.sh
# records it under strace as sim/tests/sim/traces/dsync-writer.strace).
# Every write goes through descriptor 3, the lowest free one, so the
# recording has one image descriptor that changes what it syncs:
# - opened O_DSYNC: 8 pwrite64 and 1 pwritev, all FUA, then closed;
# - reopened plain: 4 pwrite64, 1 pwritev2 with RWF_DSYNC (FUA), 1 plain
#   pwritev, fsync;
# - an O_SYNC descriptor (4) copied over it with dup2: 2 pwrite64, FUA,
#   fsync, close.
# So 17 writes, 12 of them FUA, and 2 flushes.
import os

img = "disk.raw"
fd = os.open(img, os.O_RDWR | os.O_CREAT | os.O_DSYNC, 0o644)
os.ftruncate(fd, 4 << 20)
for i in range(8):
    os.pwrite(fd, bytes([i + 1]) * 4096, i * 65536)
os.pwritev(fd, [b"a" * 4096, b"b" * 4096], 1 << 20)
os.close(fd)

fd = os.open(img, os.O_RDWR)
for i in range(4):
    os.pwrite(fd, b"p" * 4096, (2 << 20) + i * 4096)
os.pwritev(fd, [b"d" * 8192], 3 << 20, os.RWF_DSYNC)
os.pwritev(fd, [b"e" * 512, b"f" * 512], (3 << 20) + 8192)
os.fsync(fd)

sync = os.open(img, os.O_RDWR | os.O_SYNC)
os.dup2(sync, fd)
os.close(sync)
for i in range(2):
    os.pwrite(fd, b"s" * 4096, (3 << 20) + 65536 + i * 4096)
os.fsync(fd)
os.close(fd)
