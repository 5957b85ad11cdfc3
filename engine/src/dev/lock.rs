//! Image locking compatible with QEMU's file driver (QEMU's
//! `block/file-posix.c`, permission bits of `include/block/block-common.h`),
//! so that `qcsim`, `qemu-img` and `qemu-io` keep each other from writing an
//! image another one has open.
//!
//! The protocol, as QEMU 10.0 keeps it: every open file description holds
//! shared (read) OFD locks on single bytes of the file, never exclusive ones:
//!
//! - byte `100 + i` for each permission bit `i` it *uses*;
//! - byte `200 + i` for each permission bit `i` it does *not share* with
//!   other users.
//!
//! Permission bits: 0 consistent read, 1 write, 2 write unchanged,
//! 3 resize. Before it may go on, an opener asks (`F_OFD_GETLK` with an
//! exclusive lock type, which any other description's read lock conflicts
//! with) whether someone else holds byte `200 + i` for a bit it uses (then
//! someone does not share it) or byte `100 + i` for a bit it does not share
//! (then someone uses it). It takes its own locks *before* testing, so two
//! openers racing each other cannot both miss the other: at least one sees
//! the conflict.
//!
//! Locks belong to the open file description: they go when its last
//! descriptor closes, whether the process exits cleanly or not, and a
//! description never conflicts with itself.

use std::fmt;
use std::fs::File;
use std::io;
use std::os::unix::io::AsRawFd;

/// First byte of the "uses permission i" bytes.
pub const PERM_BASE: u64 = 100;
/// First byte of the "does not share permission i" bytes.
pub const SHARED_BASE: u64 = 200;

/// A set of QEMU block permissions (bits as QEMU numbers them).
#[derive(Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Perms(u8);

impl Perms {
    pub const NONE: Perms = Perms(0);
    /// Reads see consistent data (nobody changes it behind the reader's
    /// back in a way that breaks its format).
    pub const CONSISTENT_READ: Perms = Perms(0x01);
    pub const WRITE: Perms = Perms(0x02);
    /// Writes that do not change what a reader sees (copy-on-read).
    pub const WRITE_UNCHANGED: Perms = Perms(0x04);
    pub const RESIZE: Perms = Perms(0x08);
    /// Every permission QEMU 10.0 knows (an older QEMU had a fifth bit,
    /// 0x10, that no current version locks or tests).
    pub const ALL: Perms = Perms(0x0f);

    /// Number of permission bits, so of lock bytes per base.
    const BITS: u32 = 4;

    pub const fn union(self, other: Perms) -> Perms {
        Perms(self.0 | other.0)
    }

    pub const fn minus(self, other: Perms) -> Perms {
        Perms(self.0 & !other.0)
    }

    /// Every permission not in `self`.
    pub const fn complement(self) -> Perms {
        Perms(Perms::ALL.0 & !self.0)
    }

    pub const fn contains(self, other: Perms) -> bool {
        self.0 & other.0 == other.0
    }

    pub const fn bits(self) -> u8 {
        self.0
    }

    /// The single permissions in `self`, with their bit numbers.
    pub fn each(self) -> impl Iterator<Item = (u64, Perms)> {
        (0..Perms::BITS)
            .map(|i| (u64::from(i), Perms(1 << i)))
            .filter(move |(_, p)| self.contains(*p))
    }

    /// QEMU's name of a single permission, as its lock errors say it.
    pub fn name(self) -> &'static str {
        match self.0 {
            0x01 => "consistent read",
            0x02 => "write",
            0x04 => "write unchanged",
            0x08 => "resize",
            _ => "several permissions",
        }
    }
}

impl fmt::Debug for Perms {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let names: Vec<&str> = self.each().map(|(_, p)| p.name()).collect();
        write!(f, "Perms({:#04x} {names:?})", self.0)
    }
}

/// What one open of a file uses and lets others use.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LockRequest {
    pub perm: Perms,
    pub shared: Perms,
}

impl LockRequest {
    /// With `force_share` (qemu-io's and qemu-img's `-U`, read-only opens
    /// only) an opener shares everything, so it blocks nobody, and tests no
    /// one else's use; it still tests that nobody refuses readers.
    fn shared_or_all(shared: Perms, force_share: bool) -> Perms {
        if force_share {
            Perms::ALL
        } else {
            shared
        }
    }

    fn perm(read_only: bool, writes: Perms) -> Perms {
        if read_only {
            Perms::CONSISTENT_READ
        } else {
            Perms::CONSISTENT_READ.union(writes)
        }
    }

