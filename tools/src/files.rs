//! Opening image files on the real file system for the command line: format
//! probing, the engine on a [`FileDev`], and the backing chain resolved the
//! way QEMU resolves it (a relative backing name is relative to the directory
//! of the image that names it), every backing file opened read-only.
//!
//! A chain is opened in two passes, so that nothing is written to any of
//! its files before every file is known to be safe to use:
//!
//! 1. Files, top image first: each image file, then its backing file named
//!    in its header, down to the bottom, then each image's external data
//!    file. Every file is identified by the device and inode of the opened
//!    descriptor ([`FileId`]); one that is already open in the chain (the
//!    image itself, or any file before it, whatever symlink, hard link or
//!    path spelling led there) is refused, naming the field that led to it,
//!    before it is locked or read. Each file then takes QEMU's image locks
//!    for its role ([`LockRequest`]), so that no other process (QEMU's tools
//!    or another `qcsim`) writes it under us and none of them is written
//!    while another has it open.
//! 2. Engines, bottom image first, each read-only but the top one; only the
//!    top's open may write (clearing autoclear bits, rebuilding refcounts),
//!    and only after all of the above.
//!
//! A long chain costs no recursion; its depth is bounded. All files of one
//! chain share one [`IoPool`].

use std::fmt;
use std::path::{Path, PathBuf};
use std::str::FromStr;

use engine::dev::{
    BlockDev, DevError, FileDev, FileId, FileOpenError, FileOptions, IoPool, LockError,
    LockRequest, WriteFlags, ZeroFlags,
};
use engine::format::header::Header;
use engine::{Backing, EngineOptions, Image};

/// The qcow2 magic, "QFI\xfb".
pub const QCOW2_MAGIC: [u8; 4] = *b"QFI\xfb";

/// Deepest backing chain opened (the top image not counted).
pub const MAX_CHAIN_DEPTH: usize = 64;

/// Worker threads of the pool one opened chain shares.
pub const DEFAULT_IO_THREADS: usize = 8;

/// Image formats the command line reads and writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Format {
    Raw,
    Qcow2,
}

impl Format {
    pub fn name(self) -> &'static str {
        match self {
            Format::Raw => "raw",
            Format::Qcow2 => "qcow2",
        }
    }
}

impl fmt::Display for Format {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A format name that is not `raw` or `qcow2`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown or unsupported image format '{0}' (supported: raw, qcow2)")]
pub struct UnknownFormat(pub String);

impl FromStr for Format {
    type Err = UnknownFormat;

