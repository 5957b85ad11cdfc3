//! Creating image files so that a command that fails destroys nothing:
//! `qcsim create` and `qcsim convert` empty an existing file only once
//! everything that could refuse the command has been asked.
//!
//! `qemu-img create` itself is [`prepare_image`] then
//! [`PreparedImage::write`] (or both at once, [`create_image`]): its option
//! names (`-o cluster_size=...,refcount_bits=...,compat=...`), its
//! backing-file rules (`-b` needs `-F`, and the error says what the file
//! looks like; without a size the image takes the backing file's virtual
//! size) and its "Formatting ..." line ([`PreparedImage::formatting_line`]),
//! for raw and qcow2 files. Between the two steps the caller prints that
//! line, as qemu-img prints it before it writes. The steps:
//!
//! 1. [`check_create_options`]: the engine's own checks of the options (an
//!    L1 table too large for the size, a refcount table too large, ...),
//!    run without any file.
//! 2. [`prepare`]: every file to be written opened and locked as QEMU's
//!    create locks them (so none is one another process uses), the files
//!    told apart by device and inode, and each file that must reach a
//!    length shown to be able to, all before any of them is emptied. A
//!    file is created only with `O_EXCL`, so one that appears meanwhile is
//!    opened as a file that existed. A failure closes them all as they
//!    were, and removes those it created (and only those).
//!
//! Only then does the caller empty and write them (the engine's create
//! empties its devices first thing); what can fail from there on is I/O.

use std::cell::Cell;
use std::path::{Path, PathBuf};

use engine::dev::{
    BlockDev, DevError, FileDev, FileId, FileOpenError, FileOptions, IoOp, LockError, LockRequest,
    WriteFlags, ZeroFlags,
};
use engine::{fill_zeroes, CreateOptions, Image, Preallocation};

use crate::files::{
    file_id_of_path, open_image_with_files, probe_path, resolve_backing_path,
    resolve_data_file_path, same_file, ChainFile, FirstOpen, Format, OpenError, OpenOptions,
    Probed, UnknownFormat,
};
use crate::qemu_args::{check_image_size, parse_size, ArgError, ImageOpts};

/// Why the files of a create could not be prepared. Nothing was emptied.
#[derive(Debug, thiserror::Error)]
pub enum CreateError {
    #[error(transparent)]
    File(#[from] FileOpenError),
    #[error(transparent)]
    Lock(#[from] LockError),
    /// Two of the files to write are one file (through a hard link, a
    /// symlink or another spelling).
    #[error("{second} is the same file as {first}: each file created must be a file of its own")]
    SameFile { first: PathBuf, second: PathBuf },
    /// The file system refuses a file this long (ext4's 16 TiB, say). The
    /// file was put back at its old length.
    #[error(
        "{path}: the file cannot be made {length} bytes long ({error}); it was left as it was"
    )]
    Length {
        path: PathBuf,
        length: u64,
        error: DevError,
    },
    #[error("{path}: cannot tell whether the file exists: {error}")]
    Stat {
        path: PathBuf,
        error: std::io::Error,
    },
}

/// A device that fails every request, noting that one was made: the
/// engine's create validates all of its options before its first request,
/// so a create on it that fails without a request failed a check, and one
/// that reached a request passed them all.
#[derive(Default)]
struct DryRun {
    touched: Cell<bool>,
}

impl DryRun {
    fn stop(&self, op: IoOp) -> DevError {
        self.touched.set(true);
        DevError::Os {
            op,
            offset: 0,
            errno: None,
            message: "dry run: the options passed every check".into(),
        }
    }
}

impl BlockDev for DryRun {
    async fn read(&self, _: u64, _: &mut [u8]) -> Result<(), DevError> {
        Err(self.stop(IoOp::Read))
    }

    async fn write(&self, _: u64, _: &[u8], _: WriteFlags) -> Result<(), DevError> {
        Err(self.stop(IoOp::Write))
    }

