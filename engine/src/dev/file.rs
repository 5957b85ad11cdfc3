//! A real file as a [`BlockDev`]: positional I/O on a small pool of worker
//! threads, `fdatasync` for flush, `fallocate` for efficient zeroing and
//! hole punching, and O_DIRECT as an option.
//!
//! The engine is single-threaded and cooperative, but the syscalls behind a
//! real file block. So every request is handed, with an owned copy of its
//! buffer, to an [`IoPool`] worker; the request's future waits on a one-shot
//! completion that the worker fills and wakes. Many requests (queue depth 64
//! and more) can thus be in flight on one file at once, as many as the pool
//! has threads actually running in the kernel.
//!
//! O_DIRECT needs the offset, length and memory address of a request aligned
//! to the logical block size. A direct `FileDev` keeps two descriptors on the
//! same file: requests aligned to [`DIRECT_ALIGN`] go through the O_DIRECT one
//! with an aligned bounce buffer; the rest (headers, small metadata updates,
//! 512-byte clusters) go through the buffered one. Linux keeps the two
//! coherent: a direct request first writes back and then invalidates the page
//! cache over its range. This avoids a read-modify-write of partial blocks,
//! which would race with a neighbouring unaligned write to the same block.
//!
//! Locks: [`FileDev::lock`] takes QEMU's image locks (see [`super::lock`])
//! on the buffered descriptor; the O_DIRECT one never holds any, so the
//! two never conflict with each other. [`FileDev::create`] takes QEMU's
//! create locks before it empties the file. [`FileDev::file_id`] tells
//! which file the descriptor really is, whatever name led to it.

use std::fmt;
use std::fs::{File, OpenOptions};
use std::io;
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::os::unix::io::AsRawFd;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use super::lock::{self, Held, LockError, LockRequest};
use super::pool::{Abandoned, IoPool};
use super::{BlockDev, DevError, IoOp, WriteFlags, ZeroFlags};

/// Alignment of offset, length and memory that O_DIRECT requests use. 4096
/// covers devices with 512-byte and 4 KiB logical sectors alike.
pub const DIRECT_ALIGN: usize = 4096;

/// Largest zero buffer written at once when zeroing has to fall back to
/// plain writes, so that zeroing a huge range allocates a bounded amount.
const ZERO_CHUNK: usize = 1 << 20;

/// How to open a [`FileDev`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FileOptions {
    /// Open read-only; every modifying request then fails.
    pub read_only: bool,
    /// Use O_DIRECT for requests aligned to [`DIRECT_ALIGN`].
    pub direct: bool,
    /// Worker threads of the pool the file creates for itself; at least 1.
    /// Ignored by [`FileDev::open_in`], which shares a given pool.
    pub threads: usize,
    /// Use `fallocate` for write_zeroes and discard. Off, the device behaves
    /// as one on a file system without it: `write_zeroes` with
    /// `no_fallback` answers `NotSupported` and discard does nothing.
    pub fallocate: bool,
    /// Accept a character device, as QEMU's `host_device` driver does
    /// (`/dev/null` is an empty disk). Off, only regular files and block
    /// devices are images: a character device named by mistake is refused.
    pub char_device: bool,
}

impl Default for FileOptions {
    fn default() -> Self {
        FileOptions {
            read_only: false,
            direct: false,
            threads: 8,
            fallocate: true,
            char_device: false,
        }
    }
}

/// Why a file could not be opened as a device.
#[derive(Debug, thiserror::Error)]
pub enum FileOpenError {
    #[error("{path}: {error}")]
    Open { path: PathBuf, error: io::Error },
    #[error("{path}: the file system does not support O_DIRECT (open without it)")]
    DirectUnsupported { path: PathBuf },
    #[error("{path}: not a regular file or block device")]
    NotAFile { path: PathBuf },
    #[error("cannot start I/O worker threads: {0}")]
    Threads(io::Error),
    #[error("invalid file options: {0}")]
    Options(String),
    #[error(transparent)]
    Lock(#[from] LockError),
}

/// Which file an open descriptor is, as the kernel knows it: the same for
/// every name (symlink, hard link, `..` path) that leads to the file.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum FileId {
    /// A regular file: its file system and inode.
    Inode { dev: u64, ino: u64 },
    /// A block device, by the device it is rather than by the inode of
    /// its node, since two device nodes can name one device.
    BlockDevice { rdev: u64 },
}