    fn from_str(s: &str) -> Result<Format, UnknownFormat> {
        match s {
            "raw" => Ok(Format::Raw),
            "qcow2" => Ok(Format::Qcow2),
            other => Err(UnknownFormat(other.to_owned())),
        }
    }
}

/// Why an image (or a file of its backing chain) could not be opened.
#[derive(Debug, thiserror::Error)]
pub enum OpenError {
    #[error(transparent)]
    File(#[from] FileOpenError),
    #[error("{path}: {error}")]
    Probe { path: PathBuf, error: DevError },
    #[error("{path}: {format} images are not supported (only raw and qcow2)")]
    ForeignFormat { path: PathBuf, format: &'static str },
    #[error("{path}: {error}")]
    Format { path: PathBuf, error: UnknownFormat },
    #[error("{path}: {error}")]
    Engine { path: PathBuf, error: engine::Error },
    #[error("{image}: cannot open backing file '{name}': {error}")]
    Backing {
        image: PathBuf,
        name: String,
        error: Box<OpenError>,
    },
    #[error("{image}: backing file '{name}' is unusable: {reason}")]
    BackingName {
        image: PathBuf,
        name: String,
        reason: String,
    },
    #[error("{image}: cannot open data file '{name}': {error}")]
    DataFile {
        image: PathBuf,
        name: String,
        error: Box<OpenError>,
    },
    #[error("{image}: the image needs an external data file but its header names none")]
    DataFileUnnamed { image: PathBuf },
    /// A backing file or data file that is a file the chain has already
    /// opened: writing through both names would destroy it (a data file
    /// that is the image puts guest data over its header).
    #[error("{image}: {field} '{name}' is the same file as {first}, already open in this chain{}", .field.consequence())]
    AlreadyOpen {
        image: PathBuf,
        field: Field,
        name: String,
        first: FirstOpen,
    },
    #[error("{path}: force-share (-U) is only for read-only opens (-r)")]
    ForceShareWritable { path: PathBuf },
    #[error(transparent)]
    Lock(#[from] LockError),
    #[error("{image}: backing chain deeper than {limit} files")]
    TooDeep { image: PathBuf, limit: usize },
    #[error("cannot start I/O threads: {0}")]
    Threads(std::io::Error),
    /// The name led to another file the second time it was opened (it was
    /// renamed or replaced in between), so the locks held are not on the
    /// file read.
    #[error("{path}: the file was replaced while it was being opened")]
    Replaced { path: PathBuf },
}

/// How to open an image for the command line.
#[derive(Debug, Clone)]
pub struct OpenOptions {
    /// The format; probed from the magic when `None`.
    pub format: Option<Format>,
    /// Open the top image read-only (backing files always are).
    pub read_only: bool,
    /// O_DIRECT on every file of the chain.
    pub direct: bool,
    /// Open the backing chain; off, a qcow2 image is opened alone, which is
    /// enough to describe it (as `qemu-img info` does).
    pub backing: bool,
    /// Engine options for the top image; backing images get the same with
    /// `read_only` set.
    pub engine: EngineOptions,
    /// Worker threads shared by the files of the chain.
    pub threads: usize,
    /// qemu-img's `-U`: share every permission with other users, so the
    /// open neither blocks nor is blocked by their writers (read-only opens
    /// only).
    pub force_share: bool,
    /// Accept a character device as the top image's file (QEMU's
    /// `host_device` driver on `/dev/null`, say), read raw.
    pub char_device: bool,
    /// Take QEMU's image locks on the top image's file (`locking=off`
    /// clears it; the other files of the chain are locked as ever).
    pub locking: bool,
    /// The format of the top image's backing file, over what its header
    /// names (QEMU's `backing.driver` option).
    pub backing_format: Option<Format>,
}

impl Default for OpenOptions {
    fn default() -> Self {
        OpenOptions {
            format: None,
            read_only: false,
            direct: false,
            backing: true,
            // Clusters placed as QEMU places them: outputs that show host
            // offsets (map, check) then match QEMU's.
            engine: EngineOptions {
                l2_before_data: true,
                ..EngineOptions::default()
            },
            threads: DEFAULT_IO_THREADS,
            force_share: false,
            char_device: false,
            locking: true,
            backing_format: None,
        }
    }
}

/// The field of an image's header that names another file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Field {
    BackingFile,
    DataFile,
}

impl Field {
    /// What a repeated file means for this field, for the error.
    fn consequence(self) -> &'static str {
        match self {
            Field::BackingFile => ": the backing chain loops",
            Field::DataFile => ": a data file must be a file of its own",
        }
    }
}

impl fmt::Display for Field {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Field::BackingFile => "backing file",
            Field::DataFile => "data file",
        })
    }
}

/// A file of the chain being opened, as it was first opened.
#[derive(Debug, Clone)]
pub struct FirstOpen {
    pub path: PathBuf,
    pub role: Role,
}

/// What a file is to the chain.
#[derive(Debug, Clone)]
pub enum Role {
    /// The image opened.
    Image,
    /// The backing file of the image at `of`.
    Backing { of: PathBuf },
    /// The external data file of the image at `of`.
    Data { of: PathBuf },
}

impl fmt::Display for FirstOpen {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let path = self.path.display();
        match &self.role {
            Role::Image => write!(f, "{path} (the image)"),
            Role::Backing { of } => write!(f, "{path} (the backing file of {})", of.display()),
            Role::Data { of } => write!(f, "{path} (the data file of {})", of.display()),
        }
    }
}

/// An opened image: the engine on a qcow2 file, or a raw file as it is.
pub enum Disk {
    Raw(FileDev),
    Qcow2(Box<Image<FileDev>>),
}

impl Disk {
    pub fn format(&self) -> Format {
        match self {
            Disk::Raw(_) => Format::Raw,
            Disk::Qcow2(_) => Format::Qcow2,
        }
    }

    /// The guest-visible size: the file length for raw.
    pub fn virtual_size(&self) -> u64 {
        match self {
            Disk::Raw(d) => d.len(),
            Disk::Qcow2(i) => i.virtual_size(),
        }
    }

