//! `qcsim convert`: `qemu-img convert` to a raw or qcow2 file
//! (`tools::convert`), keeping the output sparse; `--stats` prints what
//! was read and written. A front end of `tools::convert`, as the drop-in
//! `qemu-img convert` is; this one always writes a new destination (no
//! `-n`, `-B`, `-p` or `-l`), has `--stats` of its own, and words errors
//! as qcsim does.

use std::path::PathBuf;

use tools::convert::{convert, ConvertOptions, Destination};
use tools::files::Format;
use tools::qemu_args::{option_help, wants_help};

#[derive(clap::Args)]
pub struct Args {
    /// Source format (raw or qcow2); probed when omitted.
    #[arg(short = 'f', value_name = "FMT")]
    pub source_format: Option<String>,
    /// Output format: raw (the default, as in qemu-img) or qcow2.
    #[arg(short = 'O', value_name = "FMT", default_value = "raw")]
    pub output_format: String,
    /// Output image options (qcow2 `-o` names, without size or backing).
    #[arg(short = 'o', value_name = "OPTIONS")]
    pub options: Vec<String>,
    /// Chunks in flight at once.
    #[arg(short = 'm', value_name = "N", default_value_t = 8)]
    pub parallel: usize,
    /// Write the data clusters compressed (qcow2 output only; the
    /// header's compression type, `-o compression_type=zlib|zstd`).
    #[arg(short = 'c', long = "compress")]
    pub compress: bool,
    /// Bypass the host page cache (O_DIRECT) on source and destination.
    #[arg(short = 'n', long = "nocache")]
    pub nocache: bool,
    /// Print, on standard error, what was read from the source and written
    /// to the destination.
    #[arg(long = "stats")]
    pub stats: bool,
    /// Force sharing: read a source other processes have open, even for
    /// writing, without keeping them from writing it (qemu-img's -U; what
    /// is read may then be inconsistent).
    #[arg(short = 'U', long = "force-share")]
    pub force_share: bool,
    /// Source image.
    pub source: PathBuf,
    /// Destination file (created, or overwritten).
    pub destination: PathBuf,
}

pub fn run(args: Args) -> anyhow::Result<i32> {
    if args.options.iter().any(|o| wants_help(o)) {
        print!("{}", option_help());
        return Ok(0);
    }
    let source_format = args
        .source_format
        .as_deref()
        .map(str::parse::<Format>)
        .transpose()?;
    let opts = ConvertOptions {
        source_format,
        output_format: args.output_format.parse()?,
        options: args.options.clone(),
        parallel: args.parallel,
        nocache: args.nocache,
        force_share: args.force_share,
        compress: args.compress,
        snapshot: None,
        destination: Destination::New,
    };
    let result = futures::executor::block_on(convert(&args.source, &args.destination, &opts));
    // A copy that was made prints its figures, even when closing the
    // source then failed (before the error).
    let stats = match &result {
        Ok(stats) => Some(stats),
        Err(e) => e.stats(),
    };
    if let Some(stats) = stats.filter(|_| args.stats) {
        for line in stats.lines() {
            eprintln!("{line}");
        }
    }
    result?;
    Ok(0)
}