impl FileId {
    /// Which file `meta` describes: a block device by the device it is,
    /// anything else by device and inode. Lets a file not opened yet be
    /// compared with an open device's [`FileDev::file_id`].
    pub fn of(meta: &std::fs::Metadata) -> FileId {
        use std::os::unix::fs::{FileTypeExt, MetadataExt};
        if meta.file_type().is_block_device() {
            FileId::BlockDevice { rdev: meta.rdev() }
        } else {
            FileId::Inode {
                dev: meta.dev(),
                ino: meta.ino(),
            }
        }
    }
}

/// An owned I/O buffer, as handed to a worker. For O_DIRECT its usable
/// part starts at a [`DIRECT_ALIGN`] boundary; it is carved out of a plain
/// `Vec` so that no unsafe allocation code is needed. A caller that keeps
/// its data in an aligned one (as qemu-img bench aligns its buffers) lets a
/// request running alone go to the file without a copy.
pub struct IoBuf {
    storage: Vec<u8>,
    start: usize,
    len: usize,
}

impl IoBuf {
    /// `len` zero bytes at a [`DIRECT_ALIGN`] boundary.
    pub fn aligned_zeroed(len: usize) -> IoBuf {
        IoBuf::aligned_filled(len, 0)
    }

    /// `len` bytes of `byte` at a [`DIRECT_ALIGN`] boundary.
    pub fn aligned_filled(len: usize, byte: u8) -> IoBuf {
        let storage = vec![byte; len + DIRECT_ALIGN];
        let start = storage.as_ptr().align_offset(DIRECT_ALIGN);
        // For byte pointers align_offset is exact at run time; the assert
        // guards the slicing below against the documented escape hatch.
        assert!(start < DIRECT_ALIGN, "cannot align an I/O buffer");
        IoBuf {
            storage,
            start,
            len,
        }
    }

    /// An aligned copy of `data` for an O_DIRECT write. Only the padding
    /// before the aligned start is zeroed: zeroing the whole buffer first
    /// (`aligned_zeroed`), only to overwrite it, was a third of the
    /// benchmark's CPU time on 1 MiB writes at depth 1.
    fn aligned_copy(data: &[u8]) -> IoBuf {
        let mut storage: Vec<u8> = Vec::with_capacity(data.len() + DIRECT_ALIGN);
        let start = storage.as_ptr().align_offset(DIRECT_ALIGN);
        assert!(start < DIRECT_ALIGN, "cannot align an I/O buffer");
        storage.resize(start, 0);
        storage.extend_from_slice(data);
        // The capacity covers both parts: nothing was reallocated, so the
        // buffer still starts where `start` was computed for.
        assert_eq!(
            (storage.as_ptr() as usize + start) % DIRECT_ALIGN,
            0,
            "an I/O buffer moved while filled"
        );
        IoBuf {
            storage,
            start,
            len: data.len(),
        }
    }

    fn from_vec(storage: Vec<u8>) -> IoBuf {
        let len = storage.len();
        IoBuf {
            storage,
            start: 0,
            len,
        }
    }

    /// A zeroed buffer fit for a request at `offset` through `fds`.
    fn for_request(direct: bool, len: usize) -> IoBuf {
        if direct {
            IoBuf::aligned_zeroed(len)
        } else {
            IoBuf::from_vec(vec![0u8; len])
        }
    }

    pub fn as_slice(&self) -> &[u8] {
        &self.storage[self.start..self.start + self.len]
    }

    pub fn as_mut_slice(&mut self) -> &mut [u8] {
        &mut self.storage[self.start..self.start + self.len]
    }
}

/// The descriptors of one open file, shared with the workers.
struct Fds {
    /// Buffered descriptor: unaligned requests, fallocate, flush, truncate.
    file: File,
    /// O_DIRECT descriptor, when the device was opened direct.
    direct: Option<File>,
}