    /// The qcow2 image, if this is one.
    pub fn qcow2(&self) -> Option<&Image<FileDev>> {
        match self {
            Disk::Raw(_) => None,
            Disk::Qcow2(i) => Some(i),
        }
    }

    /// The file the top image lives in.
    pub fn device(&self) -> &FileDev {
        match self {
            Disk::Raw(d) => d,
            Disk::Qcow2(i) => i.device(),
        }
    }

    /// A raw image is a disk of fixed size, like a qcow2 one: requests past
    /// its end are errors, not extensions.
    fn check_raw_range(dev: &FileDev, offset: u64, len: u64) -> engine::Result<()> {
        let size = dev.len();
        match offset.checked_add(len) {
            Some(end) if end <= size => Ok(()),
            _ => Err(engine::Error::OutOfRange { offset, len, size }),
        }
    }

    pub async fn read(&self, offset: u64, buf: &mut [u8]) -> engine::Result<()> {
        match self {
            Disk::Raw(d) => {
                Self::check_raw_range(d, offset, buf.len() as u64)?;
                Ok(d.read(offset, buf).await?)
            }
            Disk::Qcow2(i) => i.read(offset, buf).await,
        }
    }

    pub async fn write(&self, offset: u64, buf: &[u8]) -> engine::Result<()> {
        self.write_flagged(offset, buf, false).await
    }

    /// [`Disk::write`], with `fua` (force unit access) durable when it
    /// returns: for qcow2 the engine's FUA write (the data and whatever
    /// metadata reads it back), not a flush of everything; for raw a
    /// device write flagged FUA, which the file device carries out as the
    /// write then an fdatasync of the file.
    pub async fn write_flagged(&self, offset: u64, buf: &[u8], fua: bool) -> engine::Result<()> {
        match self {
            Disk::Raw(d) => {
                Self::check_raw_range(d, offset, buf.len() as u64)?;
                Ok(d.write(offset, buf, WriteFlags { fua }).await?)
            }
            Disk::Qcow2(i) if fua => i.write_fua(offset, buf).await,
            Disk::Qcow2(i) => i.write(offset, buf).await,
        }
    }

    /// Read from the VM state area (`qemu-io read -b`): a qcow2 image's;
    /// a raw image has none, as QEMU's raw driver has none.
    pub async fn read_vmstate(&self, pos: u64, buf: &mut [u8]) -> engine::Result<()> {
        match self {
            Disk::Raw(_) => Err(engine::Error::Unsupported("VM state in a raw image".into())),
            Disk::Qcow2(i) => i.read_vmstate(pos, buf).await,
        }
    }

    /// Write to the VM state area (`qemu-io write -b`).
    pub async fn write_vmstate(&self, pos: u64, buf: &[u8]) -> engine::Result<()> {
        match self {
            Disk::Raw(_) => Err(engine::Error::Unsupported("VM state in a raw image".into())),
            Disk::Qcow2(i) => i.write_vmstate(pos, buf).await,
        }
    }

    /// A compressed write (`qemu-io write -c`): whole clusters of a qcow2
    /// image; a raw image has no compressed clusters and refuses it, as
    /// QEMU's raw driver does.
    pub async fn write_compressed(&self, offset: u64, buf: &[u8]) -> engine::Result<()> {
        match self {
            Disk::Raw(_) => Err(engine::CompressedWriteError::Format.into()),
            Disk::Qcow2(i) => i.write_compressed(offset, buf).await,
        }
    }

    pub async fn write_zeroes(&self, offset: u64, len: u64, unmap: bool) -> engine::Result<()> {
        self.zeroes_flagged(offset, len, unmap, false).await
    }

    /// [`Disk::write_zeroes`], with `fua` durable when it returns: the
    /// engine's FUA zeroing for qcow2, a zeroing flagged FUA (the file
    /// synced after it) for raw.
    pub async fn zeroes_flagged(
        &self,
        offset: u64,
        len: u64,
        unmap: bool,
        fua: bool,
    ) -> engine::Result<()> {
        match self {
            Disk::Raw(d) => {
                Self::check_raw_range(d, offset, len)?;
                let flags = ZeroFlags {
                    may_unmap: unmap,
                    fua,
                    ..ZeroFlags::default()
                };
                Ok(d.write_zeroes(offset, len, flags).await?)
            }
            Disk::Qcow2(i) if fua => i.write_zeroes_fua(offset, len, unmap).await,
            Disk::Qcow2(i) => i.write_zeroes(offset, len, unmap).await,
        }
    }

