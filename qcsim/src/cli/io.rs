//! `qcsim io`: qemu-io commands (`tools::io`) on an image file. Commands
//! come from `-c` options, in order, or, as in qemu-io, one per line on
//! standard input, each run as soon as its line is read (with a `qemu-io> `
//! prompt on a terminal) until end of input or `quit`; all run on one
//! session, so a session on standard input holds the image open (and
//! locked) between commands. As in qemu-io, a failing command is reported
//! and the next one still runs; the exit code is 1 if any failed.

use std::io::{BufRead, IsTerminal, Write};
use std::path::PathBuf;

use anyhow::Context;
use tools::files::{Format, OpenOptions};
use tools::io::{parse_command, Cmd, Session};

#[derive(clap::Args)]
pub struct Args {
    /// Command to run (repeatable, run in order); without any, commands are
    /// read from standard input, one per line.
    #[arg(short = 'c', long = "cmd", value_name = "CMD")]
    pub commands: Vec<String>,
    /// Image format (raw or qcow2); probed when omitted.
    #[arg(short = 'f', long = "format", value_name = "FMT")]
    pub format: Option<String>,
    /// Open the image read-only.
    #[arg(short = 'r', long = "read-only")]
    pub read_only: bool,
    /// Force sharing: with -r, open an image other processes have open for
    /// writing, and do not keep them from writing it (qemu-io's -U).
    #[arg(short = 'U', long = "force-share")]
    pub force_share: bool,
    /// Bypass the host page cache (O_DIRECT).
    #[arg(short = 'n', long = "nocache")]
    pub nocache: bool,
    /// Image file.
    pub file: PathBuf,
}

/// Where commands come from: the `-c` list, or standard input read one
/// line at a time, only when the previous command is done.
enum Source {
    List(std::vec::IntoIter<String>),
    Stdin {
        input: std::io::StdinLock<'static>,
        prompt: bool,
    },
}

impl Source {
    /// The next command line, `None` at the end.
    fn next_line(&mut self) -> anyhow::Result<Option<String>> {
        match self {
            Source::List(lines) => Ok(lines.next()),
            Source::Stdin { input, prompt } => {
                if *prompt {
                    let mut out = crate::output::stdout();
                    write!(out, "qemu-io> ")?;
                    out.flush()?;
                }
                let mut line = String::new();
                let n = input
                    .read_line(&mut line)
                    .context("reading commands from standard input")?;
                if n == 0 {
                    if *prompt {
                        println!();
                    }
                    return Ok(None);
                }
                Ok(Some(line))
            }
        }
    }
}

pub fn run(args: Args) -> anyhow::Result<i32> {
    let format = args
        .format
        .as_deref()
        .map(str::parse::<Format>)
        .transpose()?;
    let opts = OpenOptions {
        format,
        read_only: args.read_only,
        direct: args.nocache,
        force_share: args.force_share,
        ..OpenOptions::default()
    };
    let mut source = if args.commands.is_empty() {
        let input = std::io::stdin().lock();
        let prompt = input.is_terminal();
        Source::Stdin { input, prompt }
    } else {
        Source::List(args.commands.clone().into_iter())
    };
    futures::executor::block_on(async {
        // Open errors already name the file (and the backing file at fault).
        let session = Session::open(&args.file, &opts).await?;
        // The image is closed however the commands end: a command whose
        // output can no longer be written (the reader went away) stops
        // them, but what they wrote is still written back.
        let ran = async {
            let mut ok = true;
            while let Some(line) = source.next_line()? {
                // The lock is taken per command, so that the prompt can
                // print between commands; each command's output is flushed
                // before the next line is read, so a reader on a pipe sees
                // it at once.
                let mut out = crate::output::stdout();
                match parse_command(&line) {
                    Ok(None) => {}
                    Ok(Some(Cmd::Quit)) => break,
                    Ok(Some(cmd)) => ok &= session.execute_to(&cmd, &mut out).await?.is_ok(),
                    Err(e) => {
                        out.flush()?;
                        eprintln!("qcsim io: {e}");
                        ok = false;
                    }
                }
                out.flush()?;
            }
            anyhow::Ok(ok)
        }
        .await;
        let closed = session.close().await;
        let ok = ran?;
        closed?;
        Ok(if ok { 0 } else { 1 })
    })
}
