# A program writing a raw image file the way the trace importer must
# understand (scripts/record-trace-fixtures.sh records it under strace).
import os, threading
fd = os.open("disk.raw", os.O_RDWR | os.O_CREAT, 0o644)
os.ftruncate(fd, 4 << 20)
other = os.open("other.raw", os.O_RDWR | os.O_CREAT, 0o644)
ro = os.open("disk.raw", os.O_RDONLY)
os.pwrite(fd, b"a" * 4096, 0)
os.pwritev(fd, [b"b" * 4096, b"c" * 512], 8192)
os.pwritev(fd, [b"d" * 1024], 65536, os.RWF_DSYNC)
os.posix_fallocate(fd, 0, 1 << 20)
os.fdatasync(fd)
os.pwrite(other, b"x" * 512, 0)
try:
    os.pwrite(ro, b"y" * 512, 0)
except OSError:
    pass
def worker(base):
    for i in range(40):
        os.pwrite(fd, b"t" * 4096, base + i * 4096)
        if i % 10 == 9:
            os.fsync(fd)
ts = [threading.Thread(target=worker, args=(b,)) for b in (1 << 20, 2 << 20)]
for t in ts: t.start()
for t in ts: t.join()
os.fsync(fd)
import ctypes
libc = ctypes.CDLL(None, use_errno=True)
class iovec(ctypes.Structure):
    _fields_ = [("iov_base", ctypes.c_void_p), ("iov_len", ctypes.c_size_t)]
bufs = [ctypes.create_string_buffer(b"v" * 2048), ctypes.create_string_buffer(b"w" * 2048)]
iov = (iovec * 2)(*[iovec(ctypes.cast(b, ctypes.c_void_p), 2048) for b in bufs])
libc.pwritev(fd, iov, 2, ctypes.c_long(3 << 20))
FALLOC_FL_KEEP_SIZE, FALLOC_FL_PUNCH_HOLE, FALLOC_FL_ZERO_RANGE = 1, 2, 16
libc.fallocate(fd, FALLOC_FL_KEEP_SIZE | FALLOC_FL_PUNCH_HOLE, ctypes.c_long(1 << 20), ctypes.c_long(8192))
libc.fallocate(fd, FALLOC_FL_ZERO_RANGE, ctypes.c_long(2 << 20), ctypes.c_long(4096))
os.fsync(fd)
