//! qemu-io's command line on qcsim's engine: `qcsim io ARGS` and qcsim
//! invoked as `qemu-io`. Options as qemu-io takes them (`-c`, `-f`, `-r`,
//! `-U`, `-s`, `-n`, `-t`/`--cache`, `-i`/`--aio`, `-d`, `--image-opts`),
//! then the commands (`tools::io`) of the `-c` options in order or, without
//! any, one per line from standard input after a `qemu-io> ` prompt, all on
//! one session, which `open` and `close` replace. Each request prints
//! qemu-io's two report lines; errors carry qemu-io's wording and `qemu-io: `
//! prefix; the exit code is 1 when any command failed.

use std::io::{BufRead, Write};
use std::path::{Path, PathBuf};

use tools::files::{Format, OpenOptions};
use tools::io::{parse_command, Cmd, CmdFailure, Session};

use super::getopt::{getopt, long, Long};
use super::{chain, copy_for_snapshot, open_error_text, CacheMode};

const SHORT: &str = "hVc:d:f:rsnCmki:t:T:U";

const LONGS: &[Long] = &[
    long("help", false, Some('h')),
    long("version", false, Some('V')),
    long("cmd", true, Some('c')),
    long("format", true, Some('f')),
    long("read-only", false, Some('r')),
    long("snapshot", false, Some('s')),
    long("nocache", false, Some('n')),
    long("misalign", false, Some('m')),
    long("native-aio", false, Some('k')),
    long("discard", true, Some('d')),
    long("cache", true, Some('t')),
    long("aio", true, Some('i')),
    long("trace", true, Some('T')),
    long("object", true, None),
    long("image-opts", false, None),
    long("force-share", false, Some('U')),
];

fn usage(prog: &str) -> String {
    format!(
        "Usage: {prog} [OPTIONS]... [-c STRING]... [file]\n\
         QEMU Disk exerciser (qcsim's engine)\n\n\
         \x20 --object OBJECTDEF   ignored\n\
         \x20 --image-opts         treat file as option string\n\
         \x20 -c, --cmd STRING     execute command with its arguments\n\
         \x20                      from the given string\n\
         \x20 -f, --format FMT     specifies the block driver to use\n\
         \x20 -r, --read-only      export read-only\n\
         \x20 -s, --snapshot       use snapshot file\n\
         \x20 -n, --nocache        disable host cache, short for -t none\n\
         \x20 -C, --copy-on-read   enable copy-on-read\n\
         \x20 -m, --misalign       misalign allocations for O_DIRECT\n\
         \x20 -k, --native-aio     use kernel AIO implementation\n\
         \x20 -i, --aio=MODE       use AIO mode (threads, native or io_uring)\n\
         \x20 -t, --cache=MODE     use the given cache mode for the image\n\
         \x20 -d, --discard=MODE   use the given discard mode for the image\n\
         \x20 -U, --force-share    force shared permissions\n\
         \x20 -h, --help           display this help and exit\n\
         \x20 -V, --version        output version information and exit\n"
    )
}

/// How the image is opened, from the command line or an `open` command.
#[derive(Clone)]
struct OpenSpec {
    format: Option<Format>,
    read_only: bool,
    force_share: bool,
    snapshot: bool,
    cache: CacheMode,
}

/// The open image: its session, the cache mode (for writethrough's flush
/// after each write) and the snapshot copy to delete on close.
struct Current {
    session: Session,
    /// The name it was opened by, and how, for `reopen`.
    file: PathBuf,
    spec: OpenSpec,
    cache: CacheMode,
    snapshot: Option<PathBuf>,
}

/// Run qemu-io's command line `args` (without the program name); `prog` is
/// the name messages carry. Returns the exit code.
pub fn main(prog: &str, args: &[String]) -> i32 {
    match run(prog, args) {
        Ok(code) => code,
        Err(msg) => {
            let _ = crate::output::stdout().flush();
            eprintln!("{prog}: {msg}");
            1
        }
    }
}

