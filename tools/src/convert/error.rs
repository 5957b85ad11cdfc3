//! Why a conversion failed ([`ConvertError`], naming the file at fault and,
//! for a step of the copy, the step ([`CopyStep`]) and offset), and what
//! a conversion read and wrote ([`ConvertStats`]), counted by the copy
//! itself (`Counted`).

use std::cell::Cell;
use std::path::{Path, PathBuf};

use engine::dev::DevError;

use crate::create::{CreateError, CreateImageError};
use crate::files::{FirstOpen, OpenError};
use crate::qemu_args::ArgError;

use super::options::MAX_PARALLEL;

/// Why a conversion failed. The variants before `Truncate` leave an
/// existing destination as it was.
#[derive(Debug, thiserror::Error)]
pub enum ConvertError {
    #[error("-m must be between 1 and {MAX_PARALLEL}")]
    Parallel { given: usize },
    /// An `-o` list that does not parse.
    #[error(transparent)]
    Options(#[from] ArgError),
    #[error("convert: size, backing_file and backing_fmt cannot be given with -o")]
    ChainOptions,
    #[error("convert: raw output takes no -o options")]
    RawOptions,
    /// `-l`: the snapshot could not be loaded (qemu-img's words; an
    /// unknown snapshot "Can't find snapshot").
    #[error("Failed to load snapshot: {reason}")]
    Snapshot { reason: String },
    /// `-c` with an output format that has no compressed clusters (raw),
    /// in qemu-img's words.
    #[error("Compression not supported for this file format")]
    CompressUnsupported,
    /// The source (or a file of its chain) could not be opened.
    #[error(transparent)]
    Source(#[from] OpenError),
    /// The `-o` options do not describe an image of the source's size.
    #[error("{path}: {error}")]
    DestinationOptions { path: PathBuf, error: ArgError },
    /// The engine would refuse to create the destination with these
    /// options (the check runs on no file, so this is never a device error).
    #[error("{path}: {error}")]
    DestinationRefused { path: PathBuf, error: engine::Error },
    /// A file to write (the destination or its data file) is a file the
    /// source chain reads.
    #[error("convert: {path} is the same file as {first}, which the source reads: writing it would destroy the source")]
    SameAsSource { path: PathBuf, first: FirstOpen },
    /// The files to write could not be opened, locked or sized.
    #[error(transparent)]
    Prepare(#[from] CreateError),
    /// `Destination::OntoBacking`: the destination could not be created
    /// over its backing file (the error names the option or file).
    #[error(transparent)]
    CreateOnBacking(CreateImageError),
    /// `Destination::Existing` or `OntoBacking`: the destination image
    /// could not be opened.
    #[error("{path}: opening the destination")]
    OpenDestination {
        path: PathBuf,
        #[source]
        error: Box<OpenError>,
    },
    /// `Destination::Existing`: the destination is smaller than the
    /// source, and nothing was written.
    #[error("{path}: the target image is smaller than the source")]
    TargetTooSmall { path: PathBuf },
    /// `Destination::Existing` or `OntoBacking`: the source's block
    /// status, asked for the progress plan before the copy, failed.
    #[error("{path}: reading block status")]
    Plan {
        path: PathBuf,
        #[source]
        error: engine::Error,
    },
    /// Emptying or sizing the raw destination failed.
    #[error("{path}: {error}")]
    Truncate { path: PathBuf, error: DevError },
    #[error("{path}: creating the image")]
    Create {
        path: PathBuf,
        #[source]
        error: engine::Error,
    },
    #[error("{path}: opening the new image")]
    OpenNew {
        path: PathBuf,
        #[source]
        error: engine::Error,
    },
    /// A step of the copy at `offset` failed: `path` is the file the step
    /// reads or writes (the source, or the destination).
    #[error("{step} at offset {offset}")]
    Copy {
        step: CopyStep,
        path: PathBuf,
        offset: u64,
        #[source]
        error: engine::Error,
    },
    /// Closing (flushing) the destination failed.
    #[error("{path}: closing")]
    Close {
        path: PathBuf,
        #[source]
        error: engine::Error,
    },
    /// The copy is complete and the destination closed, but closing the
    /// source (`path`) failed; `stats` are the copy's.
    #[error("closing the source")]
    CloseSource {
        path: PathBuf,
        stats: Box<ConvertStats>,
        #[source]
        error: engine::Error,
    },
}

/// The steps of copying a range.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CopyStep {
    /// Asking the source what the range holds.
    Status,
    /// Reading the source.
    Read,
    /// Writing the destination.
    Write,
}

impl std::fmt::Display for CopyStep {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            CopyStep::Status => "block status of the source",
            CopyStep::Read => "reading the source",
            CopyStep::Write => "writing the destination",
        })
    }
}

impl ConvertError {
    /// The copy's figures when the copy was made all the same (closing
    /// the source failed after it).
    pub fn stats(&self) -> Option<&ConvertStats> {
        match self {
            ConvertError::CloseSource { stats, .. } => Some(stats),
            _ => None,
        }
    }
}

/// The error of `step` on `path` at `offset`.
pub(super) fn copy_err(
    step: CopyStep,
    path: &Path,
    offset: u64,
) -> impl FnOnce(engine::Error) -> ConvertError + '_ {
    move |error| ConvertError::Copy {
        step,
        path: path.to_owned(),
        offset,
        error,
    }
}

/// What a conversion read and wrote, counted by the copy itself.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ConvertStats {
    /// The source's virtual size.
    pub source_size: u64,
    pub reads: u64,
    pub bytes_read: u64,
    pub writes: u64,
    pub bytes_written: u64,
    /// The source engine's counters, for a qcow2 source.
    pub source_engine: Option<engine::Counters>,
}

impl ConvertStats {
    /// The lines `--stats` prints on standard error.
    pub fn lines(&self) -> Vec<String> {
        let mut lines = vec![format!(
            "convert: read {} bytes of the {}-byte source in {} reads; wrote {} bytes in {} writes",
            self.bytes_read, self.source_size, self.reads, self.bytes_written, self.writes
        )];
        if let Some(c) = &self.source_engine {
            lines.push(format!(
                "convert: source engine: {} guest reads, {} guest bytes read, {} backing bytes read",
                c.guest_reads, c.guest_bytes_read, c.backing_bytes_read
            ));
        }
        lines
    }
}

/// The copy's counters, shared by the chunks in flight.
#[derive(Default)]
pub(super) struct Counted {
    reads: Cell<u64>,
    bytes_read: Cell<u64>,
    writes: Cell<u64>,
    bytes_written: Cell<u64>,
}

impl Counted {
    /// One read of `n` bytes.
    pub(super) fn read(&self, n: u64) {
        self.reads.set(self.reads.get() + 1);
        self.bytes_read.set(self.bytes_read.get() + n);
    }

    /// One write of `n` bytes.
    pub(super) fn wrote(&self, n: u64) {
        self.writes.set(self.writes.get() + 1);
        self.bytes_written.set(self.bytes_written.get() + n);
    }

    /// The figures of a copy of a `source_size`-byte source whose engine
    /// counted `source_engine`.
    pub(super) fn stats(
        &self,
        source_size: u64,
        source_engine: Option<engine::Counters>,
    ) -> ConvertStats {
        ConvertStats {
            source_size,
            reads: self.reads.get(),
            bytes_read: self.bytes_read.get(),
            writes: self.writes.get(),
            bytes_written: self.bytes_written.get(),
            source_engine,
        }
    }
}
