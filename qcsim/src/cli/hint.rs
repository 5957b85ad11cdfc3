//! How the commands' printed hints (a replay command, a shrink's output)
//! run qcsim again. A leaf, so that every subcommand can name it.

/// The command a printed hint runs qcsim with: from the repository, as
/// the README runs it.
pub const CARGO_QCSIM: &str = "cargo run --release --bin qcsim --";
