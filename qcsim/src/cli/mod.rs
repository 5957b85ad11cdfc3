//! One module per `qcsim` subcommand; each has `Args` and `run`, which
//! returns the process exit code.

pub mod bench;
pub mod campaign;
pub mod check;
pub mod convert;
pub mod create;
pub mod disk_replay;
pub mod driver;
pub mod dump;
pub mod enumerate;
pub mod exhaust;
pub mod findings;
pub mod hint;
pub mod info;
pub mod replay;
pub mod report;
pub mod run;
pub mod serve;
pub mod shrink;
pub mod trace;
