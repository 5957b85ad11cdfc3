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

use super::blockopts::blkdebug_file;
use super::blockopts::{BlockOpts, DetectZeroes};
use super::getopt::{getopt, long, Long, Parsed};
use super::shared::{chain, copy_for_snapshot, open_error_text, plain_file_name, CacheMode};

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
    /// `detect-zeroes`: a write of zeroes becomes a write_zeroes, which may
    /// unmap when this is `Some(true)`.
    detect_zeroes: Option<bool>,
    /// A protocol driver that takes character devices (`host_device`,
    /// `host_cdrom`) was named and the file is one.
    char_device: bool,
    /// QEMU's image locks on the image's file (`locking=off` clears it).
    locking: bool,
    /// L2 tables the engine's cache holds (`l2-cache-size`), when set.
    l2_cache_tables: Option<usize>,
    /// `backing.driver`.
    backing_format: Option<Format>,
    /// blkdebug's `opt-write-zero` (`BlockOpts::zero_alignment`).
    zero_alignment: Option<u64>,
    /// The node names the open gave (`BlockOpts::node_names`).
    node_names: Vec<(String, String)>,
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
    let spec = open_spec(&p)?;
    let commands: Vec<String> = p.values("c").into_iter().map(str::to_owned).collect();
    futures::executor::block_on(async {
        let mut current = match p.operands.first() {
            Some(name) => Some(open_operand(name, p.has("image-opts"), &spec).await?),
            None => None,
        };
        let failed = run_commands(prog, commands, &mut current, &spec).await?;
        if let Some(c) = current {
            close(prog, c).await;
        }
        Ok(i32::from(failed))
    })
}

/// How the command line's options say to open images: the cache, discard
/// and aio modes checked as qemu-io checks them.
fn open_spec(p: &Parsed) -> Result<OpenSpec, String> {
    if p.value("f").is_some() && p.has("image-opts") {
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
    let format = p
        .value("f")
        .map(|f| f.parse::<Format>().map_err(|e| e.to_string()))
        .transpose()?;
    Ok(OpenSpec {
        format,
        read_only: p.has("r"),
        force_share: p.has("U"),
        snapshot: p.has("s"),
        cache,
        detect_zeroes: None,
        char_device: false,
        locking: true,
        l2_cache_tables: None,
        backing_format: None,
        zero_alignment: None,
        node_names: Vec::new(),
    })
}

/// Open the image the command line names (`name`, an option string with
/// `--image-opts`); the error is the whole message after the prefix.
async fn open_operand(name: &str, image_opts: bool, spec: &OpenSpec) -> Result<Current, String> {
    let (file, what, spec) = if image_opts {
        let (spec, opts) = BlockOpts::parse(name, None)
            .and_then(|o| Ok((apply_block_opts(&o, spec.clone())?, o)))
            .map_err(|e| format!("can't open: {e}"))?;
        let file = plain_file_name(opts.filename.as_deref().unwrap_or_default());
        (file, String::new(), spec)
    } else {
        blkdebug_file(name).map_err(|e| format!("can't open device {name}: {e}"))?;
        (
            plain_file_name(name),
            format!(" device {name}"),
            spec.clone(),
        )
    };
    open(&file, &spec)
        .await
        .map_err(|reason| format!("can't open{what}: {reason}"))
}

/// Run the `-c` commands in order or, without any, the lines of standard
/// input after a prompt each; returns whether any command failed.
async fn run_commands(
    prog: &str,
    commands: Vec<String>,
    current: &mut Option<Current>,
    spec: &OpenSpec,
) -> Result<bool, String> {
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
        match command(prog, &line, current, spec).await {
            Step::Next(ok) => failed |= !ok,
            Step::Quit => break,
        }
        if crate::output::has_failed() {
            break;
        }
    }
    Ok(failed)
}

enum Step {
    /// Go on; whether the command succeeded.
    Next(bool),
    Quit,
}

