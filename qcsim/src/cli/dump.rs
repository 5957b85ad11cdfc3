//! `qcsim dump FILE`: a deterministic text dump of the image's header, L1
//! and L2 tables, refcount table and refcounts (see `oracle::dump`).

use std::path::PathBuf;

use anyhow::Context;

#[derive(clap::Args)]
pub struct Args {
    /// Image file.
    pub file: PathBuf,
}

pub fn run(args: Args) -> anyhow::Result<i32> {
    let f = std::fs::File::open(&args.file)
        .with_context(|| format!("opening {}", args.file.display()))?;
    print!("{}", oracle::dump::dump(&f));
    Ok(0)
}
