//! `qcsim dump FILE`: the deterministic text dump of an image's header, L1
//! and L2 tables, refcount table and refcounts (`tools::dump`), read under
//! QEMU's read-only image locks unless `-U`. qemu-img has no such
//! command, so this is its only front end.

use std::path::PathBuf;

#[derive(clap::Args)]
pub struct Args {
    /// Force sharing: dump an image other processes have open, even for
    /// writing, without keeping them from writing it (what is read may
    /// then be inconsistent).
    #[arg(short = 'U', long = "force-share")]
    pub force_share: bool,
    /// Image file.
    pub file: PathBuf,
}

pub fn run(args: Args) -> anyhow::Result<i32> {
    print!("{}", tools::dump::dump_file(&args.file, args.force_share)?);
    Ok(0)
}