/// Run one command line on the session.
async fn command(prog: &str, line: &str, current: &mut Option<Current>, spec: &OpenSpec) -> Step {
    let cmd = match parse_command(line) {
        Ok(None) => return Step::Next(true),
        Ok(Some(cmd)) => cmd,
        Err(e) => {
            let mut out = crate::output::stdout();
            if e.stderr {
                let _ = out.flush();
                eprintln!("{e}");
            } else {
                let _ = writeln!(out, "{e}");
            }
            if let Some(usage) = e.usage {
                let _ = writeln!(out, "{usage}");
            }
            return Step::Next(false);
        }
    };
    match &cmd {
        Cmd::Quit => Step::Quit,
        Cmd::Abort => {
            let _ = crate::output::stdout().flush();
            std::process::abort();
        }
        Cmd::Sigraise(sig) => sigraise(*sig),
        Cmd::Open {
            file,
            read_only,
            nocache,
            options,
        } => {
            if current.is_some() {
                eprintln!("{prog}: file open already, try 'help close'");
                return Step::Next(false);
            }
            let mut s = spec.clone();
            s.read_only = *read_only;
            s.cache.direct |= *nocache;
            open_cmd(prog, current, file.as_deref(), options, s).await
        }
        Cmd::Reopen {
            read_only,
            cache,
            options,
        } => match current.take() {
            Some(c) => reopen_cmd(prog, current, c, *read_only, cache.as_deref(), options).await,
            None => no_file_open(),
        },
        Cmd::Truncate { size, prealloc } => {
            truncate_cmd(prog, current, *size, prealloc.as_deref()).await
        }
        Cmd::Close => match current.take() {
            Some(c) => {
                close(prog, c).await;
                Step::Next(true)
            }
            None => no_file_open(),
        },
        _ => match current.as_ref() {
            Some(c) => execute(prog, c, &cmd).await,
            None => {
                let _ = crate::output::stdout().flush();
                no_file_open()
            }
        },
    }
}

/// qemu-io's answer to a command that needs an open image when none is.
fn no_file_open() -> Step {
    eprintln!("no file open, try 'help open'");
    Step::Next(false)
}

/// `sigraise SIG`.
fn sigraise(sig: i32) -> Step {
    let mut out = crate::output::stdout();
    let _ = out.flush();
    // SAFETY: raise(3) takes any signal number; an invalid one is refused
    // with an error, not undefined behaviour.
    let r = unsafe { libc::raise(sig) };
    if r != 0 {
        let _ = writeln!(out, "raise failed: invalid signal {sig}");
        return Step::Next(false);
    }
    Step::Next(true)
}

/// `open [FILE] [-o OPTIONS]` with no image open, as `s` (the command
/// line's spec with the command's flags) says.
async fn open_cmd(
    prog: &str,
    current: &mut Option<Current>,
    file: Option<&str>,
    options: &[String],
    s: OpenSpec,
) -> Step {
    // QEMU names the file in the error only when it was given apart from
    // the options.
    let what = file.map_or(String::new(), |f| format!(" device {f}"));
    if options.is_empty() {
        let Some(file) = file else {
            eprintln!("{prog}: can't open: Must specify either driver or file");
            return Step::Next(false);
        };
        if let Err(e) = blkdebug_file(file) {
            eprintln!("{prog}: can't open{what}: {e}");
            return Step::Next(false);
        }
        return open_into(prog, current, &plain_file_name(file), &s, &what).await;
    }
    let opts = match BlockOpts::parse(&options.join(","), file) {
        Ok(o)
            if file.is_some_and(|f| o.filename.as_deref() != blkdebug_file(f).ok().as_deref()) =>
        {
            eprintln!(
                "{prog}: can't open{what}: Can't specify 'file' and 'filename' options at the same time"
            );
            return Step::Next(false);
        }
        Ok(o) => o,
        Err(e) => {
            eprintln!("{prog}: can't open{what}: {e}");
            return Step::Next(false);
        }
    };
    let s = match apply_block_opts(&opts, s) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("{prog}: can't open{what}: {e}");
            return Step::Next(false);
        }
    };
    let name = opts.filename.clone().unwrap_or_default();
    open_into(prog, current, &plain_file_name(&name), &s, &what).await
}