    pub async fn discard(&self, offset: u64, len: u64) -> engine::Result<()> {
        self.discard_flagged(offset, len, false).await
    }

    /// [`Disk::discard`], with `fua` durable when it returns: the
    /// engine's FUA discard for qcow2; a device discard carries no FUA
    /// flag, so a raw file's is followed by a flush (more durable than
    /// asked, never less). A declined discard changed nothing and has
    /// nothing to make durable.
    pub async fn discard_flagged(&self, offset: u64, len: u64, fua: bool) -> engine::Result<()> {
        match self {
            Disk::Raw(d) => {
                Self::check_raw_range(d, offset, len)?;
                d.discard(offset, len).await?;
                if fua {
                    d.flush().await?;
                }
                Ok(())
            }
            Disk::Qcow2(i) if Self::discard_declined(i, offset, len) => Ok(()),
            Disk::Qcow2(i) if fua => i.discard_fua(offset, len).await,
            Disk::Qcow2(i) => i.discard(offset, len).await,
        }
    }

    /// QEMU's qcow2 driver declines a discard on a version 2 image with a
    /// backing file (with no zero flag, the clusters could only show the
    /// backing data), and its block layer reports the discard done:
    /// nothing changes (iotest 290). A range past the end is not declined
    /// but refused, by the engine.
    fn discard_declined(i: &Image<FileDev>, offset: u64, len: u64) -> bool {
        i.header().version < 3
            && i.backing().is_some()
            && offset
                .checked_add(len)
                .is_some_and(|end| end <= i.virtual_size())
    }

    pub async fn flush(&self) -> engine::Result<()> {
        match self {
            Disk::Raw(d) => Ok(d.flush().await?),
            Disk::Qcow2(i) => i.flush().await,
        }
    }

    /// Clean close: for qcow2, flush and clear the dirty bit; for a writable
    /// raw file, flush.
    pub async fn close(self) -> engine::Result<()> {
        match self {
            Disk::Raw(d) => Ok(d.flush().await?),
            Disk::Qcow2(i) => i.close().await.map(drop),
        }
    }
}

/// What the first bytes of a file say it is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Probed {
    Format(Format),
    /// A format QEMU knows and this tool does not read; named for the error.
    Foreign(&'static str),
}

/// Identify an image by its magic. Anything without a known magic is raw,
/// as QEMU probes.
pub fn probe_bytes(head: &[u8]) -> Probed {
    const FOREIGN: [(&[u8], &str); 5] = [
        (b"QED\0", "qed"),
        (b"KDMV", "vmdk"),
        (b"vhdxfile", "vhdx"),
        (b"LUKS\xba\xbe", "luks"),
        (b"conectix", "vpc"),
    ];
    if head.starts_with(&QCOW2_MAGIC) {
        return Probed::Format(Format::Qcow2);
    }
    for (magic, name) in FOREIGN {
        if head.starts_with(magic) {
            return Probed::Foreign(name);
        }
    }
    Probed::Format(Format::Raw)
}

async fn probe_dev(dev: &FileDev) -> Result<Probed, OpenError> {
    let mut head = [0u8; 8];
    dev.read(0, &mut head)
        .await
        .map_err(|error| OpenError::Probe {
            path: dev.path().to_owned(),
            error,
        })?;
    Ok(probe_bytes(&head))
}

/// The path a backing name stored in `image` refers to: absolute names as
/// they are, relative ones from the directory of `image` as it was named
/// (not canonicalised, as QEMU does).
pub fn resolve_backing_path(image: &Path, name: &str) -> PathBuf {
    let name = Path::new(name);
    if name.is_absolute() {
        return name.to_owned();
    }
    match image.parent() {
        Some(dir) if !dir.as_os_str().is_empty() => dir.join(name),
        _ => name.to_owned(),
    }
}

/// The path an external data file name stored in an image refers to. QEMU
/// opens a relative data file name as it is, from the working directory
/// (unlike a backing file name, which is relative to the image), and so
/// does this tool, so that both open the same file.
pub fn resolve_data_file_path(name: &str) -> PathBuf {
    PathBuf::from(name)
}