fn run(prog: &str, args: &[String]) -> Result<i32, String> {
    let p = match getopt(args, SHORT, LONGS) {
        Ok(p) => p,
        Err(e) => {
            eprintln!("{prog}: {e}");
            print!("{}", usage(prog));
            return Ok(1);
        }
    };
    if p.has("h") {
        print!("{}", usage(prog));
        return Ok(0);
    }
    if p.has("V") {
        println!("{prog} version {} (qcsim)", env!("CARGO_PKG_VERSION"));
        return Ok(0);
    }
    if p.operands.len() > 1 {
        print!("{}", usage(prog));
        return Ok(1);
    }
    let image_opts = p.has("image-opts");
    if p.value("f").is_some() && image_opts {
        return Err("--image-opts and -f are mutually exclusive".into());
    }
    let mut cache = CacheMode::default();
    if let Some(t) = p.value("t") {
        cache = CacheMode::parse(t).ok_or_else(|| format!("Invalid cache option: {t}"))?;
    }
    if p.has("n") {
        cache.direct = true;
    }
    if let Some(d) = p.value("d") {
        if !matches!(d, "ignore" | "off" | "unmap" | "on") {
            return Err(format!("Invalid discard option: {d}"));
        }
    }
    if let Some(i) = p.value("i") {
        if !matches!(i, "threads" | "native" | "io_uring") {
            return Err(format!("Invalid aio option: {i}"));
        }
    }
    let mut format = p
        .value("f")
        .map(|f| f.parse::<Format>().map_err(|e| e.to_string()))
        .transpose()?;
    let spec = OpenSpec {
        format,
        read_only: p.has("r"),
        force_share: p.has("U"),
        snapshot: p.has("s"),
        cache,
    };

    let commands: Vec<String> = p.values("c").into_iter().map(str::to_owned).collect();
    futures::executor::block_on(async {
        let mut current = None;
        if let Some(name) = p.operands.first() {
            let (file, what) = if image_opts {
                let (file, driver) = image_opts_file(name)?;
                format = driver;
                (file, String::new())
            } else {
                (super::plain_file_name(name), format!(" device {name}"))
            };
            let spec = OpenSpec { format, ..spec };
            match open(&file, &spec).await {
                Ok(c) => current = Some(c),
                Err(reason) => return Err(format!("can't open{what}: {reason}")),
            }
        }
        let mut failed = false;
        let mut stdin = None;
        let mut list = commands.into_iter();
        let from_list = list.len() > 0;
        loop {
            let line = if from_list {
                match list.next() {
                    Some(l) => l,
                    None => break,
                }
            } else {
                let mut out = crate::output::stdout();
                let _ = write!(out, "{prog}> ");
                let _ = out.flush();
                let input = stdin.get_or_insert_with(|| std::io::stdin().lock());
                let mut line = String::new();
                match input.read_line(&mut line) {
                    Ok(0) => break,
                    Ok(_) => line,
                    Err(e) => return Err(format!("reading standard input: {e}")),
                }
            };
            match command(prog, &line, &mut current, &spec).await {
                Step::Next(ok) => failed |= !ok,
                Step::Quit => break,
            }
            if crate::output::has_failed() {
                break;
            }
        }
        if let Some(c) = current {
            close(prog, c).await;
        }
        Ok(i32::from(failed))
    })
}

enum Step {
    /// Go on; whether the command succeeded.
    Next(bool),
    Quit,
}

/// Run one command line on the session.
async fn command(prog: &str, line: &str, current: &mut Option<Current>, spec: &OpenSpec) -> Step {
    let mut out = crate::output::stdout();
    let cmd = match parse_command(line) {
        Ok(None) => return Step::Next(true),
        Ok(Some(cmd)) => cmd,
        Err(e) => {
            if e.stderr {
                let _ = out.flush();
                drop(out);
                eprintln!("{e}");
            } else {
                let _ = writeln!(out, "{e}");
            }
            return Step::Next(false);
        }
    };
    match &cmd {
        Cmd::Quit => return Step::Quit,
        Cmd::Abort => {
            let _ = out.flush();
            std::process::abort();
        }
        Cmd::Sigraise(sig) => {
            let _ = out.flush();
            // SAFETY: raise(3) takes any signal number; an invalid one is
            // refused with an error, not undefined behaviour.
            let r = unsafe { libc::raise(*sig) };
            if r != 0 {
                let _ = writeln!(out, "raise failed: invalid signal {sig}");
                return Step::Next(false);
            }
            return Step::Next(true);
        }
        Cmd::Open {
            file,
            read_only,
            nocache,
            options,
        } => {
            drop(out);
            if current.is_some() {
                eprintln!("{prog}: file open already, try 'help close'");
                return Step::Next(false);
            }
            let mut s = spec.clone();
            s.read_only = *read_only;
            s.cache.direct |= *nocache;
            for o in options.iter().flat_map(|o| o.split(',')) {
                if let Some(d) = o.strip_prefix("driver=") {
                    match d.parse::<Format>() {
                        Ok(f) => s.format = Some(f),
                        Err(e) => {
                            eprintln!("{prog}: can't open device {file}: {e}");
                            return Step::Next(false);
                        }
                    }
                }
            }
            return match open(&super::plain_file_name(file), &s).await {
                Ok(c) => {
                    *current = Some(c);
                    Step::Next(true)
                }
                Err(reason) => {
                    eprintln!("{prog}: can't open device {file}: {reason}");
                    Step::Next(false)
                }
            };
        }
        Cmd::Reopen {
            read_only,
            cache,
            options,
        } => {
            drop(out);
            let Some(c) = current.take() else {
                eprintln!("no file open, try 'help open'");
                return Step::Next(false);
            };
            let mut s = c.spec.clone();
            if let Some(r) = read_only {
                s.read_only = *r;
            }
            if let Some(mode) = cache {
                match CacheMode::parse(mode) {
                    Some(m) => s.cache = m,
                    None => {
                        eprintln!("{prog}: Invalid cache option: {mode}");
                        *current = Some(c);
                        return Step::Next(false);
                    }
                }
            }
            if let Some(o) = options
                .iter()
                .flat_map(|o| o.split(','))
                .find(|o| !o.is_empty())
            {
                eprintln!("{prog}: reopen -o {o}: options are not supported by qcsim");
                *current = Some(c);
                return Step::Next(false);
            }
            // The image is closed (written back, locks dropped) and opened
            // again as asked; a snapshot copy is reopened, not recopied.
            let file = c.snapshot.clone().unwrap_or_else(|| c.file.clone());
            let snapshot = c.snapshot.clone();
            let original = c.file.clone();
            if let Err(e) = c.session.close().await {
                eprintln!("{prog}: {}", chain(&e));
                return Step::Next(false);
            }
            let reopen_spec = OpenSpec {
                snapshot: false,
                ..s.clone()
            };
            return match open(&file, &reopen_spec).await {
                Ok(mut n) => {
                    n.file = original;
                    n.spec = s;
                    n.snapshot = snapshot;
                    *current = Some(n);
                    Step::Next(true)
                }
                Err(reason) => {
                    eprintln!("{prog}: Cannot reopen: {reason}");
                    Step::Next(false)
                }
            };
        }
        Cmd::Close => {
            drop(out);
            if let Some(c) = current.take() {
                close(prog, c).await;
                return Step::Next(true);
            }
            eprintln!("no file open, try 'help open'");
            return Step::Next(false);
        }
        _ => {}
    }
    let Some(c) = current.as_ref() else {
        let _ = out.flush();
        drop(out);
        eprintln!("no file open, try 'help open'");
        return Step::Next(false);
    };
    let result = match c.session.execute_to(&cmd, &mut out).await {
        Ok(r) => r,
        Err(_) => return Step::Quit,
    };
    let mut ok = result.is_ok();
    // Writethrough: every write reaches the disk before it completes.
    if ok && c.cache.writethrough && matches!(cmd, Cmd::Write { .. }) {
        if let Err(e) = c.session.execute_to(&Cmd::Flush, &mut out).await {
            drop(e);
            ok = false;
        }
    }
    let _ = out.flush();
    drop(out);
    if let Err(CmdFailure::ReadOnly { .. }) = result {
        eprintln!("{prog}: Block node is read-only");
    }
    Step::Next(ok)
}