/// `reopen [-r|-w] [-c CACHE] [-o OPTIONS]` of the open image `c`, taken
/// out of `current`: put back as it was when the options are refused.
async fn reopen_cmd(
    prog: &str,
    current: &mut Option<Current>,
    c: Current,
    read_only: Option<bool>,
    cache: Option<&str>,
    options: &[String],
) -> Step {
    let mut s = c.spec.clone();
    if let Some(r) = read_only {
        s.read_only = r;
    }
    let refuse = |current: &mut Option<Current>, c: Current, msg: String| {
        eprintln!("{prog}: {msg}");
        *current = Some(c);
        Step::Next(false)
    };
    if let Some(mode) = cache {
        match CacheMode::parse(mode) {
            Some(m) => s.cache = m,
            None => return refuse(current, c, format!("Invalid cache option: {mode}")),
        }
    }
    let list = options.join(",");
    let sets_cache = tools::qemu_args::split_option_list(&list)
        .iter()
        .any(|(k, _)| k.starts_with("cache."));
    if cache.is_some() && sets_cache {
        return refuse(
            current,
            c,
            "Cannot set both -c and the cache options".into(),
        );
    }
    if !list.is_empty() {
        let file = c.snapshot.clone().unwrap_or_else(|| c.file.clone());
        let graph = Graph::of(&c);
        let was_read_only = c.spec.read_only;
        match reopen_options(&list, &file, s, read_only.is_some(), was_read_only, &graph) {
            Ok(changed) => s = changed,
            Err(e) => return refuse(current, c, e),
        }
    }
    reopen_as(prog, current, c, s, |_| Ok(())).await
}

/// `truncate [-m MODE] SIZE` on the open image.
async fn truncate_cmd(
    prog: &str,
    current: &mut Option<Current>,
    size: u64,
    prealloc: Option<&str>,
) -> Step {
    let Some(c) = current.as_mut() else {
        return no_file_open();
    };
    match c.session.truncate(size, prealloc).await {
        Ok(false) => Step::Next(true),
        // A qcow2 image that shrank: its file is cut after the last
        // cluster in use, as QEMU's driver cuts it, with the image closed
        // for that moment.
        Ok(true) => {
            let c = current.take().expect("an open image");
            let spec = c.spec.clone();
            reopen_as(prog, current, c, spec, |file| {
                tools::resize::trim_after_shrink(file).map_err(|e| e.to_string())
            })
            .await
        }
        Err(CmdFailure::ReadOnly { .. }) => {
            eprintln!("{prog}: Block node is read-only");
            Step::Next(false)
        }
        Err(e) => {
            eprintln!("{prog}: {e}");
            Step::Next(false)
        }
    }
}

