//! Opening image files on the real file system for the command line: format
//! probing, the engine on a [`FileDev`], and the backing chain resolved the
//! way QEMU resolves it (a relative backing name is relative to the directory
//! of the image that names it), every backing file opened read-only.
//!
//! A chain is opened iteratively, top image first, and linked bottom-up, so
//! a long chain costs no recursion; its depth is bounded and a file that
//! appears twice is a loop, refused with the path that closes it. All files
//! of one chain share one [`IoPool`].

use std::collections::BTreeSet;
use std::fmt;
use std::path::{Path, PathBuf};
use std::str::FromStr;

use engine::dev::{
    BlockDev, DevError, FileDev, FileOpenError, FileOptions, IoPool, WriteFlags, ZeroFlags,
};
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
    #[error("{image}: backing chain loops back to {path}")]
    Loop { image: PathBuf, path: PathBuf },
    #[error("{image}: backing chain deeper than {limit} files")]
    TooDeep { image: PathBuf, limit: usize },
    #[error("cannot start I/O threads: {0}")]
    Threads(std::io::Error),
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
}

impl Default for OpenOptions {
    fn default() -> Self {
        OpenOptions {
            format: None,
            read_only: false,
            direct: false,
            backing: true,
            engine: EngineOptions::default(),
            threads: DEFAULT_IO_THREADS,
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
        match self {
            Disk::Raw(d) => {
                Self::check_raw_range(d, offset, buf.len() as u64)?;
                Ok(d.write(offset, buf, WriteFlags::default()).await?)
            }
            Disk::Qcow2(i) => i.write(offset, buf).await,
        }
    }

    pub async fn write_zeroes(&self, offset: u64, len: u64, unmap: bool) -> engine::Result<()> {
        match self {
            Disk::Raw(d) => {
                Self::check_raw_range(d, offset, len)?;
                let flags = ZeroFlags {
                    may_unmap: unmap,
                    ..ZeroFlags::default()
                };
                Ok(d.write_zeroes(offset, len, flags).await?)
            }
            Disk::Qcow2(i) => i.write_zeroes(offset, len, unmap).await,
        }
    }

    pub async fn discard(&self, offset: u64, len: u64) -> engine::Result<()> {
        match self {
            Disk::Raw(d) => {
                Self::check_raw_range(d, offset, len)?;
                Ok(d.discard(offset, len).await?)
            }
            Disk::Qcow2(i) => i.discard(offset, len).await,
        }
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

/// One file opened as what it is, without its backing chain.
enum Opened {
    Raw(FileDev),
    Qcow2(Box<Image<FileDev>>),
}

/// With `describe_only` (a read-only open to describe the image, as `info`
/// does) a data file that cannot be opened is left out, as qemu-img info
/// does; guest reads of that image then fail naming it.
async fn open_one(
    path: &Path,
    format: Option<Format>,
    read_only: bool,
    direct: bool,
    describe_only: bool,
    engine_opts: &EngineOptions,
    pool: &IoPool,
) -> Result<Opened, OpenError> {
    let file_opts = FileOptions {
        read_only,
        direct,
        threads: pool.threads(),
        fallocate: true,
    };
    let dev = FileDev::open_in(path, &file_opts, pool.clone())?;
    let format = match format {
        Some(f) => f,
        None => match probe_dev(&dev).await? {
            Probed::Format(f) => f,
            Probed::Foreign(name) => {
                return Err(OpenError::ForeignFormat {
                    path: path.to_owned(),
                    format: name,
                })
            }
        },
    };
    match format {
        Format::Raw => Ok(Opened::Raw(dev)),
        Format::Qcow2 => {
            let mut opts = engine_opts.clone();
            opts.read_only = read_only;
            let engine_err = |error| OpenError::Engine {
                path: path.to_owned(),
                error,
            };
            let header = Image::read_header(&dev).await.map_err(engine_err)?;
            let data = if header.has_data_file() {
                let Some(name) = header.data_file() else {
                    return Err(OpenError::DataFileUnnamed {
                        image: path.to_owned(),
                    });
                };
                match FileDev::open_in(resolve_data_file_path(&name), &file_opts, pool.clone()) {
                    Ok(data) => Some(data),
                    Err(_) if describe_only && read_only => None,
                    Err(error) => {
                        return Err(OpenError::DataFile {
                            image: path.to_owned(),
                            name,
                            error: Box::new(OpenError::File(error)),
                        })
                    }
                }
            } else {
                None
            };
            let image = Image::open_with_data(dev, data, opts)
                .await
                .map_err(engine_err)?;
            Ok(Opened::Qcow2(Box::new(image)))
        }
    }
}

/// Open the image at `path` and, if asked, its whole backing chain.
pub async fn open_image(path: &Path, opts: &OpenOptions) -> Result<Disk, OpenError> {
    let pool = IoPool::new(opts.threads.max(1)).map_err(OpenError::Threads)?;
    let top = open_one(
        path,
        opts.format,
        opts.read_only,
        opts.direct,
        !opts.backing,
        &opts.engine,
        &pool,
    )
    .await?;
    let mut top = match top {
        Opened::Raw(dev) => return Ok(Disk::Raw(dev)),
        Opened::Qcow2(image) => image,
    };
    if !opts.backing {
        return Ok(Disk::Qcow2(top));
    }

    // Walk down the chain, keeping every opened qcow2 image; the last file
    // is either raw or a qcow2 image without a backing file.
    let mut seen = BTreeSet::new();
    seen.insert(canonical(path));
    let mut images: Vec<Box<Image<FileDev>>> = Vec::new();
    let mut bottom_raw: Option<FileDev> = None;
    let mut current_path = path.to_owned();
    while let Some((name, fmt_name)) = top.backing_spec() {
        if images.len() >= MAX_CHAIN_DEPTH {
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
        let format = match fmt_name {
            Some(f) => Some(f.parse::<Format>().map_err(|error| {
                backing_err(OpenError::Format {
                    path: current_path.clone(),
                    error,
                })
            })?),
            None => None,
        };
        let backing_path = resolve_backing_path(&current_path, &name);
        if !seen.insert(canonical(&backing_path)) {
            return Err(OpenError::Loop {
                image: path.to_owned(),
                path: backing_path,
            });
        }
        let opened = open_one(
            &backing_path,
            format,
            true,
            opts.direct,
            false,
            &opts.engine,
            &pool,
        )
        .await
        .map_err(backing_err)?;
        images.push(top);
        match opened {
            Opened::Raw(dev) => {
                bottom_raw = Some(dev);
                top = images.pop().expect("just pushed");
                break;
            }
            Opened::Qcow2(image) => {
                top = image;
                current_path = backing_path;
            }
        }
    }
    // `top` is now the lowest qcow2 image; link upwards.
    if let Some(dev) = bottom_raw {
        top.attach_backing(Backing::Raw(dev));
    }
    while let Some(mut upper) = images.pop() {
        upper.attach_backing(Backing::Qcow2(top));
        top = upper;
    }
    Ok(Disk::Qcow2(top))
}

/// The identity of a path for loop detection: canonical where it exists.
fn canonical(path: &Path) -> PathBuf {
    std::fs::canonicalize(path).unwrap_or_else(|_| path.to_owned())
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn probes_by_magic() {
        assert_eq!(
            probe_bytes(b"QFI\xfb\0\0\0\x03"),
            Probed::Format(Format::Qcow2)
        );
        assert_eq!(probe_bytes(b"QFI\xfa"), Probed::Format(Format::Raw));
        assert_eq!(probe_bytes(b""), Probed::Format(Format::Raw));
        assert_eq!(probe_bytes(b"KDMV\x01\0\0\0"), Probed::Foreign("vmdk"));
        assert_eq!(probe_bytes(b"QED\0abcd"), Probed::Foreign("qed"));
    }

    #[test]
    fn backing_names_resolve_from_the_image_directory() {
        let p = resolve_backing_path(Path::new("/a/b/top.qcow2"), "base.raw");
        assert_eq!(p, Path::new("/a/b/base.raw"));
        let p = resolve_backing_path(Path::new("/a/b/top.qcow2"), "../c/base.raw");
        assert_eq!(p, Path::new("/a/b/../c/base.raw"));
        let p = resolve_backing_path(Path::new("/a/b/top.qcow2"), "/abs/base");
        assert_eq!(p, Path::new("/abs/base"));
        let p = resolve_backing_path(Path::new("top.qcow2"), "base");
        assert_eq!(p, Path::new("base"));
        let p = resolve_backing_path(Path::new("sub/top.qcow2"), "base");
        assert_eq!(p, Path::new("sub/base"));
    }

    #[test]
    fn format_names_parse() {
        assert_eq!("raw".parse::<Format>(), Ok(Format::Raw));
        assert_eq!("qcow2".parse::<Format>(), Ok(Format::Qcow2));
        let err = "vmdk".parse::<Format>().unwrap_err();
        assert!(err.to_string().contains("'vmdk'"), "{err}");
    }

    #[test]
    fn raw_images_open_and_refuse_requests_past_their_end() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("disk.raw");
        std::fs::write(&path, vec![3u8; 8192]).unwrap();
        let disk = futures::executor::block_on(open_image(&path, &OpenOptions::default()))
            .expect("open raw");
        assert_eq!(disk.format(), Format::Raw);
        assert_eq!(disk.virtual_size(), 8192);
        let mut buf = [0u8; 4];
        futures::executor::block_on(disk.read(8190, &mut buf)).unwrap_err();
        futures::executor::block_on(disk.read(8188, &mut buf)).unwrap();
        assert_eq!(buf, [3; 4]);
        let err = futures::executor::block_on(disk.write(8192, &[1])).unwrap_err();
        assert!(matches!(err, engine::Error::OutOfRange { .. }), "{err:?}");
    }

    #[test]
    fn foreign_formats_are_refused_by_name() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("disk.vmdk");
        std::fs::write(&path, b"KDMV\x01\0\0\0 rest").unwrap();
        let err = futures::executor::block_on(open_image(&path, &OpenOptions::default()))
            .err()
            .expect("vmdk refused");
        assert!(err.to_string().contains("vmdk"), "{err}");
    }
}