    async fn write_zeroes(&self, _: u64, _: u64, _: ZeroFlags) -> Result<(), DevError> {
        Err(self.stop(IoOp::WriteZeroes))
    }

    async fn discard(&self, _: u64, _: u64) -> Result<(), DevError> {
        Err(self.stop(IoOp::Discard))
    }

    async fn flush(&self) -> Result<(), DevError> {
        Err(self.stop(IoOp::Flush))
    }

    fn len(&self) -> u64 {
        0
    }

    async fn truncate(&self, _: u64) -> Result<(), DevError> {
        Err(self.stop(IoOp::Truncate))
    }
}

/// Whether the engine would create an image with `o`: the error it would
/// give, found without touching any file (a data file counts as given when
/// `o` names one).
pub async fn check_create_options(o: &CreateOptions) -> Result<(), engine::Error> {
    let (image, data) = (DryRun::default(), DryRun::default());
    let data_dev = o.data_file.is_some().then_some(&data);
    match Image::create_with_data(&image, data_dev, o).await {
        Err(_) if image.touched.get() || data.touched.get() => Ok(()),
        other => other,
    }
}

/// A file a create will write.
#[derive(Debug, Clone, Copy)]
pub struct Wanted<'a> {
    pub path: &'a Path,
    /// The length the file will be given (a raw image or a data file: the
    /// disk size), shown to be possible before anything is emptied.
    pub length: Option<u64>,
}

