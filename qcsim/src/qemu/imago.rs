//! `--driver imago`: the Rust qcow2 library imago as the guest's driver.
//! imago's storage trait needs `Send + Sync`, which the simulated disk
//! (`Rc`-based, single-threaded) is not, so imago runs on a thread of its
//! own and its storage is an NBD client of the epoch's simulated disk
//! (`qemu::disk`), exactly the storage QEMU gets. imago's own scheduling
//! is not seeded (it runs on `futures`' `block_on`), as QEMU's is not.
//! A crash is the thread told to stop without flushing anything.
//!
//! Nothing is opened implicitly (`DenyImplicitOpenGate`): an external
//! data file is given as a second NBD storage, the data file's simulated
//! disk, and a backing file as an image opened by the harness on the
//! backing file's bytes held in memory (read only, never crashed, as
//! in-process runs never crash theirs).
//!
//! Why not the deterministic executor: imago's futures would poll there,
//! but every storage it takes must be `Send + Sync`, and the simulated
//! disk and its `Sim` are `Rc`-based by design; a storage that is
//! `Send + Sync` has to reach the disk across threads (here, over NBD),
//! and then the disk's latencies run on its thread's clock, not on the
//! executor's, so the executor would order nothing imago does.

use std::fmt;
use std::io;
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::sync::mpsc;
use std::sync::Mutex;

use anyhow::{anyhow, Context};
use imago::io_buffers::{IoVector, IoVectorMut};
use imago::qcow2::Qcow2;
use imago::raw::Raw;
use imago::storage::drivers::CommonStorageHelper;
use imago::{DenyImplicitOpenGate, FormatAccess, FormatDriverBuilder, Storage};

use super::guest::Guest;

/// imago's storage: our NBD client of a simulated disk, or a backing
/// file's bytes in memory.
struct NbdStorage {
    backend: Backend,
    size: u64,
    helper: CommonStorageHelper,
}

enum Backend {
    Nbd(Mutex<nbd::Client<UnixStream>>),
    /// Read only: a backing file's content.
    Memory(Vec<u8>),
}

impl fmt::Debug for NbdStorage {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "NbdStorage({} bytes)", self.size)
    }
}

impl fmt::Display for NbdStorage {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.backend {
            Backend::Nbd(_) => write!(f, "the simulated disk over NBD"),
            Backend::Memory(_) => write!(f, "the backing file in memory"),
        }
    }
}

impl NbdStorage {
    /// Connect to the simulated disk serving on `socket`.
    fn connect(socket: &Path) -> anyhow::Result<NbdStorage> {
        let stream = super::guest::connect(socket)?;
        let client = nbd::Client::connect(stream).context("imago's storage connecting")?;
        let size = client.export().size;
        Ok(NbdStorage {
            backend: Backend::Nbd(Mutex::new(client)),
            size,
            helper: CommonStorageHelper::default(),
        })
    }

    fn memory(bytes: Vec<u8>) -> NbdStorage {
        NbdStorage {
            size: bytes.len() as u64,
            backend: Backend::Memory(bytes),
            helper: CommonStorageHelper::default(),
        }
    }

    fn with<T>(
        &self,
        f: impl FnOnce(&mut nbd::Client<UnixStream>) -> Result<T, nbd::ClientError>,
    ) -> io::Result<T> {
        let Backend::Nbd(client) = &self.backend else {
            return Err(io::Error::new(
                io::ErrorKind::PermissionDenied,
                "the backing file is read only",
            ));
        };
        let mut c = client
            .lock()
            .map_err(|_| io::Error::other("the storage's lock is poisoned"))?;
        f(&mut c).map_err(io::Error::other)
    }

    /// Read `buf.len()` bytes at `offset`.
    fn read_at(&self, offset: u64, buf: &mut [u8]) -> io::Result<()> {
        match &self.backend {
            Backend::Nbd(_) => self.with(|c| c.read(offset, buf)),
            Backend::Memory(bytes) => {
                let end = offset
                    .checked_add(buf.len() as u64)
                    .filter(|&e| e <= bytes.len() as u64)
                    .ok_or_else(|| {
                        io::Error::new(io::ErrorKind::UnexpectedEof, "read past the backing file")
                    })?;
                buf.copy_from_slice(&bytes[offset as usize..end as usize]);
                Ok(())
            }
        }
    }
}

impl Storage for NbdStorage {
    fn size(&self) -> io::Result<u64> {
        Ok(self.size)
    }

    async unsafe fn pure_readv(&self, mut bufv: IoVectorMut<'_>, offset: u64) -> io::Result<()> {
        let mut tmp = vec![0u8; bufv.len() as usize];
        self.read_at(offset, &mut tmp)?;
        bufv.copy_from_slice(&tmp);
        Ok(())
    }

