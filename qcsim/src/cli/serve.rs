//! `qcsim serve`: the guest view of an image exported over NBD (the `nbd`
//! crate's server, on a Unix socket or TCP), so that QEMU, the kernel's
//! NBD client or anything else that speaks NBD uses the image through the
//! engine. The image is opened (and locked) first, then the socket is
//! made, so a socket that exists is one that answers. SIGINT or SIGTERM
//! stops the server: requests already started finish and are answered,
//! then the image gets the clean close every command gives it (flush,
//! refcounts written back, dirty bit cleared) and a Unix socket's file is
//! removed. With `--record TRACE`, every request clients send is written
//! to a trace (`serve::record`).

mod image;
mod record;

use std::path::PathBuf;
use std::sync::Arc;

use anyhow::{bail, Context};
use nbd::{Export, Limits, Listener, Server};
use signal_hook::consts::{SIGINT, SIGTERM};
use signal_hook::iterator::Signals;
use tools::files::{open_image, Format, OpenOptions};

use image::ImageExport;
use record::Recording;

#[derive(clap::Args)]
pub struct Args {
    /// Listen on this Unix socket (it must not exist; removed at exit).
    #[arg(long, value_name = "PATH", conflicts_with_all = ["port", "bind"])]
    pub socket: Option<PathBuf>,
    /// Listen on this TCP port (0: one the system picks, printed).
    #[arg(long, value_name = "N")]
    pub port: Option<u16>,
    /// The address to listen on with --port.
    #[arg(
        long,
        value_name = "ADDR",
        requires = "port",
        default_value = "127.0.0.1"
    )]
    pub bind: String,
    /// Export the image read-only (opened read-only).
    #[arg(short = 'r', long = "read-only")]
    pub read_only: bool,
    /// Image format (raw or qcow2); probed when omitted.
    #[arg(short = 'f', long = "format", value_name = "FMT")]
    pub format: Option<String>,
    /// Bypass the host page cache (O_DIRECT), as qemu-img's `-t none`.
    #[arg(short = 'n', long = "nocache")]
    pub nocache: bool,
    /// Write every request clients send to this trace file.
    #[arg(long, value_name = "TRACE")]
    pub record: Option<PathBuf>,
    /// Image file.
    pub file: PathBuf,
}

pub fn run(args: Args) -> anyhow::Result<i32> {
    if args.socket.is_none() && args.port.is_none() {
        bail!("say where to listen: --socket PATH or --port N");
    }
    let format = args
        .format
        .as_deref()
        .map(str::parse::<Format>)
        .transpose()?;
    let opts = OpenOptions {
        format,
        read_only: args.read_only,
        direct: args.nocache,
        ..OpenOptions::default()
    };
    // Before anything can be served: a signal from now on stops the server
    // cleanly instead of killing the process with the image open.
    let mut signals = Signals::new([SIGINT, SIGTERM]).context("installing signal handlers")?;
    // The trace file first: a bad path fails before the image is opened.
    let trace = match &args.record {
        Some(path) => Some(
            std::fs::File::create(path)
                .with_context(|| format!("{}: cannot write the trace", path.display()))?,
        ),
        None => None,
    };
    let disk = futures::executor::block_on(open_image(&args.file, &opts))?;
    let export = ImageExport::new(disk, args.file.clone(), args.read_only);
    let listener = match &args.socket {
        Some(path) => Listener::unix(path),
        None => {
            let port = args.port.expect("checked above");
            // An IPv6 address needs brackets before its port.
            let addr = if args.bind.contains(':') && !args.bind.starts_with('[') {
                format!("[{}]:{port}", args.bind)
            } else {
                format!("{}:{port}", args.bind)
            };
            Listener::tcp(&addr)
        }
    };
    let listener = match listener {
        Ok(l) => l,
        Err(e) => {
            close(export, &args)?;
            return Err(e.into());
        }
    };
    let info = export.info();
    eprintln!(
        "qcsim serve: {} ({} bytes{}) on {}",
        args.file.display(),
        info.size,
        if info.read_only { ", read-only" } else { "" },
        listener.describe()
    );
    let log: nbd::Log = Arc::new(|line: &str| eprintln!("qcsim serve: {line}"));
    let server = Server::new(listener, Limits::default(), log);
    let stop = server.shutdown_handle();
    let handle = signals.handle();
    let watcher = std::thread::spawn(move || {
        // The first signal stops the server; later ones are taken here too
        // (not killing the process) while the image closes.
        if let Some(sig) = signals.forever().next() {
            eprintln!("qcsim serve: signal {sig}: finishing requests, closing the image");
            stop.shutdown();
        }
    });

    // The image is closed however serving ends.
    let (export, served) = match (&args.record, trace) {
        (None, _) | (_, None) => {
            let (export, served) = server.run(export);
            (export, served.map_err(anyhow::Error::new))
        }
        (Some(path), Some(trace)) => {
            let header = vec![format!(
                "recorded by qcsim serve from {} ({} bytes)",
                args.file.display(),
                info.size
            )];
            match Recording::start(export, trace, path, &header) {
                Err((export, e)) => (
                    export,
                    Err(anyhow::Error::new(e)
                        .context(format!("{}: cannot write the trace", path.display()))),
                ),
                Ok(recording) => {
                    let (recording, served) = server.run(recording);
                    let (export, written) = recording.finish();
                    let result = served.map_err(anyhow::Error::new).and_then(|()| {
                        written.map_err(|(path, e)| {
                            anyhow::anyhow!("{}: writing the trace: {e}", path.display())
                        })
                    });
                    (export, result)
                }
            }
        }
    };
    handle.close();
    let _ = watcher.join();
    let closed = close(export, &args);
    served?;
    closed?;
    eprintln!("qcsim serve: {} closed", args.file.display());
    Ok(0)
}

fn close(export: ImageExport, args: &Args) -> anyhow::Result<()> {
    futures::executor::block_on(export.close())
        .with_context(|| format!("closing {}", args.file.display()))
}
