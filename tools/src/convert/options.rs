//! How to convert: [`ConvertOptions`], where the copy goes
//! ([`Destination`]: a new image, an existing one, or a new one over a
//! backing file) and which internal snapshot `-l` copies
//! ([`SnapshotPick`]). The bottom of `convert`: every copy reads these.

use engine::dev::FileDev;
use engine::Image;

use crate::files::Format;

/// Largest `parallel` (qemu-img's `-m`), as qemu-img's.
pub const MAX_PARALLEL: usize = 16;

/// Bytes copied per chunk: a multiple of every cluster size up to 1 MiB.
/// A new image's copy raises it to the destination's cluster size above
/// that, so that no chunk ends inside a cluster; the copies into an
/// existing image or onto a backing file step by it, or by the target's
/// cluster for a compressed write, which takes whole clusters.
pub(super) const CHUNK: u64 = 1 << 20;

/// How to convert.
#[derive(Debug, Clone)]
pub struct ConvertOptions {
    /// The source's format; probed when `None`.
    pub source_format: Option<Format>,
    /// The destination's format: raw (qemu-img's default) or qcow2.
    pub output_format: Format,
    /// qcow2 `-o` option lists for the destination, as given (without
    /// size or backing for a new destination; none for raw).
    pub options: Vec<String>,
    /// Chunks in flight at once, 1 to [`MAX_PARALLEL`].
    pub parallel: usize,
    /// O_DIRECT on source and destination.
    pub nocache: bool,
    /// qemu-img's `-U`: read a source other processes have open, even for
    /// writing, without keeping them from writing it.
    pub force_share: bool,
    /// qemu-img's `-c`: write the data clusters compressed (qcow2 only).
    pub compress: bool,
    /// qemu-img's `-l`: copy an internal snapshot of the source rather
    /// than its active disk.
    pub snapshot: Option<SnapshotPick>,
    /// Where the copy goes.
    pub destination: Destination,
}

impl Default for ConvertOptions {
    fn default() -> Self {
        ConvertOptions {
            source_format: None,
            output_format: Format::Raw,
            options: Vec::new(),
            parallel: 8,
            nocache: false,
            force_share: false,
            compress: false,
            snapshot: None,
            destination: Destination::New,
        }
    }
}

/// Where the copy goes. Only [`Destination::New`] takes `parallel`,
/// `nocache` and `snapshot`; the other two copy one request at a time in
/// guest order, as qemu-img does for them.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum Destination {
    /// A new image, created (or an existing file overwritten) once every
    /// check has passed; only the source's data is written.
    #[default]
    New,
    /// qemu-img's `-n`: an existing image of the output format, at least
    /// the source's size, into which the source's guest data is copied
    /// whole, zeroes written as zeroes.
    Existing,
    /// qemu-img's `-B BACKING` (or `-o backing_file=`): a new image
    /// created over that backing file, into which only what the source's
    /// top image holds is written, so that what the source leaves to its
    /// own backing file is left to the new one.
    OntoBacking {
        backing: Option<String>,
        backing_format: Option<String>,
    },
}

/// Which internal snapshot `convert -l` copies: `-l ID_OR_NAME` (an id
/// first, then a name, as qemu-img looks it up), or `-l
/// snapshot.id=I,snapshot.name=N` (each given one must match).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SnapshotPick {
    IdOrName(String),
    Fields {
        id: Option<String>,
        name: Option<String>,
    },
}

impl SnapshotPick {
    /// Load the picked snapshot of `img` for reading: by id or else by
    /// name (`engine::find_snapshot`, qemu-img's lookup), or the first
    /// whose given fields all match.
    pub(super) async fn load(&self, img: &mut Image<FileDev>) -> engine::Result<()> {
        match self {
            SnapshotPick::IdOrName(x) => {
                let table = img.snapshots().await?;
                let id = table[engine::find_snapshot(&table, x)?].id.clone();
                img.load_snapshot_tmp(|s| s.id == id).await
            }
            SnapshotPick::Fields { id, name } => {
                img.load_snapshot_tmp(|s| {
                    id.as_ref().is_none_or(|i| s.id == *i)
                        && name.as_ref().is_none_or(|n| s.name == *n)
                })
                .await
            }
        }
    }
}