    /// The file of a qcow2 image (its metadata, and its data unless it has
    /// a data file), top image or backing file alike: a writer writes and
    /// resizes it; nobody shares writing or resizing, because other
    /// writers would corrupt the metadata under a reader too. What QEMU
    /// locks for a qcow2 node's file child.
    pub fn qcow2_file(read_only: bool, force_share: bool) -> LockRequest {
        LockRequest {
            perm: Self::perm(read_only, Perms::WRITE.union(Perms::RESIZE)),
            shared: Self::shared_or_all(
                Perms::CONSISTENT_READ.union(Perms::WRITE_UNCHANGED),
                force_share,
            ),
        }
    }

    /// The external data file of a qcow2 image: as the image file, except
    /// that others may write it (guest data only; the format does not rely
    /// on it), but not resize it.
    pub fn data_file(read_only: bool, force_share: bool) -> LockRequest {
        LockRequest {
            perm: Self::perm(read_only, Perms::WRITE.union(Perms::RESIZE)),
            shared: Self::shared_or_all(Perms::ALL.minus(Perms::RESIZE), force_share),
        }
    }

    /// A raw image (top image or backing file): it writes but never
    /// resizes, and shares everything, as QEMU's raw format node does.
    pub fn raw_file(read_only: bool) -> LockRequest {
        LockRequest {
            perm: Self::perm(read_only, Perms::WRITE),
            shared: Perms::ALL,
        }
    }

    /// Creating (emptying) a file: QEMU's create takes write and resize,
    /// and does not share resizing, before it truncates, so it never
    /// empties a file another process has open for writing or reading.
    pub fn create() -> LockRequest {
        LockRequest {
            perm: Perms::WRITE.union(Perms::RESIZE),
            shared: Perms::ALL.minus(Perms::RESIZE),
        }
    }
}

/// Why locks could not be taken.
#[derive(Debug, thiserror::Error)]
pub enum LockError {
    /// Another open file description holds a lock this open conflicts
    /// with: `shared` says which kind, as QEMU's messages do: not shared,
    /// someone uses `perm` that this open will not share; otherwise,
    /// someone refuses to share `perm`, which this open uses.
    #[error(
        "failed to get {}\"{}\" lock on {path}: is another process using the image?",
        if *.shared { "shared " } else { "" },
        .perm.name()
    )]
    Conflict {
        path: std::path::PathBuf,
        perm: Perms,
        shared: bool,
    },
    #[error("{path}: cannot {action} byte {byte}: {error}")]
    Os {
        path: std::path::PathBuf,
        action: &'static str,
        byte: u64,
        error: io::Error,
    },
}

/// The bytes one open file description holds, so that changing what it
/// holds touches only the difference.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Held {
    perm: Perms,
    unshared: Perms,
}

/// What a lock syscall found.
enum Probe {
    Free,
    Taken,
}

/// `fcntl` with an OFD lock command on one byte of `file`.
fn ofd(file: &File, cmd: libc::c_int, ty: libc::c_int, byte: u64) -> io::Result<Probe> {
    // SAFETY: an all-zero `flock` is a valid value of this plain C struct
    // (integers only); the fields that matter are set below. `l_pid` must
    // stay 0 for OFD commands.
    let mut fl: libc::flock = unsafe { std::mem::zeroed() };
    // The lock types and SEEK_SET are small constants (0 to 3 on every
    // Linux architecture) that fit `c_short`; `byte` is below 300.
    fl.l_type = ty as libc::c_short;
    fl.l_whence = libc::SEEK_SET as libc::c_short;
    fl.l_start = byte as libc::off_t;
    fl.l_len = 1;
    loop {
        // SAFETY: F_OFD_SETLK and F_OFD_GETLK take a pointer to a `flock`,
        // which `fl` is; it lives on our stack for the whole call, and the
        // kernel writes at most one `flock` through it (GETLK). The
        // descriptor stays open because `file` is borrowed until we return.
        let rc = unsafe { libc::fcntl(file.as_raw_fd(), cmd, &mut fl as *mut libc::flock) };
        if rc != -1 {
            break;
        }
        let e = io::Error::last_os_error();
        match e.raw_os_error() {
            Some(libc::EINTR) => continue,
            // SETLK's answer when another description holds a conflicting
            // lock.
            Some(libc::EAGAIN) | Some(libc::EACCES) => return Ok(Probe::Taken),
            _ => return Err(e),
        }
    }
    if cmd == libc::F_OFD_GETLK && fl.l_type != libc::F_UNLCK as libc::c_short {
        return Ok(Probe::Taken);
    }
    Ok(Probe::Free)
}

