//! `qemu-img rebase`: give a qcow2 image another backing file (or none).
//! Unsafe mode (`-u`) only rewrites the name in the header. Safe mode
//! keeps what the guest sees: every cluster the image does not allocate
//! and where the old backing chain and the new one differ is first copied
//! into the image (the old chain's data, whole clusters), and only then
//! does the header name the new backing file.

use std::path::Path;

use engine::Status;

use crate::files::{open_image, resolve_backing_path, Disk, Format, OpenError, OpenOptions};

/// Bytes compared at a time (whole clusters of any size up to it).
const CHUNK: u64 = 1 << 20;

/// What to rebase onto.
#[derive(Debug, Clone, Default)]
pub struct RebaseOptions {
    /// The new backing file's name as it is to be stored; `None` or empty
    /// for no backing file.
    pub backing: Option<String>,
    /// Its format's driver name, stored as given: required with a backing
    /// file, as QEMU requires it (an image whose backing format is probed
    /// can be turned into another format by what a guest writes). In safe
    /// mode the new backing file is opened with it, so it must then be a
    /// format qcsim reads (`raw` or `qcow2`).
    pub backing_format: Option<String>,
    /// `-u`: the header only.
    pub unsafe_mode: bool,
    /// `-c`: the clusters copied in are written compressed.
    pub compress: bool,
}

#[derive(Debug, thiserror::Error)]
pub enum RebaseError {
    #[error(transparent)]
    Open(#[from] OpenError),
    /// The new backing file could not be opened (safe mode).
    #[error("Could not open new backing file '{name}': {error}")]
    NewBacking { name: String, error: OpenError },
    #[error("{0}: rebase needs a qcow2 image")]
    NotQcow2(String),
    #[error("Could not change the backing file to '{0}': backing format must be specified")]
    FormatRequired(String),
    /// Safe mode with a backing format qcsim cannot open.
    #[error("Could not open new backing file '{name}': Unknown driver '{format}'")]
    UnknownFormat { name: String, format: String },
    #[error(transparent)]
    Engine(#[from] engine::Error),
}

/// Rebase the image at `path` (opened with `opts`, made writable).
pub async fn rebase_image(
    path: &Path,
    opts: &OpenOptions,
    r: &RebaseOptions,
) -> Result<(), RebaseError> {
    let name = r.backing.as_deref().filter(|n| !n.is_empty());
    let open = OpenOptions {
        read_only: false,
        backing: !r.unsafe_mode,
        ..opts.clone()
    };
    // Refused before anything is opened or copied: a rebase that fails
    // leaves the image as it was.
    let format_name = r.backing_format.as_deref();
    if let (Some(n), None) = (name, format_name) {
        return Err(RebaseError::FormatRequired(n.to_owned()));
    }
    let mut disk = open_image(path, &open).await?;
    let Disk::Qcow2(img) = &mut disk else {
        return Err(RebaseError::NotQcow2(path.display().to_string()));
    };
    if !r.unsafe_mode {
        let new = match name {
            None => None,
            Some(n) => {
                let p = resolve_backing_path(path, n);
                let new_err = |error| RebaseError::NewBacking {
                    name: n.to_owned(),
                    error,
                };
                let f = format_name.unwrap_or_default();
                let format = f
                    .parse::<Format>()
                    .map_err(|_| RebaseError::UnknownFormat {
                        name: n.to_owned(),
                        format: f.to_owned(),
                    })?;
                let ro = OpenOptions {
                    read_only: true,
                    format: Some(format),
                    ..opts.clone()
                };
                Some(open_image(&p, &ro).await.map_err(new_err)?)
            }
        };
        copy_differences(img, new.as_ref(), r.compress).await?;
        if let Some(n) = new {
            n.close().await?;
        }
    }
    img.set_backing_file(name, format_name).await?;
    disk.close().await?;
    Ok(())
}

/// Copy into `img` every cluster it does not allocate where its current
/// chain and `new` (zeroes where `None` or past its end) differ; with
/// `compress`, the data clusters compressed (the zero ones past the old
/// backing file's end stay zero clusters).
async fn copy_differences(
    img: &engine::Image<engine::dev::FileDev>,
    new: Option<&Disk>,
    compress: bool,
) -> Result<(), RebaseError> {
    let size = img.virtual_size();
    let cs = img.cluster_size();
    let chunk = CHUNK.max(cs);
    let new_size = new.map_or(0, Disk::virtual_size);
    let old_size = match img.backing() {
        None => 0,
        Some(engine::Backing::Raw(d)) => engine::dev::BlockDev::len(d),
        Some(engine::Backing::Qcow2(i)) => i.virtual_size(),
    };
    let mut old_buf = vec![0u8; chunk as usize];
    let mut new_buf = vec![0u8; chunk as usize];
    let mut pos = 0;
    while pos < size {
        let (status, n) = img.block_status(pos, (size - pos).min(chunk)).await?;
        let end = pos + n;
        if matches!(status, Status::Data | Status::Zero) {
            pos = end;
            continue;
        }
        // Cluster by cluster, so that a difference is copied as a whole
        // cluster (no partial-cluster copy-on-write in the image).
        let mut c = pos;
        while c < end {
            let ce = (c - c % cs + cs).min(end);
            let len = (ce - c) as usize;
            img.read(c, &mut old_buf[..len]).await?;
            new_buf[..len].fill(0);
            if let Some(d) = new {
                if c < new_size {
                    let l = (new_size - c).min(len as u64) as usize;
                    d.read(c, &mut new_buf[..l]).await?;
                }
            }
            if old_buf[..len] != new_buf[..len] {
                if c >= old_size {
                    // Past the old backing file's end, what the image
                    // showed is zeroes: a zero cluster, as QEMU writes
                    // it, not a data cluster.
                    img.write_zeroes(c, len as u64, false).await?;
                } else if compress {
                    // A whole cluster (or the disk's last part of one):
                    // the copy is cluster by cluster from its start.
                    img.write_compressed(c, &old_buf[..len]).await?;
                } else {
                    img.write(c, &old_buf[..len]).await?;
                }
            }
            c = ce;
        }
        pos = end;
    }
    img.flush().await?;
    Ok(())
}