impl Fds {
    /// The descriptor to use for a data request at `offset` of `len` bytes.
    fn for_range(&self, offset: u64, len: usize) -> (&File, bool) {
        match &self.direct {
            Some(d)
                if offset.is_multiple_of(DIRECT_ALIGN as u64)
                    && len.is_multiple_of(DIRECT_ALIGN)
                    && len > 0 =>
            {
                (d, true)
            }
            _ => (&self.file, false),
        }
    }
}

/// Removes the file a [`Create::New`] open made when the open fails later
/// (a lock refused, say), if the name still leads to that file.
struct Unmake<'a> {
    path: &'a Path,
    id: Option<FileId>,
}

impl Drop for Unmake<'_> {
    fn drop(&mut self) {
        let Some(id) = self.id else { return };
        if std::fs::symlink_metadata(self.path).is_ok_and(|m| FileId::of(&m) == id) {
            let _ = std::fs::remove_file(self.path);
        }
    }
}

/// How [`FileDev::open_impl`] treats a file that is not there, or is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Create {
    /// Open what exists.
    No,
    /// Create it if missing, empty it (after the create locks) if not.
    Empty,
    /// Create it; refuse one that exists.
    New,
}

/// A real file (or block device) as a [`BlockDev`].
pub struct FileDev {
    fds: Arc<Fds>,
    pool: IoPool,
    path: PathBuf,
    read_only: bool,
    fallocate: bool,
    /// A character device: it has no cache for `fdatasync` to write back
    /// (Linux answers EINVAL for `/dev/null`), so a flush has nothing to do.
    char_device: bool,
    /// The length counting every extending request issued so far, so that
    /// `len()` answers without a syscall and sees requests still in flight.
    len: AtomicU64,
    /// The file the descriptors are open on.
    id: FileId,
    /// The lock bytes the buffered descriptor's description holds; they
    /// go when it closes.
    held: Held,
}

impl fmt::Debug for FileDev {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FileDev")
            .field("path", &self.path)
            .field("read_only", &self.read_only)
            .field("direct", &self.fds.direct.is_some())
            .field("len", &self.len.load(Ordering::Relaxed))
            .finish()
    }
}

impl FileDev {
    /// Open an existing file with a pool of its own.
    pub fn open(path: impl AsRef<Path>, opts: &FileOptions) -> Result<FileDev, FileOpenError> {
        let pool = new_pool(opts)?;
        Self::open_in(path, opts, pool)
    }

    /// Open an existing file whose requests run on `pool`.
    pub fn open_in(
        path: impl AsRef<Path>,
        opts: &FileOptions,
        pool: IoPool,
    ) -> Result<FileDev, FileOpenError> {
        Self::open_impl(path.as_ref(), opts, pool, Create::No)
    }

    /// Create `path` (emptying it if it exists) with a pool of its own.
    /// The file is emptied only after QEMU's create locks are taken
    /// ([`LockRequest::create`]), so a file another process has open is
    /// refused untouched; the device keeps those locks until dropped or
    /// changed with [`FileDev::lock`].
    pub fn create(path: impl AsRef<Path>, opts: &FileOptions) -> Result<FileDev, FileOpenError> {
        let pool = new_pool(opts)?;
        Self::create_in(path, opts, pool)
    }

    /// [`FileDev::create`], with requests on `pool`.
    pub fn create_in(
        path: impl AsRef<Path>,
        opts: &FileOptions,
        pool: IoPool,
    ) -> Result<FileDev, FileOpenError> {
        Self::open_impl(path.as_ref(), opts, pool, Create::Empty)
    }

    /// Create `path`, which must not exist (`O_CREAT | O_EXCL`; a file, or
    /// even a dangling symlink, already there is refused with an
    /// [`io::ErrorKind::AlreadyExists`] open error, and left alone), with
    /// QEMU's create locks, as [`FileDev::create`] does. A caller that
    /// removes the file when it gives up removes only what it made.
    pub fn create_new(
        path: impl AsRef<Path>,
        opts: &FileOptions,
    ) -> Result<FileDev, FileOpenError> {
        let pool = new_pool(opts)?;
        Self::open_impl(path.as_ref(), opts, pool, Create::New)
    }