/// The files of one chain opened so far, by identity, and how to open more.
struct Chain {
    pool: IoPool,
    direct: bool,
    force_share: bool,
    /// The top image's file may be a character device.
    char_device: bool,
    /// `OpenOptions::backing_format`.
    backing_format: Option<Format>,
    open: Vec<(FileId, FirstOpen)>,
}

/// The field of an image that names a file being opened.
struct Reference<'a> {
    image: &'a Path,
    field: Field,
    name: &'a str,
}

impl Chain {
    fn files(&self) -> Vec<ChainFile> {
        self.open
            .iter()
            .map(|(id, first)| ChainFile {
                id: *id,
                first: first.clone(),
            })
            .collect()
    }

    /// Open `path`, refusing a file the chain already has open. Neither
    /// locked nor read yet: a repeated file must be refused before its
    /// locks (which would conflict with the chain's own, and say so in
    /// terms of another process) or anything else.
    fn open_file(
        &mut self,
        path: &Path,
        read_only: bool,
        reference: Option<Reference<'_>>,
        role: Role,
    ) -> Result<FileDev, OpenError> {
        let file_opts = FileOptions {
            read_only,
            direct: self.direct,
            threads: self.pool.threads(),
            fallocate: true,
            // Only the top image has no reference.
            char_device: self.char_device && reference.is_none(),
        };
        let dev = FileDev::open_in(path, &file_opts, self.pool.clone())?;
        let id = dev.file_id();
        // Only the top image has no reference, and it is opened first.
        let first = self.open.iter().find(|(seen, _)| *seen == id);
        if let (Some((_, first)), Some(r)) = (first, reference) {
            return Err(OpenError::AlreadyOpen {
                image: r.image.to_owned(),
                field: r.field,
                name: r.name.to_owned(),
                first: first.clone(),
            });
        }
        self.open.push((
            id,
            FirstOpen {
                path: path.to_owned(),
                role,
            },
        ));
        Ok(dev)
    }
}

/// The format of the file on `dev`: `format` if given, else probed.
async fn format_of(dev: &FileDev, format: Option<Format>) -> Result<Format, OpenError> {
    match format {
        Some(f) => Ok(f),
        None => match probe_dev(dev).await? {
            Probed::Format(f) => Ok(f),
            Probed::Foreign(name) => Err(OpenError::ForeignFormat {
                path: dev.path().to_owned(),
                format: name,
            }),
        },
    }
}

async fn header_of(dev: &FileDev) -> Result<Header, OpenError> {
    Image::read_header(dev)
        .await
        .map_err(|error| OpenError::Engine {
            path: dev.path().to_owned(),
            error,
        })
}

/// A qcow2 image of the chain whose files are open and locked, and whose
/// engine is not open yet.
struct Level {
    path: PathBuf,
    dev: FileDev,
    header: Header,
    read_only: bool,
    data: Option<FileDev>,
    /// For a backing file: the image that names it, and the name.
    named_by: Option<(PathBuf, String)>,
}

