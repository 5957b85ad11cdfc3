//! `qemu-img map`: where each range of the guest disk comes from, layer by
//! layer down the backing chain, as runs in qemu-img's terms (start,
//! length, depth, present, zero, data, compressed, and the host offset of
//! data), and its human and JSON layouts.

use std::path::{Path, PathBuf};

use engine::dev::{BlockDev, FileDev};
use engine::format::L2Mapping;
use engine::Status;
use engine::{Backing, Image};

use crate::files::{open_image, resolve_backing_path, Disk, OpenError, OpenOptions};

/// One run of the map.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MapEntry {
    pub start: u64,
    pub length: u64,
    /// How far down the chain the answer came from (0: the image itself).
    pub depth: usize,
    /// Some layer holds the range (data or zero clusters, or a raw file).
    pub present: bool,
    pub zero: bool,
    pub data: bool,
    /// The data is compressed clusters (which have no host offset).
    pub compressed: bool,
    /// Where the data is in `file`, for data.
    pub offset: Option<u64>,
    /// The file of the layer that answered, as QEMU names it.
    pub file: String,
}

impl MapEntry {
    /// Whether `next` continues this run, so the two print as one.
    fn merges(&self, next: &MapEntry) -> bool {
        self.start + self.length == next.start
            && self.depth == next.depth
            && self.present == next.present
            && self.zero == next.zero
            && self.data == next.data
            && self.compressed == next.compressed
            && self.file == next.file
            && match (self.offset, next.offset) {
                (None, None) => true,
                (Some(a), Some(b)) => a + self.length == b,
                _ => false,
            }
    }

    /// The entry as one object of qemu-img's JSON list.
    pub fn json(&self) -> String {
        let mut s = format!(
            "{{ \"start\": {}, \"length\": {}, \"depth\": {}, \"present\": {}, \"zero\": {}, \"data\": {}, \"compressed\": {}",
            self.start, self.length, self.depth, self.present, self.zero, self.data, self.compressed
        );
        if let Some(o) = self.offset {
            s.push_str(&format!(", \"offset\": {o}"));
        }
        s.push('}');
        s
    }
}

/// Why a map could not be made.
#[derive(Debug, thiserror::Error)]
pub enum MapError {
    #[error(transparent)]
    Open(#[from] OpenError),
    #[error("{path}: {error}")]
    Status {
        path: PathBuf,
        #[source]
        error: engine::Error,
    },
}

/// The layers of the chain, top first, each with its file's name.
enum Layer<'a> {
    /// With whether its data clusters' file extents are asked too (QEMU
    /// asks only for an image that looks metadata-preallocated).
    Qcow2(&'a Image<FileDev>, String, bool),
    Raw(u64, String),
}

/// Whether QEMU would ask the file under `image`'s data clusters for
/// holes: only when far more clusters are in use than the file takes
/// space for, as after `preallocation=metadata`.
async fn asks_file(image: &Image<FileDev>) -> Result<bool, engine::Error> {
    use std::os::unix::fs::MetadataExt;
    let dev = image.device();
    let Ok(meta) = std::fs::metadata(dev.path()) else {
        return Ok(false);
    };
    let cs = image.cluster_size();
    let allocated = meta.blocks() * 512 / cs;
    image
        .looks_preallocated(dev.len().div_ceil(cs), allocated)
        .await
}

fn layers<'a>(disk: &'a Disk, top: &Path) -> Vec<Layer<'a>> {
    let name = top.display().to_string();
    let mut out = Vec::new();
    let mut image = match disk {
        Disk::Raw(d) => {
            out.push(Layer::Raw(d.len(), name));
            return out;
        }
        Disk::Qcow2(i) => i.as_ref(),
    };
    let mut path = top.to_owned();
    out.push(Layer::Qcow2(image, name, false));
    while let (Some(backing), Some((bname, _))) = (image.backing(), image.backing_spec()) {
        path = resolve_backing_path(&path, &bname);
        let name = path.display().to_string();
        match backing {
            Backing::Raw(d) => {
                out.push(Layer::Raw(d.len(), name));
                break;
            }
            Backing::Qcow2(i) => {
                out.push(Layer::Qcow2(i, name, false));
                image = i;
            }
        }
    }
    out
}

/// The map of the image at `path`, its runs merged as qemu-img merges
/// them.
pub async fn map_image(path: &Path, opts: &OpenOptions) -> Result<Vec<MapEntry>, MapError> {
    let opts = OpenOptions {
        read_only: true,
        ..opts.clone()
    };
    let disk = open_image(path, &opts).await?;
    let mut chain = layers(&disk, path);
    for layer in &mut chain {
        if let Layer::Qcow2(image, file, asks) = layer {
            *asks = asks_file(image).await.map_err(|error| MapError::Status {
                path: PathBuf::from(&*file),
                error,
            })?;
        }
    }
    let size = disk.virtual_size();
    let mut entries: Vec<MapEntry> = Vec::new();
    let mut pos = 0;
    while pos < size {
        let e = entry_at(&chain, pos, size - pos).await?;
        pos += e.length;
        match entries.last_mut() {
            Some(last) if last.merges(&e) => last.length += e.length,
            _ => entries.push(e),
        }
    }
    drop(chain);
    drop(disk);
    Ok(entries)
}

/// How many clusters one block status question covers at most.
const STATUS_CLUSTERS: u64 = 1024;