    fn open_impl(
        path: &Path,
        opts: &FileOptions,
        pool: IoPool,
        create: Create,
    ) -> Result<FileDev, FileOpenError> {
        if create != Create::No && opts.read_only {
            return Err(FileOpenError::Options(
                "cannot create a file read-only".into(),
            ));
        }
        let open_err = |error| FileOpenError::Open {
            path: path.to_owned(),
            error,
        };
        // Never O_TRUNC: a file is emptied only once the locks say nobody
        // else uses it.
        let options = |create: Create| {
            let mut o = OpenOptions::new();
            o.read(true).write(!opts.read_only);
            match create {
                Create::No => {}
                Create::Empty => {
                    o.create(true);
                }
                Create::New => {
                    o.create_new(true);
                }
            }
            o
        };
        let file = options(create).open(path).map_err(open_err)?;
        let meta = file.metadata().map_err(open_err)?;
        // A file this open made goes again if the open fails after all.
        let mut made = Unmake {
            path,
            id: (create == Create::New).then(|| FileId::of(&meta)),
        };
        let ft = meta.file_type();
        use std::os::unix::fs::FileTypeExt;
        let accepted =
            ft.is_file() || ft.is_block_device() || (opts.char_device && ft.is_char_device());
        if !accepted {
            return Err(FileOpenError::NotAFile {
                path: path.to_owned(),
            });
        }
        let direct = if opts.direct {
            // The buffered open above created the file if asked; this one
            // only opens it again, so it never truncates.
            match options(Create::No).custom_flags(libc::O_DIRECT).open(path) {
                Ok(f) => Some(f),
                Err(e) if e.raw_os_error() == Some(libc::EINVAL) => {
                    return Err(FileOpenError::DirectUnsupported {
                        path: path.to_owned(),
                    })
                }
                Err(e) => return Err(open_err(e)),
            }
        } else {
            None
        };
        let mut held = Held::default();
        if create != Create::No {
            lock::apply(&file, path, &mut held, LockRequest::create())?;
            // O_TRUNC would have left a block device as it is, too. A file
            // made by this open is empty already.
            if create == Create::Empty && ft.is_file() {
                file.set_len(0).map_err(open_err)?;
            }
        }
        let len = end_of_file(&file).map_err(open_err)?;
        made.id = None;
        Ok(FileDev {
            fds: Arc::new(Fds { file, direct }),
            pool,
            path: path.to_owned(),
            read_only: opts.read_only,
            fallocate: opts.fallocate,
            char_device: meta.file_type().is_char_device(),
            len: AtomicU64::new(len),
            id: FileId::of(&meta),
            held,
        })
    }

    /// Whether the file holds data at `offset` (or a hole, which reads
    /// as zeroes) and for how many bytes from there, at most `max`, as
    /// `lseek` with `SEEK_DATA` and `SEEK_HOLE` tell it: what QEMU's file
    /// driver answers for block status. `None` when the file system cannot
    /// say. A blocking call, for the tools (not the guest paths).
    pub fn extent_at(&self, offset: u64, max: u64) -> Option<(bool, u64)> {
        use std::os::fd::AsRawFd;
        let fd = self.fds.file.as_raw_fd();
        let at = libc::off_t::try_from(offset).ok()?;
        // SAFETY: lseek on a descriptor this device owns; it only moves
        // the buffered descriptor's position, which no request uses
        // (they are positional).
        let data = unsafe { libc::lseek(fd, at, libc::SEEK_DATA) };
        if data < 0 {
            // ENXIO: a hole up to the end of the file (or past it).
            let enxio = std::io::Error::last_os_error().raw_os_error() == Some(libc::ENXIO);
            return enxio.then_some((false, max));
        }
        if data > at {
            return Some((false, ((data - at) as u64).min(max)));
        }
        // SAFETY: as above.
        let hole = unsafe { libc::lseek(fd, at, libc::SEEK_HOLE) };
        if hole <= at {
            return None;
        }
        Some((true, ((hole - at) as u64).min(max)))
    }

    /// Which file this is, by device and inode (see [`FileId`]).
    pub fn file_id(&self) -> FileId {
        self.id
    }