/// Open (creating those that do not exist) and lock every file of
/// `wanted`, in order, without emptying any; see the module comment. The
/// devices come back in the order of `wanted`, holding QEMU's create locks
/// ([`LockRequest::create`]), their files as they were.
pub async fn prepare(
    wanted: &[Wanted<'_>],
    opts: &FileOptions,
) -> Result<Vec<FileDev>, CreateError> {
    let mut devs: Vec<FileDev> = Vec::new();
    let mut created: Vec<(PathBuf, FileId)> = Vec::new();
    let result = prepare_each(wanted, opts, &mut devs, &mut created).await;
    if result.is_err() {
        // Close before removing, so nothing of ours holds what is removed;
        // a name that no longer leads to the file made is left alone.
        drop(devs);
        for (path, id) in created {
            if file_id_of_path(&path).ok() == Some(id) {
                let _ = std::fs::remove_file(path);
            }
        }
        return result.map(|()| Vec::new());
    }
    Ok(devs)
}

/// `path` opened, or created if there is no file by that name; with the
/// path of the file made when it was created. Creating is `O_EXCL`
/// ([`FileDev::create_new`]): a file that appears after all between any
/// look at the name and the create is opened as one that existed, so
/// nothing this create did not make is ever emptied before its locks are
/// held, nor removed when the create gives up. A dangling symlink is
/// followed to the name it points at, which is created (as qemu-img's
/// `O_CREAT` open does).
fn open_or_create(
    path: &Path,
    opts: &FileOptions,
) -> Result<(FileDev, Option<PathBuf>), CreateError> {
    let target = creation_target(path)?;
    match FileDev::create_new(&target, opts) {
        Ok(dev) => Ok((dev, Some(target))),
        Err(FileOpenError::Open { error, .. })
            if error.kind() == std::io::ErrorKind::AlreadyExists =>
        {
            Ok((FileDev::open(path, opts)?, None))
        }
        Err(e) => Err(e.into()),
    }
}

/// The name a file created at `path` gets: `path`, or, through symlinks
/// that lead nowhere, the name the last one points at (relative targets
/// taken from the link's directory). At most 40 links are followed, as
/// the kernel follows them; past that the create fails on the link.
fn creation_target(path: &Path) -> Result<PathBuf, CreateError> {
    let mut name = path.to_owned();
    for _ in 0..40 {
        let stat = |error| CreateError::Stat {
            path: name.clone(),
            error,
        };
        match std::fs::symlink_metadata(&name) {
            Ok(m) if m.file_type().is_symlink() => {
                let to = std::fs::read_link(&name).map_err(stat)?;
                name = match name.parent() {
                    Some(dir) => dir.join(to),
                    None => to,
                };
            }
            Ok(_) => break,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => break,
            Err(e) => return Err(stat(e)),
        }
    }
    Ok(name)
}

/// What tests run on each file [`prepare`] is about to open or create
/// ([`BEFORE_OPEN`]).
pub type Hook = Box<dyn FnMut(&Path)>;

thread_local! {
    /// The hook [`prepare`] runs, on this thread, on each file it is about
    /// to open or create: none but in tests, which set it to make a file
    /// appear at the moment another process could.
    pub static BEFORE_OPEN: std::cell::RefCell<Option<Hook>> =
        const { std::cell::RefCell::new(None) };
}

/// Runs [`BEFORE_OPEN`]'s hook, if one is set, on `path`.
fn before_open(path: &Path) {
    BEFORE_OPEN.with(|h| {
        if let Some(f) = h.borrow_mut().as_mut() {
            f(path)
        }
    });
}

async fn prepare_each(
    wanted: &[Wanted<'_>],
    opts: &FileOptions,
    devs: &mut Vec<FileDev>,
    created: &mut Vec<(PathBuf, FileId)>,
) -> Result<(), CreateError> {
    for w in wanted {
        before_open(w.path);
        let (mut dev, made) = open_or_create(w.path, opts)?;
        let exists = made.is_none();
        if let Some(made) = made {
            created.push((made, dev.file_id()));
        }
        // Before locking: the locks of one file opened twice would
        // conflict with each other and be reported as another process.
        if let Some(i) = devs.iter().position(|d| d.file_id() == dev.file_id()) {
            return Err(CreateError::SameFile {
                first: wanted[i].path.to_owned(),
                second: w.path.to_owned(),
            });
        }
        if exists {
            dev.lock(LockRequest::create())?;
        }
        if let Some(length) = w.length {
            check_length(&dev, w.path, length).await?;
        }
        devs.push(dev);
    }
    Ok(())
}

/// Show that the file of `dev` can be `length` bytes long by making it so
/// and putting it back: extending a file only appends zeroes, and cutting
/// them off again restores it. Block devices have the length they have.
async fn check_length(dev: &FileDev, path: &Path, length: u64) -> Result<(), CreateError> {
    let is_file = std::fs::metadata(path)
        .map(|m| m.is_file())
        .unwrap_or(false);
    let before = dev.len();
    if !is_file || length <= before {
        return Ok(());
    }
    let grow = dev.truncate(length).await;
    let restore = dev.truncate(before).await;
    grow.and(restore).map_err(|error| CreateError::Length {
        path: path.to_owned(),
        length,
        error,
    })
}

/// A `qemu-img create` request, its values as given.
#[derive(Debug, Clone)]
pub struct CreateImageOptions {
    /// `-f`: raw or qcow2 (qcow2 by default here).
    pub format: Format,
    /// `-o` lists, as given (qemu-img's names; see
    /// [`crate::qemu_args::option_help`]).
    pub options: Vec<String>,
    /// The virtual size, with an optional k, M, G, T suffix; for qcow2 with
    /// a backing file, the backing file's size when `None`.
    pub size: Option<String>,
    /// `-b`: the backing file, stored as given (a relative name is
    /// relative to the image).
    pub backing: Option<String>,
    /// `-F`: the backing file's format, required with a backing file.
    pub backing_format: Option<String>,
    /// `-u`: do not open the backing file (then the size is required).
    pub unsafe_backing: bool,
}

impl Default for CreateImageOptions {
    fn default() -> Self {
        CreateImageOptions {
            format: Format::Qcow2,
            options: Vec::new(),
            size: None,
            backing: None,
            backing_format: None,
            unsafe_backing: false,
        }
    }
}

/// Why an image was not created. Every variant before `Write` left every
/// file as it was (and created none).
#[derive(Debug, thiserror::Error)]
pub enum CreateImageError {
    /// An option (an `-o` list, the size against the largest image, or
    /// their combination) is refused; `error` names it.
    #[error("{path}")]
    Options {
        path: PathBuf,
        #[source]
        error: ArgError,
    },
    /// The qcow2 driver refuses the options (their combination, or a
    /// value out of its range); qemu-img reports it after printing
    /// `formatting_line`.
    #[error("{path}")]
    Driver {
        path: PathBuf,
        formatting_line: String,
        #[source]
        error: ArgError,
    },
    /// The size argument does not parse.
    #[error("invalid image size")]
    Size {
        #[source]
        error: ArgError,
    },
    #[error(
        "{path}: raw images take no options but size and preallocation (no backing file either)"
    )]
    RawOptions { path: PathBuf },
    /// A raw file has no metadata to preallocate (QEMU's wording).
    #[error("{path}: Unsupported preallocation mode: {}", .mode.name())]
    /// Reported after `formatting_line`, as qemu-img's raw driver does.
    RawPreallocation {
        path: PathBuf,
        mode: Preallocation,
        formatting_line: String,
    },
    /// No size, and no backing file opened to take it from.
    #[error("image creation needs a size parameter")]
    NoSize,
    /// qemu-img refuses `-b` without `-F`; `probed` is what the backing
    /// file looks like, if it could be read, so the fix is one copy away.
    #[error(
        "{path}: backing file specified without backing format{}",
        backing_hint(.backing, .probed)
    )]
    MissingBackingFormat {
        path: PathBuf,
        backing: PathBuf,
        probed: Option<Probed>,
    },
    /// `-F` names no format this tool knows.
    #[error(transparent)]
    BackingFormat(#[from] UnknownFormat),
    /// By device and inode: a hard link to the backing file is the backing
    /// file, and creating the image would empty it.
    #[error(
        "{path}: trying to create an image over its own backing file: {backing} is the same file"
    )]
    OverBacking { path: PathBuf, backing: PathBuf },
    #[error("{path}: could not open backing image")]
    BackingOpen {
        path: PathBuf,
        #[source]
        error: Box<OpenError>,
    },
    #[error("{path}: could not open backing image")]
    BackingClose {
        path: PathBuf,
        #[source]
        error: engine::Error,
    },
    /// The engine would refuse these options (found on no file).
    #[error("{path}")]
    Refused {
        path: PathBuf,
        #[source]
        error: engine::Error,
    },
    #[error("{path}: the data file cannot be the image file itself")]
    DataIsImage { path: PathBuf },
    #[error("{path}: the data file {data} is the same file as the backing file {backing}: creating it would empty the backing file")]
    DataIsBacking {
        path: PathBuf,
        data: PathBuf,
        backing: PathBuf,
    },
    /// A file to write (`file`: the image or its data file) is a file the
    /// backing chain reads.
    #[error("{path}: {file} is the same file as {first}, which the backing chain reads: creating it would destroy it")]
    ChainFile {
        path: PathBuf,
        file: PathBuf,
        first: FirstOpen,
    },
    /// The files could not be opened, locked or sized.
    #[error(transparent)]
    Prepare(#[from] CreateError),
    /// Emptying, sizing or flushing a file failed.
    #[error("{path}")]
    Write {
        path: PathBuf,
        #[source]
        error: DevError,
    },
    /// The engine's create failed.
    #[error("{path}")]
    Create {
        path: PathBuf,
        #[source]
        error: engine::Error,
    },
}

