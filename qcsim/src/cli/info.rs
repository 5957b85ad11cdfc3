//! `qcsim info`: `qemu-img info` on an image file (`tools::info`), in its
//! human layout or as JSON. A front end of `tools::info`, as the drop-in
//! `qemu-img info` is; this one has no `--backing-chain` or
//! `--image-opts`, and words its errors as qcsim does.

use std::path::PathBuf;

use tools::files::Format;
use tools::info::{info, InfoOptions};

#[derive(clap::Args)]
pub struct Args {
    /// Output format: human or json.
    #[arg(long = "output", value_name = "FMT", default_value = "human")]
    pub output: String,
    /// Image format (raw or qcow2); probed when omitted.
    #[arg(short = 'f', long = "format", value_name = "FMT")]
    pub format: Option<String>,
    /// Force sharing: describe an image other processes have open, even
    /// for writing, without keeping them from writing it (qemu-img's -U).
    #[arg(short = 'U', long = "force-share")]
    pub force_share: bool,
    /// Image file.
    pub file: PathBuf,
}

pub fn run(args: Args) -> anyhow::Result<i32> {
    let format = args
        .format
        .as_deref()
        .map(str::parse::<Format>)
        .transpose()?;
    let output = args.output.as_str();
    if output != "human" && output != "json" {
        anyhow::bail!("--output must be 'human' or 'json', not '{output}'");
    }
    let opts = InfoOptions {
        format,
        force_share: args.force_share,
    };
    let report = info(&args.file, &opts)?;
    if output == "json" {
        println!("{}", report.json());
    } else {
        print!("{}", report.human());
    }
    Ok(0)
}