    /// Hold QEMU's image locks for `req` on this file, replacing any held
    /// before, once no other open file description (of this process or
    /// another) holds one that conflicts. Refused, the device holds what it
    /// held before. Called before the device is handed to the engine, hence
    /// `&mut self`.
    pub fn lock(&mut self, req: LockRequest) -> Result<(), LockError> {
        lock::apply(&self.fds.file, &self.path, &mut self.held, req)
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    pub fn is_read_only(&self) -> bool {
        self.read_only
    }

    pub fn is_direct(&self) -> bool {
        self.fds.direct.is_some()
    }

    /// The pool this device runs on, to share with related files.
    pub fn pool(&self) -> &IoPool {
        &self.pool
    }

    fn check_writable(&self, op: IoOp, offset: u64) -> Result<(), DevError> {
        if self.read_only {
            return Err(DevError::Os {
                op,
                offset,
                errno: Some(libc::EBADF),
                message: format!("{} is open read-only", self.path.display()),
            });
        }
        Ok(())
    }

    async fn run<T: Send + 'static>(
        &self,
        op: IoOp,
        offset: u64,
        job: impl FnOnce(&Fds) -> T + Send + 'static,
    ) -> Result<T, DevError> {
        let fds = Arc::clone(&self.fds);
        self.pool
            .submit(move || job(&fds))
            .await
            .map_err(|Abandoned| DevError::Os {
                op,
                offset,
                errno: None,
                message: "the I/O worker thread died before answering".into(),
            })
    }
}

fn new_pool(opts: &FileOptions) -> Result<IoPool, FileOpenError> {
    if opts.threads == 0 {
        return Err(FileOpenError::Options("threads must be at least 1".into()));
    }
    IoPool::new(opts.threads).map_err(FileOpenError::Threads)
}

/// The current size of a file or block device (for which `metadata().len()`
/// is 0). Every request uses positional I/O, so moving the shared file
/// position is harmless; `Seek` is implemented for `&File`.
fn end_of_file(file: &File) -> io::Result<u64> {
    use std::io::{Seek, SeekFrom};
    let mut f = file;
    f.seek(SeekFrom::End(0))
}

/// Map an OS error to the device error the engine understands.
pub fn dev_error(op: IoOp, offset: u64, len: u64, e: io::Error) -> DevError {
    match e.raw_os_error() {
        Some(libc::EIO) => DevError::Io { op, offset, len },
        Some(libc::ENOSPC) => DevError::NoSpace { op, offset, len },
        errno => DevError::Os {
            op,
            offset,
            errno,
            message: e.to_string(),
        },
    }
}

/// A request whose end does not fit in a file offset.
fn range_error(op: IoOp, offset: u64, len: u64) -> DevError {
    DevError::Os {
        op,
        offset,
        errno: Some(libc::EINVAL),
        message: format!("range of {len} bytes at {offset} is beyond the largest file offset"),
    }
}

fn checked_end(op: IoOp, offset: u64, len: u64) -> Result<u64, DevError> {
    match offset.checked_add(len) {
        Some(end) if end <= i64::MAX as u64 => Ok(end),
        _ => Err(range_error(op, offset, len)),
    }
}