fn backing_hint(backing: &Path, probed: &Option<Probed>) -> String {
    match probed {
        Some(Probed::Format(f)) => {
            format!(" (detected format of {}: add -F {f})", backing.display())
        }
        Some(Probed::Foreign(name)) => format!(" ({} looks like {name})", backing.display()),
        None => String::new(),
    }
}

/// An image every check has passed, its files opened and locked, none yet
/// emptied: [`PreparedImage::write`] creates it.
pub struct PreparedImage {
    path: PathBuf,
    formatting_line: String,
    files: PreparedFiles,
}

enum PreparedFiles {
    Raw {
        dev: FileDev,
        size: u64,
        preallocation: Preallocation,
    },
    Qcow2 {
        dev: FileDev,
        data: Option<FileDev>,
        create: Box<CreateOptions>,
    },
}

impl PreparedImage {
    /// The line qemu-img prints before it writes the image, its fields in
    /// qemu-img's order.
    pub fn formatting_line(&self) -> &str {
        &self.formatting_line
    }

    /// The engine's options for a qcow2 image (`None` for raw).
    pub fn create_options(&self) -> Option<&CreateOptions> {
        match &self.files {
            PreparedFiles::Raw { .. } => None,
            PreparedFiles::Qcow2 { create, .. } => Some(create),
        }
    }