/// Pass 1 below the top image: open, check and lock each backing file
/// down to the bottom, pushing a [`Level`] for each qcow2 one; the raw
/// file at the bottom, if the chain ends in one, is returned.
async fn open_backing_files(
    chain: &mut Chain,
    levels: &mut Vec<Level>,
    path: &Path,
) -> Result<Option<FileDev>, OpenError> {
    let fs = chain.force_share;
    loop {
        let Some(current) = levels.last() else {
            return Ok(None);
        };
        let Some(name) = current.header.backing_file.clone() else {
            return Ok(None);
        };
        let current_path = current.path.clone();
        let fmt_name = current.header.backing_format();
        if levels.len() > MAX_CHAIN_DEPTH {
            return Err(OpenError::TooDeep {
                image: path.to_owned(),
                limit: MAX_CHAIN_DEPTH,
            });
        }
        let backing_err = |error: OpenError| OpenError::Backing {
            image: current_path.clone(),
            name: name.clone(),
            error: Box::new(error),
        };
        if name.is_empty() || name.starts_with("json:") {
            return Err(OpenError::BackingName {
                image: current_path.clone(),
                name: name.clone(),
                reason: "only plain file names are supported".into(),
            });
        }
        let format = match (fmt_name, chain.backing_format) {
            // The option names the top image's backing file only.
            (_, Some(f)) if levels.len() == 1 => Some(f),
            (Some(f), _) => Some(f.parse::<Format>().map_err(|error| {
                backing_err(OpenError::Format {
                    path: current_path.clone(),
                    error,
                })
            })?),
            (None, _) => None,
        };
        let backing_path = resolve_backing_path(&current_path, &name);
        let reference = Reference {
            image: &current_path,
            field: Field::BackingFile,
            name: &name,
        };
        let role = Role::Backing {
            of: current_path.clone(),
        };
        let mut dev = match chain.open_file(&backing_path, true, Some(reference), role) {
            Ok(dev) => dev,
            Err(e @ OpenError::AlreadyOpen { .. }) => return Err(e),
            Err(e) => return Err(backing_err(e)),
        };
        // Backing files are opened read-only and take QEMU's read-only
        // locks: they keep writers out unless this open shares writing.
        match format_of(&dev, format).await.map_err(backing_err)? {
            Format::Raw => {
                dev.lock(LockRequest::raw_file(true))
                    .map_err(|e| backing_err(e.into()))?;
                return Ok(Some(dev));
            }
            Format::Qcow2 => {
                dev.lock(LockRequest::qcow2_file(true, fs))
                    .map_err(|e| backing_err(e.into()))?;
                let header = header_of(&dev).await.map_err(backing_err)?;
                levels.push(Level {
                    path: backing_path,
                    dev,
                    header,
                    read_only: true,
                    data: None,
                    named_by: Some((current_path, name)),
                });
            }
        }
    }
}

/// A file an opened chain holds: which file it is and why it was opened.
#[derive(Debug, Clone)]
pub struct ChainFile {
    pub id: FileId,
    pub first: FirstOpen,
}

/// Open the image at `path` and, if asked, its whole backing chain.
pub async fn open_image(path: &Path, opts: &OpenOptions) -> Result<Disk, OpenError> {
    open_image_with_files(path, opts)
        .await
        .map(|(disk, _)| disk)
}

/// [`open_image`], and every file the chain opened (image, backing files,
/// data files), so that a caller about to write another file can tell
/// whether it is one of them, whatever name leads to it.
pub async fn open_image_with_files(
    path: &Path,
    opts: &OpenOptions,
) -> Result<(Disk, Vec<ChainFile>), OpenError> {
    if opts.force_share && !opts.read_only {
        return Err(OpenError::ForceShareWritable {
            path: path.to_owned(),
        });
    }
    let pool = IoPool::new(opts.threads.max(1)).map_err(OpenError::Threads)?;
    let mut chain = Chain {
        pool,
        direct: opts.direct,
        force_share: opts.force_share,
        char_device: opts.char_device,
        backing_format: opts.backing_format,
        open: Vec::new(),
    };
    let fs = chain.force_share;

    // Pass 1: every file, checked and locked; nothing written.
    let mut top = chain.open_file(path, opts.read_only, None, Role::Image)?;
    match format_of(&top, opts.format).await? {
        Format::Raw => {
            if opts.locking {
                top.lock(LockRequest::raw_file(opts.read_only))?;
            }
            return Ok((Disk::Raw(top), chain.files()));
        }
        Format::Qcow2 if opts.locking => top.lock(LockRequest::qcow2_file(opts.read_only, fs))?,
        Format::Qcow2 => {}
    }
    let header = header_of(&top).await?;
    let mut levels = vec![Level {
        path: path.to_owned(),
        dev: top,
        header,
        read_only: opts.read_only,
        data: None,
        named_by: None,
    }];
    let bottom_raw = if opts.backing {
        open_backing_files(&mut chain, &mut levels, path).await?
    } else {
        None
    };
    // Data files come after every image file, so that one naming a file of
    // the chain is refused as the data file it is.
    open_data_files(&mut chain, &mut levels, opts)?;
    let image = open_engines(levels, bottom_raw, &opts.engine).await?;
    Ok((Disk::Qcow2(Box::new(image)), chain.files()))
}