/// The data run at `pos` (of at most `n` bytes) of `image`, one cluster at
/// a time: the clusters of a run need not be contiguous on the host.
/// `base` is the entry as far as the layer knows it.
async fn data_entry(
    image: &Image<FileDev>,
    pos: u64,
    n: u64,
    asks_file: bool,
    base: MapEntry,
) -> engine::Result<MapEntry> {
    let cluster = image.cluster_size();
    let n = n.min(cluster - pos % cluster);
    let (host, compressed) = match image.mapping_at(pos).await? {
        L2Mapping::Normal { host, .. } => (Some(host + pos % cluster), false),
        L2Mapping::Compressed { .. } => (None, true),
        _ => (None, false),
    };
    // As QEMU asks the file under a data cluster of a preallocated image:
    // a hole there (a cluster never written) reads as zeroes, and the
    // answer ends where the file's extent does.
    let dev = image.data_device().unwrap_or(image.device());
    let extent = host.filter(|_| asks_file).and_then(|h| dev.extent_at(h, n));
    let (n, zero) = match extent {
        Some((data, len)) if len > 0 => (len, !data),
        _ => (n, false),
    };
    Ok(MapEntry {
        length: n,
        zero,
        data: true,
        compressed,
        offset: host,
        ..base
    })
}

/// The zero run at `pos` (of at most `n` bytes) of `image`: a zero
/// cluster that keeps its host cluster has an offset, one cluster at a
/// time as for data.
async fn zero_entry(
    image: &Image<FileDev>,
    pos: u64,
    n: u64,
    base: MapEntry,
) -> engine::Result<MapEntry> {
    let cluster = image.cluster_size();
    let host = image.zero_host_offset(pos).await?;
    let n = if host.is_some() {
        n.min(cluster - pos % cluster)
    } else {
        n
    };
    Ok(MapEntry {
        length: n,
        zero: true,
        offset: host,
        ..base
    })
}

/// The run at `pos`, at most `max` bytes, from the first layer that has it.
async fn entry_at(chain: &[Layer<'_>], pos: u64, max: u64) -> Result<MapEntry, MapError> {
    let mut len = max;
    for (depth, layer) in chain.iter().enumerate() {
        let last = depth + 1 == chain.len();
        match layer {
            Layer::Raw(file_len, file) => {
                if pos >= *file_len {
                    break;
                }
                return Ok(MapEntry {
                    start: pos,
                    length: len.min(file_len - pos),
                    depth,
                    present: true,
                    zero: false,
                    data: true,
                    compressed: false,
                    offset: Some(pos),
                    file: file.clone(),
                });
            }
            Layer::Qcow2(image, file, asks_file) => {
                if pos >= image.virtual_size() {
                    break;
                }
                // A bounded question: data runs are answered a cluster at
                // a time, and block status scans as far as it is asked,
                // so an unbounded one would make a map quadratic in the
                // size of a fully allocated (preallocated) image. The
                // pieces merge back into the same runs.
                let avail = len
                    .min(image.virtual_size() - pos)
                    .min(image.cluster_size() * STATUS_CLUSTERS);
                let status_err = |error| MapError::Status {
                    path: PathBuf::from(file),
                    error,
                };
                let (status, n) = image.block_status(pos, avail).await.map_err(status_err)?;
                let base = MapEntry {
                    start: pos,
                    length: n,
                    depth,
                    present: true,
                    zero: false,
                    data: false,
                    compressed: false,
                    offset: None,
                    file: file.clone(),
                };
                match status {
                    Status::Data => {
                        return data_entry(image, pos, n, *asks_file, base)
                            .await
                            .map_err(status_err)
                    }
                    Status::Zero => {
                        return zero_entry(image, pos, n, base).await.map_err(status_err)
                    }
                    Status::Unallocated => {
                        return Ok(MapEntry {
                            present: false,
                            zero: true,
                            ..base
                        });
                    }
                    Status::Backing if !last => len = n,
                    Status::Backing => {
                        return Ok(MapEntry {
                            present: false,
                            zero: true,
                            ..base
                        })
                    }
                }
            }
        }
    }
    // Past the end of every lower layer: reads as zeroes.
    let depth = chain.len() - 1;
    let file = match &chain[depth] {
        Layer::Qcow2(_, f, _) | Layer::Raw(_, f) => f.clone(),
    };
    Ok(MapEntry {
        start: pos,
        length: len,
        depth,
        present: false,
        zero: true,
        data: false,
        compressed: false,
        offset: None,
        file,
    })
}

/// qemu-img map's human layout: the runs that hold data other than
/// zeroes, where they are.
pub fn human(entries: &[MapEntry]) -> String {
    let hex = |v: u64| {
        if v == 0 {
            "0".to_owned()
        } else {
            format!("{v:#x}")
        }
    };
    let mut s = format!(
        "{:<16}{:<16}{:<16}{}\n",
        "Offset", "Length", "Mapped to", "File"
    );
    for e in entries {
        if let (true, false, Some(o)) = (e.data, e.zero, e.offset) {
            s.push_str(&format!(
                "{:<16}{:<16}{:<16}{}\n",
                hex(e.start),
                hex(e.length),
                hex(o),
                e.file
            ));
        }
    }
    s
}

/// qemu-img map's JSON layout: one object a line, in a list.
pub fn json(entries: &[MapEntry]) -> String {
    if entries.is_empty() {
        // An empty disk: qemu-img still lists one empty, absent run.
        let empty = MapEntry {
            start: 0,
            length: 0,
            depth: 0,
            present: false,
            zero: false,
            data: false,
            compressed: false,
            offset: None,
            file: String::new(),
        };
        return format!("[{}]\n", empty.json());
    }
    let body: Vec<String> = entries.iter().map(MapEntry::json).collect();
    format!("[{}]\n", body.join(",\n"))
}