    /// Empty the files and write the image.
    pub async fn write(self) -> Result<(), CreateImageError> {
        let path = self.path;
        match self.files {
            PreparedFiles::Raw {
                dev,
                size,
                preallocation,
            } => async {
                dev.truncate(0).await?;
                match preallocation {
                    Preallocation::Falloc => fill_zeroes(&dev, 0, size, false).await?,
                    Preallocation::Full => fill_zeroes(&dev, 0, size, true).await?,
                    Preallocation::Off | Preallocation::Metadata => {}
                }
                dev.truncate(size).await?;
                dev.flush().await
            }
            .await
            .map_err(|error| CreateImageError::Write { path, error }),
            PreparedFiles::Qcow2 { dev, data, create } => {
                if let Err(error) = Image::create_with_data(&dev, data.as_ref(), &create).await {
                    return Err(CreateImageError::Create { path, error });
                }
                dev.flush()
                    .await
                    .map_err(|error| CreateImageError::Write { path, error })
            }
        }
    }
}

/// [`prepare_image`] then [`PreparedImage::write`]; returns the
/// "Formatting ..." line.
pub async fn create_image(
    path: &Path,
    opts: &CreateImageOptions,
) -> Result<String, CreateImageError> {
    let prepared = prepare_image(path, opts).await?;
    let line = prepared.formatting_line.clone();
    prepared.write().await?;
    Ok(line)
}

/// Everything of `qemu-img create` before the first byte is written: the
/// options parsed and checked, the backing file opened (unless `-u`) for
/// its size and its chain's files, every file to write told apart from
/// those, then opened and locked. An error here leaves every file as it
/// was.
pub async fn prepare_image(
    path: &Path,
    opts: &CreateImageOptions,
) -> Result<PreparedImage, CreateImageError> {
    let mut image = ImageOpts::default();
    for list in &opts.options {
        image
            .apply_list(list)
            .map_err(|error| CreateImageError::Options {
                path: path.to_owned(),
                error,
            })?;
    }
    if let Some(s) = &opts.size {
        image.size = Some(parse_size(s).map_err(|error| CreateImageError::Size { error })?);
    }
    if let Some(b) = &opts.backing {
        image.backing_file = Some(b.clone());
    }
    if let Some(f) = &opts.backing_format {
        image.backing_fmt = Some(f.clone());
    }
    match opts.format {
        Format::Raw => prepare_raw(path, &image).await,
        Format::Qcow2 => prepare_qcow2(path, image, opts.unsafe_backing).await,
    }
}

/// The size, which the image must have by now, checked against the
/// largest image.
fn checked_size(path: &Path, size: Option<u64>) -> Result<u64, CreateImageError> {
    let size = size.ok_or(CreateImageError::NoSize)?;
    check_image_size(size).map_err(|error| CreateImageError::Options {
        path: path.to_owned(),
        error,
    })
}

