//! `qcsim create`: make a new raw or qcow2 image file as `qemu-img create`
//! does (`tools::create::prepare_image`, then the "Formatting ..." line,
//! then `PreparedImage::write`). A front end of `tools::create`, as the
//! drop-in `qemu-img create` is; what differs is this one's own: clap's
//! flags, qcow2 the default format (qemu-img's is raw), the line printed
//! as the library words it, and errors in qcsim's words (`qcsim: ...`)
//! rather than qemu-img's.

use std::path::PathBuf;

use anyhow::bail;
use tools::create::{prepare_image, CreateImageOptions};
use tools::files::Format;
use tools::qemu_args::{option_help, wants_help};

#[derive(clap::Args)]
pub struct Args {
    /// Image format: qcow2 (the default here) or raw.
    #[arg(
        short = 'f',
        long = "format",
        value_name = "FMT",
        default_value = "qcow2"
    )]
    pub format: String,
    /// Image options as key=value,... (qemu-img names; `-o help` lists them).
    #[arg(short = 'o', value_name = "OPTIONS")]
    pub options: Vec<String>,
    /// Backing file, stored as given (relative names are relative to FILE).
    #[arg(short = 'b', long = "backing", value_name = "BACKING")]
    pub backing: Option<String>,
    /// Format of the backing file (raw or qcow2); required with -b.
    #[arg(short = 'F', long = "backing-format", value_name = "FMT")]
    pub backing_format: Option<String>,
    /// Do not open the backing file (then SIZE is required).
    #[arg(short = 'u')]
    pub unsafe_backing: bool,
    /// Quiet: do not print the "Formatting" line.
    #[arg(short = 'q')]
    pub quiet: bool,
    /// Image file to create (an existing file is overwritten). Optional
    /// only for `-o help`.
    pub file: Option<PathBuf>,
    /// Virtual size, with an optional k, M, G, T suffix.
    pub size: Option<String>,
}

pub fn run(args: Args) -> anyhow::Result<i32> {
    if args.options.iter().any(|o| wants_help(o)) {
        print!("{}", option_help());
        return Ok(0);
    }
    let Some(file) = args.file else {
        bail!("expecting an image file name (qcsim create [OPTIONS] FILE [SIZE])");
    };
    let format: Format = args.format.parse()?;
    let opts = CreateImageOptions {
        format,
        options: args.options,
        size: args.size,
        backing: args.backing,
        backing_format: args.backing_format,
        unsafe_backing: args.unsafe_backing,
    };
    futures::executor::block_on(async {
        let prepared = prepare_image(&file, &opts).await?;
        if !args.quiet {
            println!("{}", prepared.formatting_line());
        }
        prepared.write().await
    })?;
    Ok(0)
}
