//! `--driver imago`: the Rust qcow2 library imago as the guest's driver.
//! imago's storage trait needs `Send + Sync`, which the simulated disk
//! (`Rc`-based, single-threaded) is not, so imago runs on a thread of its
//! own and its storage is an NBD client of the epoch's simulated disk
//! (`qemu::disk`), exactly the storage QEMU gets. imago's own scheduling
//! is not seeded (it runs on `futures`' `block_on`), as QEMU's is not.
//! A crash is the thread told to stop without flushing anything.

use std::fmt;
use std::io;
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::sync::mpsc;
use std::sync::Mutex;

use anyhow::{anyhow, Context};
use imago::io_buffers::{IoVector, IoVectorMut};
use imago::qcow2::Qcow2;
use imago::storage::drivers::CommonStorageHelper;
use imago::{DenyImplicitOpenGate, FormatAccess, FormatDriverBuilder, Storage};

use super::guest::Guest;

/// imago's storage: our NBD client of the simulated disk.
struct NbdStorage {
    client: Mutex<nbd::Client<UnixStream>>,
    size: u64,
    helper: CommonStorageHelper,
}

impl fmt::Debug for NbdStorage {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "NbdStorage({} bytes)", self.size)
    }
}

impl fmt::Display for NbdStorage {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "the simulated disk over NBD")
    }
}

impl NbdStorage {
    fn with<T>(
        &self,
        f: impl FnOnce(&mut nbd::Client<UnixStream>) -> Result<T, nbd::ClientError>,
    ) -> io::Result<T> {
        let mut c = self
            .client
            .lock()
            .map_err(|_| io::Error::other("the storage's lock is poisoned"))?;
        f(&mut c).map_err(io::Error::other)
    }
}

impl Storage for NbdStorage {
    fn size(&self) -> io::Result<u64> {
        Ok(self.size)
    }

    async unsafe fn pure_readv(&self, mut bufv: IoVectorMut<'_>, offset: u64) -> io::Result<()> {
        let mut tmp = vec![0u8; bufv.len() as usize];
        self.with(|c| c.read(offset, &mut tmp))?;
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

    /// The device flush.
    async fn sync(&self) -> io::Result<()> {
        self.with(|c| c.flush())
    }

    async unsafe fn invalidate_cache(&self) -> io::Result<()> {
        Ok(())
    }

    fn get_storage_helper(&self) -> &CommonStorageHelper {
        &self.helper
    }
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
    /// Open the image on the simulated disk at `disk_socket` with imago.
    pub fn start(disk_socket: &Path) -> anyhow::Result<ImagoGuest> {
        let stream = super::guest::connect(disk_socket)?;
        let client = nbd::Client::connect(stream).context("imago's storage connecting")?;
        let size = client.export().size;
        let storage = NbdStorage {
            client: Mutex::new(client),
            size,
            helper: CommonStorageHelper::default(),
        };
        let (tx, rx) = mpsc::channel::<Cmd>();
        let (ready_tx, ready_rx) = mpsc::channel::<io::Result<()>>();
        let thread = std::thread::Builder::new()
            .name("imago".into())
            .spawn(move || futures::executor::block_on(serve(storage, rx, ready_tx)))
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

async fn serve(storage: NbdStorage, rx: mpsc::Receiver<Cmd>, ready: mpsc::Sender<io::Result<()>>) {
    let opened = Qcow2::<NbdStorage>::builder(storage)
        .write(true)
        .open(DenyImplicitOpenGate::default())
        .await;
    let mut image = match opened {
        Ok(q) => {
            let _ = ready.send(Ok(()));
            FormatAccess::new(q)
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
            Cmd::Zeroes(offset, len, r) => {
                let _ = r.send(image.write_zeroes(offset, len).await);
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
