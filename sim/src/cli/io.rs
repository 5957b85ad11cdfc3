//! `qcsim io` (not implemented yet).

#[derive(clap::Args)]
pub struct Args {
    /// Image file.
    pub file: std::path::PathBuf,
}

pub fn run(_args: Args) -> anyhow::Result<i32> {
    anyhow::bail!("io: not implemented yet")
}