    async unsafe fn pure_writev(&self, bufv: IoVector<'_>, offset: u64) -> io::Result<()> {
        let mut tmp = vec![0u8; bufv.len() as usize];
        bufv.copy_into_slice(&mut tmp);
        self.with(|c| c.write(offset, &tmp, false))
    }

    async unsafe fn pure_write_zeroes(&self, offset: u64, length: u64) -> io::Result<()> {
        self.with(|c| c.write_zeroes(offset, length, false))
    }

    async unsafe fn pure_write_allocated_zeroes(&self, offset: u64, length: u64) -> io::Result<()> {
        self.with(|c| c.write_zeroes(offset, length, true))
    }

    async unsafe fn pure_discard(&self, offset: u64, length: u64) -> io::Result<()> {
        self.with(|c| c.trim(offset, length))
    }

    /// No buffers of its own: nothing to flush.
    async fn flush(&self) -> io::Result<()> {
        Ok(())
    }

    /// The device flush (nothing for the backing file, never written).
    async fn sync(&self) -> io::Result<()> {
        match self.backend {
            Backend::Nbd(_) => self.with(|c| c.flush()),
            Backend::Memory(_) => Ok(()),
        }
    }

    async unsafe fn invalidate_cache(&self) -> io::Result<()> {
        Ok(())
    }

    fn get_storage_helper(&self) -> &CommonStorageHelper {
        &self.helper
    }
}

/// A case's backing file as imago is given it.
#[derive(Debug, Clone)]
pub struct ImagoBacking {
    /// The file's bytes.
    pub bytes: Vec<u8>,
    /// qcow2 (else raw).
    pub qcow2: bool,
}

/// What imago opens: the image's disk, its data file's disk if it has
/// one, its backing file if it has one.
pub struct ImagoOpen<'a> {
    pub disk: &'a Path,
    pub data: Option<&'a Path>,
    pub backing: Option<&'a ImagoBacking>,
}

type Reply<T> = mpsc::Sender<io::Result<T>>;

enum Cmd {
    Read(u64, usize, Reply<Vec<u8>>),
    Write(u64, Vec<u8>, Reply<()>),
    Zeroes(u64, u64, Reply<()>),
    Trim(u64, u64, Reply<()>),
    Flush(Reply<()>),
    /// Flush and close (a clean end).
    Close(Reply<()>),
}