async fn prepare_raw(path: &Path, opts: &ImageOpts) -> Result<PreparedImage, CreateImageError> {
    let only_size = ImageOpts {
        size: opts.size,
        preallocation: opts.preallocation,
        nocow: opts.nocow,
        extent_size_hint: opts.extent_size_hint,
        ..ImageOpts::default()
    };
    if *opts != only_size {
        return Err(CreateImageError::RawOptions {
            path: path.to_owned(),
        });
    }
    let size = checked_size(path, opts.size)?;
    // qemu-img's order: nocow, preallocation, extent_size_hint.
    let formatting_line = format!(
        "Formatting '{}', fmt=raw size={size}{}{}{}",
        path.display(),
        opts.nocow_option(),
        opts.preallocation
            .map(|p| format!(" preallocation={}", p.name()))
            .unwrap_or_default(),
        opts.extent_size_hint_option(),
    );
    let preallocation = opts.preallocation.unwrap_or_default();
    if preallocation == Preallocation::Metadata {
        return Err(CreateImageError::RawPreallocation {
            path: path.to_owned(),
            mode: preallocation,
            formatting_line,
        });
    }
    // QEMU's block layer sizes a file in whole sectors: the line says the
    // size asked for, the file has it rounded up to 512 bytes.
    let size = size.next_multiple_of(512);
    // Opened, locked and shown to take the size before it is emptied.
    let wanted = [Wanted {
        path,
        length: Some(size),
    }];
    let dev = prepare(&wanted, &FileOptions::default()).await?.remove(0);
    Ok(PreparedImage {
        path: path.to_owned(),
        formatting_line,
        files: PreparedFiles::Raw {
            dev,
            size,
            preallocation,
        },
    })
}

/// The backing file `opts` names, resolved against `file`, and every file
/// its chain reads, which no file this create writes may be: the chain is
/// opened (unless `unsafe_backing`) for its files and, when `opts` gives
/// no size, the backing file's size.
async fn backing(
    file: &Path,
    opts: &mut ImageOpts,
    unsafe_backing: bool,
) -> Result<(Option<PathBuf>, Vec<ChainFile>), CreateImageError> {
    let Some(name) = opts.backing_file.clone() else {
        return Ok((None, Vec::new()));
    };
    let path = resolve_backing_path(file, &name);
    let Some(fmt) = opts.backing_fmt.clone() else {
        return Err(CreateImageError::MissingBackingFormat {
            path: file.to_owned(),
            probed: probe_path(&path).ok(),
            backing: path,
        });
    };
    let fmt: Format = fmt.parse()?;
    if same_file(file, &path) {
        return Err(CreateImageError::OverBacking {
            path: file.to_owned(),
            backing: path,
        });
    }
    if unsafe_backing {
        return Ok((Some(path), Vec::new()));
    }
    let open = OpenOptions {
        format: Some(fmt),
        read_only: true,
        ..OpenOptions::default()
    };
    let (disk, files) = open_image_with_files(&path, &open).await.map_err(|error| {
        CreateImageError::BackingOpen {
            path: file.to_owned(),
            error: Box::new(error),
        }
    })?;
    let backing_size = disk.virtual_size();
    disk.close()
        .await
        .map_err(|error| CreateImageError::BackingClose {
            path: file.to_owned(),
            error,
        })?;
    opts.size.get_or_insert(backing_size);
    Ok((Some(path), files))
}

/// Refuse a data file that is the image or its backing file, and an image
/// or data file that is a file the backing chain reads.
fn check_files(
    file: &Path,
    data_path: Option<&Path>,
    backing_path: Option<&Path>,
    chain_files: &[ChainFile],
) -> Result<(), CreateImageError> {
    if let Some(path) = data_path {
        if same_file(file, path) {
            return Err(CreateImageError::DataIsImage {
                path: file.to_owned(),
            });
        }
        if let Some(backing) = backing_path.filter(|b| same_file(path, b)) {
            return Err(CreateImageError::DataIsBacking {
                path: file.to_owned(),
                data: path.to_owned(),
                backing: backing.to_owned(),
            });
        }
    }
    for path in std::iter::once(file).chain(data_path) {
        let Ok(id) = file_id_of_path(path) else {
            continue;
        };
        if let Some(f) = chain_files.iter().find(|f| f.id == id) {
            return Err(CreateImageError::ChainFile {
                path: file.to_owned(),
                file: path.to_owned(),
                first: f.first.clone(),
            });
        }
    }
    Ok(())
}