/// Open `file` as `spec` says; the error is the text after qemu-io's
/// "can't open device NAME: ".
async fn open(file: &Path, spec: &OpenSpec) -> Result<Current, String> {
    let (path, snapshot) = if spec.snapshot {
        let copy = copy_for_snapshot(file).map_err(|e| open_error_text_io(file, &e))?;
        (copy.clone(), Some(copy))
    } else {
        (file.to_owned(), None)
    };
    let opts = OpenOptions {
        format: spec.format,
        read_only: spec.read_only && !spec.snapshot,
        direct: spec.cache.direct,
        force_share: spec.force_share,
        ..OpenOptions::default()
    };
    match Session::open(&path, &opts).await {
        Ok(session) => Ok(Current {
            session: session.with_timing(true),
            file: file.to_owned(),
            spec: spec.clone(),
            cache: spec.cache,
            snapshot,
        }),
        Err(e) => {
            if let Some(s) = &snapshot {
                let _ = std::fs::remove_file(s);
            }
            Err(open_error_text(file, &e))
        }
    }
}

fn open_error_text_io(file: &Path, e: &std::io::Error) -> String {
    format!(
        "Could not open '{}': {}",
        file.display(),
        super::strerror(e)
    )
}

/// Close the session, saying so if the close failed.
async fn close(prog: &str, c: Current) {
    if let Err(e) = c.session.close().await {
        let _ = crate::output::stdout().flush();
        eprintln!(
            "{prog}: {e}: {}",
            std::error::Error::source(&e).map_or(String::new(), |s| s.to_string())
        );
    }
    if let Some(s) = c.snapshot {
        let _ = std::fs::remove_file(s);
    }
}

/// The file and driver of an `--image-opts` string
/// (`driver=qcow2,file.filename=PATH` or `filename=PATH`).
fn image_opts_file(opts: &str) -> Result<(PathBuf, Option<Format>), String> {
    let mut file = None;
    let mut driver = None;
    for kv in opts.split(',') {
        match kv.split_once('=') {
            Some(("file.filename" | "filename", v)) => file = Some(PathBuf::from(v)),
            Some(("driver", d)) => driver = Some(d.parse::<Format>().map_err(|e| e.to_string())?),
            Some(("file.driver", "file")) => {}
            Some((k, _)) if k.starts_with("file.locking") || k == "force-share" => {}
            Some((k, _)) => return Err(format!("can't open: Invalid parameter '{k}'")),
            None => return Err(format!("can't open: Invalid parameter '{kv}'")),
        }
    }
    let file = file.ok_or("can't open: A block device must be specified for \"file\"")?;
    Ok((file, driver))
}
