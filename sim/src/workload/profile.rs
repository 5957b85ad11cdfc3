//! The workload profiles by name.

use serde::{Deserialize, Serialize};

/// A way of generating a workload from a seed.
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize,
)]
#[serde(rename_all = "snake_case")]
pub enum Profile {
    /// One of the others, chosen by the seed: the campaign default. Mostly
    /// one of [`Profile::CONCRETE`]; one case in ten one of
    /// [`Profile::FUA`] (drawn apart, so adding those changed no other
    /// case's pick).
    #[default]
    Mixed,
    /// Random reads, writes, zero writes, discards and flushes, concurrent,
    /// concentrated on a few clusters so that requests collide.
    Random,
    /// `dd`-like: 4 KiB to 1 MiB writes in order, then read back.
    Sequential,
    /// iozone-like: write, rewrite, read and random rewrite of a file.
    Iozone,
    /// `qemu-img bench -w`-like: fixed-size writes at a queue depth.
    Bench,
    /// `mkfs`-like: a whole-disk discard, zeroed tables, then small
    /// scattered metadata writes and journal commits.
    Mkfs,
    /// An overlay on a backing file, written in partial clusters.
    Backing,
    /// A journaling file system: data, journal blocks, a flush, then a
    /// commit record with FUA; checkpoints in place.
    Journal,
    /// A database opened O_DSYNC: every write FUA.
    Dsync,
}

impl Profile {
    pub const ALL: [Profile; 9] = [
        Profile::Mixed,
        Profile::Random,
        Profile::Sequential,
        Profile::Iozone,
        Profile::Bench,
        Profile::Mkfs,
        Profile::Backing,
        Profile::Journal,
        Profile::Dsync,
    ];

    /// The profiles [`Profile::Mixed`] chooses among.
    pub const CONCRETE: [Profile; 6] = [
        Profile::Random,
        Profile::Sequential,
        Profile::Iozone,
        Profile::Bench,
        Profile::Mkfs,
        Profile::Backing,
    ];

    /// The profiles built on FUA writes, which [`Profile::Mixed`] picks
    /// one case in ten.
    pub const FUA: [Profile; 2] = [Profile::Journal, Profile::Dsync];

    pub fn name(&self) -> &'static str {
        match self {
            Profile::Mixed => "mixed",
            Profile::Random => "random",
            Profile::Sequential => "sequential",
            Profile::Iozone => "iozone",
            Profile::Bench => "bench",
            Profile::Mkfs => "mkfs",
            Profile::Backing => "backing",
            Profile::Journal => "journal",
            Profile::Dsync => "dsync",
        }
    }
}

impl std::fmt::Display for Profile {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// A profile name that is not one of [`Profile::ALL`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown workload profile {0:?} (known: mixed, random, sequential, iozone, bench, mkfs, backing, journal, dsync)")]
pub struct UnknownProfile(pub String);

impl std::str::FromStr for Profile {
    type Err = UnknownProfile;

    fn from_str(s: &str) -> Result<Profile, UnknownProfile> {
        Profile::ALL
            .into_iter()
            .find(|p| p.name() == s)
            .ok_or_else(|| UnknownProfile(s.to_string()))
    }
}