/// Read as much of `buf` as the file has; returns the bytes read, fewer than
/// `buf.len()` only at end of file. With `direct`, a short read is taken as
/// the end of file: retrying at the unaligned position it stopped at would
/// fail with EINVAL under O_DIRECT.
fn pread_full(file: &File, mut offset: u64, mut buf: &mut [u8], direct: bool) -> io::Result<usize> {
    let mut done = 0;
    while !buf.is_empty() {
        match file.read_at(buf, offset) {
            Ok(0) => break,
            Ok(n) => {
                done += n;
                offset += n as u64;
                buf = &mut buf[n..];
                if direct && !buf.is_empty() {
                    break;
                }
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(done)
}

/// Whether O_DIRECT can use `buf`'s memory as it is.
fn is_direct_aligned(buf: &[u8]) -> bool {
    (buf.as_ptr() as usize).is_multiple_of(DIRECT_ALIGN)
}

/// The blocking body of a write: `data` at `offset` through `file` (one of
/// `fds`), then with FUA the data synced.
fn write_at(fds: &Fds, file: &File, data: &[u8], offset: u64, flags: WriteFlags) -> io::Result<()> {
    file.write_all_at(data, offset)?;
    if flags.fua {
        fds.file.sync_data()?;
    }
    Ok(())
}

/// `fallocate(2)` on `file`; `Ok(false)` when the file system does not
/// support `mode`.
fn fallocate(file: &File, mode: libc::c_int, offset: u64, len: u64) -> io::Result<bool> {
    debug_assert!(len > 0);
    loop {
        // SAFETY: fallocate takes a descriptor and three integers and touches
        // no memory of ours. The descriptor is valid for the whole call
        // because `file` is borrowed (so not closed) until we return.
        // Offsets were checked to fit in i64 by `checked_end`.
        let rc = unsafe {
            libc::fallocate(
                file.as_raw_fd(),
                mode,
                offset as libc::off_t,
                len as libc::off_t,
            )
        };
        if rc == 0 {
            return Ok(true);
        }
        let e = io::Error::last_os_error();
        match e.raw_os_error() {
            Some(libc::EINTR) => continue,
            Some(libc::EOPNOTSUPP) | Some(libc::ENOSYS) => return Ok(false),
            _ => return Err(e),
        }
    }
}

/// The blocking body of `write_zeroes`.
fn zero_range(
    fds: &Fds,
    use_fallocate: bool,
    offset: u64,
    len: u64,
    flags: ZeroFlags,
) -> io::Result<Result<(), ()>> {
    let file = &fds.file;
    let end = offset + len;
    let mut done = false;
    if use_fallocate && flags.may_unmap {
        // Punching keeps the size; a range ending past the end of file is
        // punched up to it and the size then raised by writing the last
        // byte, which (unlike ftruncate) can never shrink a file that a
        // concurrent write has just extended further.
        let eof = end_of_file(file)?;
        let punch_end = end.min(eof);
        let punched = punch_end <= offset
            || fallocate(
                file,
                libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE,
                offset,
                punch_end - offset,
            )?;
        if punched {
            if end > eof {
                file.write_all_at(&[0], end - 1)?;
            }
            done = true;
        }
    }
    if use_fallocate && !done {
        done = fallocate(file, libc::FALLOC_FL_ZERO_RANGE, offset, len)?;
    }
    if !done {
        if flags.no_fallback {
            return Ok(Err(()));
        }
        let chunk = vec![0u8; (len as usize).min(ZERO_CHUNK)];
        let mut at = offset;
        while at < end {
            let n = (end - at).min(chunk.len() as u64) as usize;
            file.write_all_at(&chunk[..n], at)?;
            at += n as u64;
        }
    }
    if flags.fua {
        file.sync_data()?;
    }
    Ok(Ok(()))
}

impl BlockDev for FileDev {
    async fn read(&self, offset: u64, buf: &mut [u8]) -> Result<(), DevError> {
        let len = buf.len();
        if len == 0 {
            return Ok(());
        }
        checked_end(IoOp::Read, offset, len as u64)?;
        if let Some(_alone) = self.pool.alone().await {
            let (file, direct) = self.fds.for_range(offset, len);
            let read = if direct && !is_direct_aligned(buf) {
                let mut b = IoBuf::aligned_zeroed(len);
                pread_full(file, offset, b.as_mut_slice(), direct)
                    .map(|_| buf.copy_from_slice(b.as_slice()))
            } else {
                // Bytes past the end of the file read as zeroes.
                pread_full(file, offset, buf, direct).map(|n| buf[n..].fill(0))
            };
            return read.map_err(|e| dev_error(IoOp::Read, offset, len as u64, e));
        }
        let data = self
            .run(IoOp::Read, offset, move |fds| {
                let (file, direct) = fds.for_range(offset, len);
                // Bytes past the end of the file stay zero.
                let mut b = IoBuf::for_request(direct, len);
                pread_full(file, offset, b.as_mut_slice(), direct)?;
                Ok(b)
            })
            .await?
            .map_err(|e| dev_error(IoOp::Read, offset, len as u64, e))?;
        buf.copy_from_slice(data.as_slice());
        Ok(())
    }

    async fn write(&self, offset: u64, buf: &[u8], flags: WriteFlags) -> Result<(), DevError> {
        self.check_writable(IoOp::Write, offset)?;
        let len = buf.len();
        if len == 0 {
            return Ok(());
        }
        let end = checked_end(IoOp::Write, offset, len as u64)?;
        if let Some(_alone) = self.pool.alone().await {
            self.len.fetch_max(end, Ordering::Relaxed);
            let (file, direct) = self.fds.for_range(offset, len);
            let bounce = (direct && !is_direct_aligned(buf)).then(|| IoBuf::aligned_copy(buf));
            let data = bounce.as_ref().map_or(buf, IoBuf::as_slice);
            return write_at(&self.fds, file, data, offset, flags)
                .map_err(|e| dev_error(IoOp::Write, offset, len as u64, e));
        }
        let direct = self.fds.for_range(offset, len).1;
        let owned = if direct {
            IoBuf::aligned_copy(buf)
        } else {
            IoBuf::from_vec(buf.to_vec())
        };
        self.len.fetch_max(end, Ordering::Relaxed);
        self.run(IoOp::Write, offset, move |fds| {
            let (file, _) = fds.for_range(offset, len);
            write_at(fds, file, owned.as_slice(), offset, flags)
        })
        .await?
        .map_err(|e| dev_error(IoOp::Write, offset, len as u64, e))
    }

    async fn write_zeroes(&self, offset: u64, len: u64, flags: ZeroFlags) -> Result<(), DevError> {
        self.check_writable(IoOp::WriteZeroes, offset)?;
        if len == 0 {
            return Ok(());
        }
        let end = checked_end(IoOp::WriteZeroes, offset, len)?;
        let use_fallocate = self.fallocate;
        if !use_fallocate && flags.no_fallback {
            return Err(DevError::NotSupported {
                op: IoOp::WriteZeroes,
            });
        }
        let before = self.len.fetch_max(end, Ordering::Relaxed);
        let outcome = self
            .run(IoOp::WriteZeroes, offset, move |fds| {
                zero_range(fds, use_fallocate, offset, len, flags)
            })
            .await?
            .map_err(|e| dev_error(IoOp::WriteZeroes, offset, len, e))?;
        outcome.map_err(|()| {
            // Refused before doing anything: the length it claimed is not
            // the file's, unless another request has claimed more since.
            let _ = self
                .len
                .compare_exchange(end, before, Ordering::Relaxed, Ordering::Relaxed);
            DevError::NotSupported {
                op: IoOp::WriteZeroes,
            }
        })
    }

    async fn discard(&self, offset: u64, len: u64) -> Result<(), DevError> {
        self.check_writable(IoOp::Discard, offset)?;
        if len == 0 || !self.fallocate {
            return Ok(());
        }
        let end = checked_end(IoOp::Discard, offset, len)?;
        self.run(IoOp::Discard, offset, move |fds| {
            // Discard never changes the size: only the part inside the file
            // is punched, and a file system without hole punching simply
            // keeps the data, which the contract allows.
            let eof = end_of_file(&fds.file)?;
            let end = end.min(eof);
            if end > offset {
                fallocate(
                    &fds.file,
                    libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE,
                    offset,
                    end - offset,
                )?;
            }
            Ok(())
        })
        .await?
        .map_err(|e| dev_error(IoOp::Discard, offset, len, e))
    }

    async fn flush(&self) -> Result<(), DevError> {
        if self.read_only || self.char_device {
            return Ok(());
        }
        // One fdatasync covers both descriptors: they share the inode.
        self.run(IoOp::Flush, 0, |fds| fds.file.sync_data())
            .await?
            .map_err(|e| dev_error(IoOp::Flush, 0, 0, e))
    }

    fn len(&self) -> u64 {
        self.len.load(Ordering::Relaxed)
    }

    async fn truncate(&self, len: u64) -> Result<(), DevError> {
        self.check_writable(IoOp::Truncate, len)?;
        checked_end(IoOp::Truncate, len, 0)?;
        self.run(IoOp::Truncate, len, move |fds| fds.file.set_len(len))
            .await?
            .map_err(|e| dev_error(IoOp::Truncate, len, 0, e))?;
        // Only once the file has the length: a truncate that fails leaves
        // the file as it was, and so the cached length. (Extending requests
        // issued while a truncate runs are not ordered with it, on the file
        // either.)
        self.len.store(len, Ordering::Relaxed);
        Ok(())
    }
}