/// A command the session carries out (`tools::io`), with a flush after a
/// write under writethrough.
async fn execute(prog: &str, c: &Current, cmd: &Cmd) -> Step {
    let mut out = crate::output::stdout();
    let result = match c.session.execute_to(cmd, &mut out).await {
        Ok(r) => r,
        Err(_) => return Step::Quit,
    };
    let mut ok = result.is_ok();
    // Writethrough: every write reaches the disk before it completes.
    if ok && c.cache.writethrough && matches!(cmd, Cmd::Write(_)) {
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

/// Close the open image `c` (written back, locks dropped), run `between`
/// on its file, and open it again as `s` says, into `current`; a snapshot
/// copy (`-s`) is reopened, not recopied.
async fn reopen_as(
    prog: &str,
    current: &mut Option<Current>,
    c: Current,
    s: OpenSpec,
    between: impl FnOnce(&Path) -> Result<(), String>,
) -> Step {
    let file = c.snapshot.clone().unwrap_or_else(|| c.file.clone());
    let snapshot = c.snapshot.clone();
    let original = c.file.clone();
    if let Err(e) = c.session.close().await {
        eprintln!("{prog}: {}", chain(&e));
        return Step::Next(false);
    }
    let trimmed = between(&file);
    let reopen_spec = OpenSpec {
        snapshot: false,
        ..s.clone()
    };
    let step = match open(&file, &reopen_spec).await {
        Ok(mut n) => {
            n.file = original;
            n.spec = s;
            n.snapshot = snapshot;
            *current = Some(n);
            Step::Next(true)
        }
        Err(reason) => {
            eprintln!("{prog}: Cannot reopen: {reason}");
            return Step::Next(false);
        }
    };
    match trimmed {
        Ok(()) => step,
        Err(e) => {
            // QEMU's driver only warns when it cannot cut the file.
            eprintln!("{prog}: warning: {e}");
            step
        }
    }
}

/// What a reopen may not change of the open image's node graph, and so
/// may only repeat: the drivers of the image, its file and its backing
/// file, and the node names the open gave.
struct Graph {
    format: &'static str,
    backing_format: Option<String>,
    node_names: Vec<(String, String)>,
}

impl Graph {
    fn of(c: &Current) -> Graph {
        let disk = c.session.disk();
        let backing_format = match disk {
            tools::files::Disk::Qcow2(img) => img.header().backing_format(),
            tools::files::Disk::Raw(_) => None,
        };
        Graph {
            format: disk.format().name(),
            backing_format,
            node_names: c.spec.node_names.clone(),
        }
    }

    /// Whether `key=value` repeats what the graph already has.
    fn unchanged(&self, key: &str, value: &str) -> bool {
        match key {
            "driver" => value == self.format,
            "file.driver" => value == "file",
            "backing.driver" => self.backing_format.as_deref() == Some(value),
            _ => self.node_names.iter().any(|(k, v)| k == key && v == value),
        }
    }
}

/// `reopen -o LIST`: the open spec `spec` with the options QEMU lets a
/// reopen change (the node's `read-only`, `cache.*`, `detect-zeroes`,
/// `discard` and qcow2's cache sizes) changed as LIST says, the others
/// kept; what `graph` has may be repeated; any other option refused in
/// QEMU's words ("Cannot change the option"), qcow2's runtime options
/// that the engine has no switch for refused as not supported.
/// `rw_flag`: `-r` or `-w` was given too; `was_read_only`: the image is
/// open read-only now.
fn reopen_options(
    list: &str,
    file: &Path,
    spec: OpenSpec,
    rw_flag: bool,
    was_read_only: bool,
    graph: &Graph,
) -> Result<OpenSpec, String> {
    let items = tools::qemu_args::split_option_list(list);
    for (k, v) in &items {
        let value = v.as_deref().unwrap_or("on");
        match k.as_str() {
            "read-only" if rw_flag => {
                return Err("Cannot set both -r/-w and 'read-only'".into());
            }
            // The session's user of the image writes: QEMU refuses to
            // make the node under it read-only.
            "read-only" if value == "on" && !was_read_only => {
                return Err("Read-only block node cannot support read-write users".into());
            }
            "auto-read-only" if value != "on" && value != "off" => {
                return Err(format!("Parameter '{k}' expects 'on' or 'off'"));
            }
            "auto-read-only" => {}
            "driver" | "file.driver" | "backing.driver" | "node-name" | "file.node-name"
            | "backing.node-name"
                if graph.unchanged(k, value) => {}
            "read-only"
            | "cache.direct"
            | "cache.no-flush"
            | "detect-zeroes"
            | "discard"
            | "cache-size"
            | "l2-cache-size"
            | "refcount-cache-size"
            | "l2-cache-entry-size" => {}
            "lazy-refcounts"
            | "pass-discard-request"
            | "pass-discard-snapshot"
            | "pass-discard-other"
            | "discard-no-unref"
            | "cache-clean-interval" => {
                return Err(format!("reopen -o {k}: not supported by qcsim"));
            }
            k if k.starts_with("overlap-check") => {
                return Err(format!("reopen -o {k}: not supported by qcsim"));
            }
            other => {
                let name = other
                    .strip_prefix("file.")
                    .or_else(|| other.strip_prefix("backing."))
                    .unwrap_or(other);
                return Err(format!("Cannot change the option '{name}'"));
            }
        }
    }
    let name = file.to_string_lossy();
    let opts = BlockOpts::parse(list, Some(&name))?;
    let before = spec.clone();
    let mut s = apply_block_opts(&opts, spec)?;
    // What LIST does not name stays as it was.
    if !items.iter().any(|(k, _)| k == "detect-zeroes") {
        s.detect_zeroes = before.detect_zeroes;
    }
    if !items
        .iter()
        .any(|(k, _)| k.ends_with("cache-size") || k == "l2-cache-entry-size")
    {
        s.l2_cache_tables = before.l2_cache_tables;
    }
    Ok(s)
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
    let mut opts = OpenOptions {
        format: spec.format,
        read_only: spec.read_only && !spec.snapshot,
        direct: spec.cache.direct,
        force_share: spec.force_share,
        char_device: spec.char_device,
        locking: spec.locking,
        backing_format: spec.backing_format,
        ..OpenOptions::default()
    };
    if let Some(n) = spec.l2_cache_tables {
        opts.engine.l2_cache_tables = n;
    }
    match Session::open(&path, &opts).await {
        Ok(session) => Ok(Current {
            session: session
                .with_timing(true)
                .with_detect_zeroes(spec.detect_zeroes)
                .with_zero_alignment(spec.zero_alignment),
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
        super::shared::strerror(e)
    )
}

/// Open `file` as `spec` says into `current`, or say why not.
async fn open_into(
    prog: &str,
    current: &mut Option<Current>,
    file: &Path,
    spec: &OpenSpec,
    what: &str,
) -> Step {
    match open(file, spec).await {
        Ok(c) => {
            *current = Some(c);
            Step::Next(true)
        }
        Err(reason) => {
            eprintln!("{prog}: can't open{what}: {reason}");
            Step::Next(false)
        }
    }
}

/// `spec` with what the block options `opts` set: the format (raw for a
/// protocol node alone), read-only, the cache, the protocol's check of the
/// file, zero detection.
fn apply_block_opts(opts: &BlockOpts, mut spec: OpenSpec) -> Result<OpenSpec, String> {
    if let Some(r) = opts.read_only {
        spec.read_only = r;
    }
    if let Some(d) = opts.cache_direct {
        spec.cache.direct = d;
    }
    spec.force_share |= opts.force_share;
    spec.locking &= !opts.no_locking;
    spec.backing_format = opts.backing_format.or(spec.backing_format);
    spec.zero_alignment = opts.zero_alignment.or(spec.zero_alignment);
    if !opts.node_names.is_empty() {
        spec.node_names = opts.node_names.clone();
    }
    spec.format = match (opts.format, opts.protocol) {
        (Some(f), _) => Some(f),
        // A protocol node alone is the file's bytes.
        (None, Some(_)) => Some(Format::Raw),
        (None, None) => spec.format,
    };
    spec.detect_zeroes = match opts.detect_zeroes {
        DetectZeroes::Off => None,
        DetectZeroes::On => Some(false),
        DetectZeroes::Unmap => Some(opts.discard_unmap),
    };
    spec.char_device = opts.check_file(spec.read_only)?;
    let cache_options = [
        opts.cache_size,
        opts.l2_cache_size,
        opts.refcount_cache_size,
        opts.l2_cache_entry_size,
    ];
    if cache_options.iter().any(Option::is_some) {
        // Checked against the image's cluster size, as QEMU checks them
        // once it has read the header; a file that is not qcow2 fails its
        // open later, in its own words.
        if let Some(cs) = opts.filename.as_deref().and_then(qcow2_cluster_size) {
            opts.check_caches(cs)?;
            spec.l2_cache_tables = opts.l2_cache_tables(cs);
        }
    }
    Ok(spec)
}

/// The cluster size in the qcow2 header of the file `name`, if it has one.
fn qcow2_cluster_size(name: &str) -> Option<u64> {
    use std::io::Read;
    let mut head = [0u8; 24];
    std::fs::File::open(plain_file_name(name))
        .ok()?
        .read_exact(&mut head)
        .ok()?;
    let bits = u32::from_be_bytes(head[20..24].try_into().ok()?);
    (head[..4] == *b"QFI\xfb" && (9..=21).contains(&bits)).then(|| 1u64 << bits)
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