async fn prepare_qcow2(
    file: &Path,
    mut opts: ImageOpts,
    unsafe_backing: bool,
) -> Result<PreparedImage, CreateImageError> {
    let (backing_path, chain_files) = backing(file, &mut opts, unsafe_backing).await?;
    let size = checked_size(file, opts.size)?;
    // QEMU's qcow2 disks are whole sectors: a size that is not is rounded
    // up (the "Formatting" line still shows the size asked for).
    let create = opts.unchecked_create_options(size.next_multiple_of(512));
    let line = formatting_line(file, &create, size, &opts);
    ImageOpts::check_create_options(&create).map_err(|error| CreateImageError::Driver {
        path: file.to_owned(),
        formatting_line: line.clone(),
        error,
    })?;
    // Everything the engine would refuse, refused before any file is
    // touched (the engine's create empties its files first thing).
    check_create_options(&create)
        .await
        .map_err(|error| CreateImageError::Refused {
            path: file.to_owned(),
            error,
        })?;
    // The data file is created (emptied) as qemu-img does, and a relative
    // name is taken from the working directory, as QEMU opens it.
    let data_path = create.data_file.as_deref().map(resolve_data_file_path);
    check_files(
        file,
        data_path.as_deref(),
        backing_path.as_deref(),
        &chain_files,
    )?;
    // Both files opened and locked, and the data file shown to take the
    // disk's size, before either is emptied: a lock held by another
    // process on the image must not cost the data file its contents.
    let mut wanted = vec![Wanted {
        path: file,
        length: None,
    }];
    if let Some(path) = &data_path {
        wanted.push(Wanted {
            path,
            length: Some(size),
        });
    }
    let mut devs = prepare(&wanted, &FileOptions::default()).await?.into_iter();
    let dev = devs.next().expect("the image file was prepared");
    let data = devs.next();
    Ok(PreparedImage {
        path: file.to_owned(),
        formatting_line: line,
        files: PreparedFiles::Qcow2 {
            dev,
            data,
            create: Box::new(create),
        },
    })
}

/// The line qemu-img prints before creating a qcow2 image, in its order:
/// `c` the options in effect, `given` those the command line gave (which
/// qemu-img echoes as given: `compat`, `data_file_raw`, `preallocation`,
/// `refcount_bits` and the file protocol's); `size` the size asked for.
pub fn formatting_line(file: &Path, c: &CreateOptions, size: u64, given: &ImageOpts) -> String {
    let onoff = |b: bool| if b { "on" } else { "off" };
    let mut s = format!(
        "Formatting '{}', fmt=qcow2 cluster_size={} extended_l2={}",
        file.display(),
        c.cluster_size,
        onoff(c.extended_l2),
    );
    if let Some(p) = given.preallocation {
        s.push_str(&format!(" preallocation={}", p.name()));
    }
    s.push_str(&format!(
        " compression_type={} size={}",
        c.compression_type.name(),
        size
    ));
    if let Some(b) = &c.backing_file {
        s.push_str(&format!(" backing_file={b}"));
    }
    if let Some(f) = &c.backing_format {
        s.push_str(&format!(" backing_fmt={f}"));
    }
    if let Some(name) = &given.compat_name {
        s.push_str(&format!(" compat={name}"));
    }
    if let Some(d) = &c.data_file {
        s.push_str(&format!(" data_file={d}"));
    }
    if let Some(raw) = given.data_file_raw {
        s.push_str(&format!(" data_file_raw={}", onoff(raw)));
    }
    s.push_str(&format!(
        " lazy_refcounts={} refcount_bits={}",
        onoff(c.lazy_refcounts),
        given.refcount_bits.unwrap_or(i64::from(c.refcount_bits))
    ));
    s.push_str(&given.nocow_option());
    s.push_str(&given.extent_size_hint_option());
    s
}