/// Open and lock the data file of each level that has one. An open that
/// only describes the image (as `info` does) leaves out a data file it
/// cannot use, as qemu-img info does; guest reads of that image then fail
/// naming it.
fn open_data_files(
    chain: &mut Chain,
    levels: &mut [Level],
    opts: &OpenOptions,
) -> Result<(), OpenError> {
    let fs = chain.force_share;
    for level in levels.iter_mut() {
        if !level.header.has_data_file() {
            continue;
        }
        let Some(name) = level.header.data_file() else {
            return Err(OpenError::DataFileUnnamed {
                image: level.path.clone(),
            });
        };
        let describe_only = !opts.backing && level.read_only;
        let reference = Reference {
            image: &level.path,
            field: Field::DataFile,
            name: &name,
        };
        let role = Role::Data {
            of: level.path.clone(),
        };
        let data_path = resolve_data_file_path(&name);
        let opened = chain
            .open_file(&data_path, level.read_only, Some(reference), role)
            .and_then(|mut dev| {
                dev.lock(LockRequest::data_file(level.read_only, fs))?;
                Ok(dev)
            });
        match opened {
            Ok(dev) => level.data = Some(dev),
            Err(_) if describe_only => {}
            Err(e @ OpenError::AlreadyOpen { .. }) => return Err(e),
            Err(error) => {
                return Err(OpenError::DataFile {
                    image: level.path.clone(),
                    name,
                    error: Box::new(error),
                })
            }
        }
    }
    Ok(())
}

/// Pass 2: the engines of `levels` (top first), bottom-up, each given the
/// one below as its backing (the lowest `bottom_raw`, a raw file, when
/// the chain ends in one); only the top one may write.
async fn open_engines(
    mut levels: Vec<Level>,
    bottom_raw: Option<FileDev>,
    engine: &EngineOptions,
) -> Result<Image<FileDev>, OpenError> {
    let top = levels.remove(0);
    let mut lower = bottom_raw.map(Backing::Raw);
    while let Some(level) = levels.pop() {
        let named_by = level.named_by.clone();
        let mut image = open_engine(level, engine)
            .await
            .map_err(|error| match named_by {
                Some((image, name)) => OpenError::Backing {
                    image,
                    name,
                    error: Box::new(error),
                },
                None => error,
            })?;
        if let Some(b) = lower.take() {
            image.attach_backing(b);
        }
        lower = Some(Backing::Qcow2(Box::new(image)));
    }
    let mut image = open_engine(top, engine).await?;
    if let Some(b) = lower {
        image.attach_backing(b);
    }
    Ok(image)
}

/// Open one qcow2 level, its snapshot table read and checked as QEMU
/// reads it at every open: an image whose table `info` refuses is opened
/// by no command, so no tool writes to what a reader would not open.
async fn open_engine(level: Level, engine: &EngineOptions) -> Result<Image<FileDev>, OpenError> {
    let mut opts = engine.clone();
    opts.read_only = level.read_only;
    let image = Image::open_with_data(level.dev, level.data, opts).await;
    let checked = match image {
        Ok(image) => image.snapshots().await.map(|_| image),
        Err(error) => Err(error),
    };
    checked.map_err(|error| OpenError::Engine {
        path: level.path,
        error,
    })
}

/// Which file `path` leads to (following symlinks), or the error that says
/// there is none (`NotFound`) or that it cannot be looked at.
pub fn file_id_of_path(path: &Path) -> std::io::Result<FileId> {
    std::fs::metadata(path).map(|m| FileId::of(&m))
}

/// Whether two names lead to the same file: by device and inode when both
/// exist (hard links, symlinks and `..` spellings alike), and when neither
/// does, by their directory (canonicalised) and file name, so that two
/// spellings of one new file still count as one. A name that exists is
/// never the same file as one that does not.
pub fn same_file(a: &Path, b: &Path) -> bool {
    match (file_id_of_path(a), file_id_of_path(b)) {
        (Ok(x), Ok(y)) => x == y,
        (Err(_), Err(_)) => {
            let spelled = |p: &Path| -> Option<PathBuf> {
                let dir = match p.parent() {
                    Some(d) if !d.as_os_str().is_empty() => d,
                    _ => Path::new("."),
                };
                Some(std::fs::canonicalize(dir).ok()?.join(p.file_name()?))
            };
            match (spelled(a), spelled(b)) {
                (Some(x), Some(y)) => x == y,
                _ => a == b,
            }
        }
        _ => false,
    }
}