/// imago on its thread, serving the guest's requests.
pub struct ImagoGuest {
    tx: Option<mpsc::Sender<Cmd>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl ImagoGuest {
    /// Open the image on the simulated disk at `open.disk` with imago,
    /// its data file and backing file given explicitly.
    pub fn start(open: &ImagoOpen<'_>) -> anyhow::Result<ImagoGuest> {
        let storage = NbdStorage::connect(open.disk)?;
        let data = match open.data {
            None => None,
            Some(socket) => Some(NbdStorage::connect(socket).context("the data file's disk")?),
        };
        let backing = open.backing.cloned();
        let (tx, rx) = mpsc::channel::<Cmd>();
        let (ready_tx, ready_rx) = mpsc::channel::<io::Result<()>>();
        let thread = std::thread::Builder::new()
            .name("imago".into())
            .spawn(move || futures::executor::block_on(serve(storage, data, backing, rx, ready_tx)))
            .context("starting imago's thread")?;
        match ready_rx.recv() {
            Ok(Ok(())) => Ok(ImagoGuest {
                tx: Some(tx),
                thread: Some(thread),
            }),
            Ok(Err(e)) => {
                let _ = thread.join();
                Err(anyhow!("imago cannot open the image: {e}"))
            }
            Err(_) => {
                let _ = thread.join();
                Err(anyhow!("imago's thread ended while opening the image"))
            }
        }
    }

    fn ask<T>(&mut self, make: impl FnOnce(Reply<T>) -> Cmd) -> anyhow::Result<T> {
        let (tx, rx) = mpsc::channel();
        self.tx
            .as_ref()
            .ok_or_else(|| anyhow!("imago was stopped"))?
            .send(make(tx))
            .map_err(|_| anyhow!("imago's thread ended"))?;
        Ok(rx.recv().map_err(|_| anyhow!("imago's thread ended"))??)
    }
}

/// The backing file opened by imago on its bytes, read only.
async fn open_backing(b: ImagoBacking) -> io::Result<FormatAccess<NbdStorage>> {
    let storage = NbdStorage::memory(b.bytes);
    Ok(if b.qcow2 {
        FormatAccess::new(
            Qcow2::<NbdStorage>::builder(storage)
                .write(false)
                .open(DenyImplicitOpenGate::default())
                .await?,
        )
    } else {
        FormatAccess::new(
            Raw::<NbdStorage>::builder(storage)
                .write(false)
                .open(DenyImplicitOpenGate::default())
                .await?,
        )
    })
}

/// The image's version, read from its header before imago opens it: on
/// version 2 imago has neither zero clusters nor discards that unmap.
fn version(storage: &NbdStorage) -> io::Result<u32> {
    let mut h = [0u8; 8];
    storage.read_at(0, &mut h)?;
    Ok(u32::from_be_bytes([h[4], h[5], h[6], h[7]]))
}

async fn serve(
    storage: NbdStorage,
    data: Option<NbdStorage>,
    backing: Option<ImagoBacking>,
    rx: mpsc::Receiver<Cmd>,
    ready: mpsc::Sender<io::Result<()>>,
) {
    let opened = async {
        let v2 = version(&storage)? < 3;
        let mut builder = Qcow2::<NbdStorage>::builder(storage).write(true);
        if let Some(b) = backing {
            builder = builder.backing(Some(open_backing(b).await?));
        }
        if data.is_some() {
            builder = builder.data_file(data);
        }
        let q = builder.open(DenyImplicitOpenGate::default()).await?;
        io::Result::Ok((q, v2))
    }
    .await;
    let (mut image, v2) = match opened {
        Ok((q, v2)) => {
            let _ = ready.send(Ok(()));
            (FormatAccess::new(q), v2)
        }
        Err(e) => {
            let _ = ready.send(Err(e));
            return;
        }
    };
    // A closed channel without Close is the crash: nothing more is written.
    while let Ok(cmd) = rx.recv() {
        match cmd {
            Cmd::Read(offset, len, r) => {
                let mut buf = vec![0u8; len];
                let got = image.read(&mut buf[..], offset).await.map(|()| buf);
                let _ = r.send(got);
            }
            Cmd::Write(offset, data, r) => {
                let _ = r.send(image.write(&data[..], offset).await);
            }
            // Version 2 has no zero clusters, and imago refuses to make
            // them there ("version 3 required"): the zeroes are written,
            // as a block layer writes them for a format without them.
            Cmd::Zeroes(offset, len, r) if v2 => {
                let zeroes = vec![0u8; len as usize];
                let _ = r.send(image.write(&zeroes[..], offset).await);
            }
            Cmd::Zeroes(offset, len, r) => {
                let _ = r.send(image.write_zeroes(offset, len).await);
            }
            // On version 2 imago's discard that reads back zeroes needs
            // zero clusters too; the one that leaves the clusters
            // unallocated (the backing file's data, or zeroes, shows
            // through) works there, and is what a discard may leave.
            Cmd::Trim(offset, len, r) if v2 => {
                let _ = r.send(image.discard_to_backing(offset, len).await);
            }
            Cmd::Trim(offset, len, r) => {
                let _ = r.send(image.discard_to_any(offset, len).await);
            }
            Cmd::Flush(r) => {
                let done = match image.flush().await {
                    Ok(()) => image.sync().await,
                    Err(e) => Err(e),
                };
                let _ = r.send(done);
            }
            Cmd::Close(r) => {
                let done = match image.flush().await {
                    Ok(()) => image.sync().await,
                    Err(e) => Err(e),
                };
                let _ = r.send(done);
                return;
            }
        }
    }
}

impl Guest for ImagoGuest {
    fn read(&mut self, offset: u64, buf: &mut [u8]) -> anyhow::Result<()> {
        let got = self.ask(|r| Cmd::Read(offset, buf.len(), r))?;
        buf.copy_from_slice(&got);
        Ok(())
    }

    fn write(&mut self, offset: u64, data: &[u8]) -> anyhow::Result<()> {
        let data = data.to_vec();
        self.ask(|r| Cmd::Write(offset, data, r))
    }

    fn write_zeroes(&mut self, offset: u64, len: u64, _no_hole: bool) -> anyhow::Result<()> {
        self.ask(|r| Cmd::Zeroes(offset, len, r))
    }

    fn trim(&mut self, offset: u64, len: u64) -> anyhow::Result<()> {
        self.ask(|r| Cmd::Trim(offset, len, r))
    }

    fn flush(&mut self) -> anyhow::Result<()> {
        self.ask(Cmd::Flush)
    }

    fn crash(mut self: Box<Self>) {
        // The channel closes: imago stops where it stands, its caches
        // dropped unwritten, and its storage connection closes.
        self.tx = None;
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }

    fn close(mut self: Box<Self>) -> anyhow::Result<()> {
        let closed = self.ask(Cmd::Close);
        self.tx = None;
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
        closed
    }
}