/// Whether this kernel has OFD locks at all (Linux 3.15 and later): the
/// kernel rejects an unknown command with EINVAL. Asked on `file` itself,
/// so that no other descriptor is opened or closed (closing any descriptor
/// of a file drops the process's classic POSIX locks on it).
fn has_ofd_locks(file: &File) -> bool {
    match ofd(file, libc::F_OFD_GETLK, libc::F_WRLCK, PERM_BASE) {
        Ok(_) => true,
        Err(e) => e.raw_os_error() != Some(libc::EINVAL),
    }
}

/// Make `file`'s description hold exactly the locks of `req`, after making
/// sure no other description holds a lock `req` conflicts with. On an
/// error the description holds what it held before. Without OFD locks in
/// the kernel this does nothing, as QEMU's default (`locking=auto`) does.
pub fn apply(
    file: &File,
    path: &std::path::Path,
    held: &mut Held,
    req: LockRequest,
) -> Result<(), LockError> {
    if !has_ofd_locks(file) {
        return Ok(());
    }
    let before = *held;
    let want = Held {
        perm: req.perm,
        unshared: req.shared.complement(),
    };
    let os = |action, byte, error| LockError::Os {
        path: path.to_owned(),
        action,
        byte,
        error,
    };
    // 1. Take the new bytes (keeping the old ones until the test passed,
    //    so that a refused change leaves others' view as it was).
    let take = Held {
        perm: want.perm.union(before.perm),
        unshared: want.unshared.union(before.unshared),
    };
    if let Err(e) = set(file, held, take) {
        let _ = set(file, held, before);
        let (action, byte, error) = e;
        return Err(os(action, byte, error));
    }
    // 2. Test what others hold.
    let conflict = test(file, req).map_err(|(byte, error)| os("test", byte, error));
    match conflict {
        Ok(None) => {}
        Ok(Some((perm, shared))) => {
            let _ = set(file, held, before);
            return Err(LockError::Conflict {
                path: path.to_owned(),
                perm,
                shared,
            });
        }
        Err(e) => {
            let _ = set(file, held, before);
            return Err(e);
        }
    }
    // 3. Drop the bytes no longer wanted. Unlocking cannot conflict; an
    //    error here would leave a byte locked that blocks others more than
    //    needed, never less, so it is reported but the state is kept.
    set(file, held, want).map_err(|(action, byte, error)| os(action, byte, error))
}

/// Lock or unlock bytes so that `held` becomes `target`, updating `held`
/// byte by byte so it stays true if a syscall fails midway.
fn set(file: &File, held: &mut Held, target: Held) -> Result<(), (&'static str, u64, io::Error)> {
    for (base, have, want) in [
        (PERM_BASE, &mut held.perm, target.perm),
        (SHARED_BASE, &mut held.unshared, target.unshared),
    ] {
        for (i, p) in Perms::ALL.each() {
            let byte = base + i;
            match (have.contains(p), want.contains(p)) {
                (false, true) => match ofd(file, libc::F_OFD_SETLK, libc::F_RDLCK, byte) {
                    Ok(Probe::Free) => *have = have.union(p),
                    // Only an exclusive lock blocks a shared one, and
                    // nobody following this protocol takes one; report it
                    // as the OS error it is.
                    Ok(Probe::Taken) => {
                        return Err(("lock", byte, io::Error::from_raw_os_error(libc::EAGAIN)))
                    }
                    Err(e) => return Err(("lock", byte, e)),
                },
                (true, false) => match ofd(file, libc::F_OFD_SETLK, libc::F_UNLCK, byte) {
                    Ok(_) => *have = have.minus(p),
                    Err(e) => return Err(("unlock", byte, e)),
                },
                _ => {}
            }
        }
    }
    Ok(())
}

/// The first conflict with another description: `(perm, false)` when
/// someone does not share `perm`, which `req` uses; `(perm, true)` when
/// someone uses `perm`, which `req` does not share.
fn test(file: &File, req: LockRequest) -> Result<Option<(Perms, bool)>, (u64, io::Error)> {
    for (i, p) in req.perm.each() {
        let byte = SHARED_BASE + i;
        match ofd(file, libc::F_OFD_GETLK, libc::F_WRLCK, byte) {
            Ok(Probe::Taken) => return Ok(Some((p, false))),
            Ok(Probe::Free) => {}
            Err(e) => return Err((byte, e)),
        }
    }
    for (i, p) in req.shared.complement().each() {
        let byte = PERM_BASE + i;
        match ofd(file, libc::F_OFD_GETLK, libc::F_WRLCK, byte) {
            Ok(Probe::Taken) => return Ok(Some((p, true))),
            Ok(Probe::Free) => {}
            Err(e) => return Err((byte, e)),
        }
    }
    Ok(None)
}