/// A plain [`std::fs::File`] on an image, for the code that reads and
/// writes images without the engine (the checker and its repair, the
/// dump), held while QEMU's image locks are held on the same file.
///
/// The locks sit on a second open file description of the same file (a
/// [`FileDev`], whose locking is the one implementation of QEMU's
/// protocol): OFD locks protect the file from other processes whichever
/// of our descriptions does the I/O.
pub struct LockedFile {
    pub file: std::fs::File,
    /// Holds the locks; they go when it is dropped.
    locks: FileDev,
    /// Holds the locks of the image's external data file, once
    /// [`LockedFile::lock_data_file`] took them.
    data_locks: Option<FileDev>,
}

impl LockedFile {
    /// Hold, besides the image's, the locks QEMU takes on the external
    /// data file of a qcow2 image when it opens the image (its data-file
    /// child: [`LockRequest::data_file`]), read-only or not: what
    /// `qemu-img check` and `check -r` hold, so that an image whose data
    /// file another process uses in a way that conflicts is refused as
    /// qemu-img refuses it. `force_share` is qemu-img's `-U` (read-only
    /// only). The data file is named by the header and opened by that name
    /// from the working directory, as every open here does
    /// ([`resolve_data_file_path`]).
    ///
    /// Nothing is taken when the header cannot be read (the checker says
    /// what is wrong with it), has no data file, names none, or names the
    /// image itself (the image's locks are on that file already); a data
    /// file that cannot be opened or locked is an error, as in qemu-img.
    pub fn lock_data_file(
        &mut self,
        image: &Path,
        read_only: bool,
        force_share: bool,
    ) -> Result<(), OpenError> {
        let Ok(header) = futures::executor::block_on(Image::read_header(&self.locks)) else {
            return Ok(());
        };
        if !header.has_data_file() {
            return Ok(());
        }
        let Some(name) = header.data_file() else {
            return Ok(());
        };
        let data_error = |error: OpenError| OpenError::DataFile {
            image: image.to_owned(),
            name: name.clone(),
            error: Box::new(error),
        };
        let file_opts = FileOptions {
            read_only,
            threads: 1,
            ..FileOptions::default()
        };
        let mut dev = FileDev::open(resolve_data_file_path(&name), &file_opts)
            .map_err(|e| data_error(e.into()))?;
        if dev.file_id() == self.locks.file_id() {
            return Ok(());
        }
        dev.lock(LockRequest::data_file(read_only, force_share))
            .map_err(|e| data_error(e.into()))?;
        self.data_locks = Some(dev);
        Ok(())
    }
}

/// Open `path` for plain I/O (writable or not) once `req`'s locks are
/// held on it; a file that another process uses in a way `req` conflicts
/// with is refused before it is read.
pub fn open_locked(path: &Path, writable: bool, req: LockRequest) -> Result<LockedFile, OpenError> {
    let file_opts = FileOptions {
        read_only: !writable,
        threads: 1,
        ..FileOptions::default()
    };
    let mut locks = FileDev::open(path, &file_opts)?;
    locks.lock(req)?;
    let open_err = |error| {
        OpenError::File(FileOpenError::Open {
            path: path.to_owned(),
            error,
        })
    };
    let file = std::fs::OpenOptions::new()
        .read(true)
        .write(writable)
        .open(path)
        .map_err(open_err)?;
    let meta = file.metadata().map_err(open_err)?;
    if FileId::of(&meta) != locks.file_id() {
        return Err(OpenError::Replaced {
            path: path.to_owned(),
        });
    }
    Ok(LockedFile {
        file,
        locks,
        data_locks: None,
    })
}

/// Open only the file at `path` (no engine): for probing and raw sizes.
pub fn probe_path(path: &Path) -> Result<Probed, OpenError> {
    use std::io::Read;
    let mut head = [0u8; 8];
    let mut f = std::fs::File::open(path).map_err(|error| {
        OpenError::File(FileOpenError::Open {
            path: path.to_owned(),
            error,
        })
    })?;
    let mut n = 0;
    while n < head.len() {
        match f.read(&mut head[n..]) {
            Ok(0) => break,
            Ok(k) => n += k,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(error) => {
                return Err(OpenError::File(FileOpenError::Open {
                    path: path.to_owned(),
                    error,
                }))
            }
        }
    }
    Ok(probe_bytes(&head[..n]))
}
