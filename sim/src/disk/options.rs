//! The simulated disk's settings: one nested struct per concern, every field
//! documented with its meaning and constraint, checked by `validate` when a
//! disk is built. Rates are integers in parts per million so that a case's
//! JSON reproduces them exactly. `swarm` draws a whole set from a seed, so
//! one campaign mixes gentle and brutal cases (swarm testing).

use rand::Rng;
use serde::{Deserialize, Serialize};

use engine::dev::IoOp;
use engine::Guard;

use crate::exec::Nanos;
use crate::rng::{self, Stream};

/// One in a million: the unit of every `*_ppm` rate.
pub const PPM: u32 = 1_000_000;

/// Everything a simulated disk depends on besides its seed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct DiskOptions {
    /// The device's atomic write unit in bytes, and the grain of crash
    /// states: 512 or 4096.
    pub sector_size: u32,
    pub latency: LatencyOptions,
    pub support: SupportOptions,
    pub faults: FaultOptions,
    pub crash: CrashOptions,
    pub log: LogOptions,
}

impl Default for DiskOptions {
    fn default() -> Self {
        Self {
            sector_size: 512,
            latency: LatencyOptions::default(),
            support: SupportOptions::default(),
            faults: FaultOptions::default(),
            crash: CrashOptions::default(),
            log: LogOptions::default(),
        }
    }
}

/// How long requests take. A request's latency is drawn uniformly from
/// `[min, 2 * mean - min]` (so its mean is `mean`, with integer arithmetic
/// only, identical on every machine), plus `seek` if it does not start where
/// the previous one ended, plus its transfer time at `bandwidth`. Transfers
/// share one bus: with unlimited channels latencies overlap but transfers
/// follow one another; with limited channels a request holds a channel for
/// its latency and transfer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct LatencyOptions {
    /// Least time a read takes, in ns.
    pub read_min: Nanos,
    /// Mean time a read takes, in ns; at least `read_min`.
    pub read_mean: Nanos,
    /// Least time a write (also write_zeroes, discard) takes, in ns.
    pub write_min: Nanos,
    /// Mean time a write takes, in ns; at least `write_min`.
    pub write_mean: Nanos,
    /// Least time a flush takes, in ns.
    pub flush_min: Nanos,
    /// Mean time a flush takes, in ns; at least `flush_min`.
    pub flush_mean: Nanos,
    /// Extra time when a read or write does not start at the end of the
    /// previous one the device served, in ns (0 for SSDs; milliseconds for
    /// a disk head).
    pub seek: Nanos,
    /// Bytes per second the device transfers; 0 means transfers are free.
    pub bandwidth: u64,
    /// How many requests the device serves at once; a request waits for a
    /// free channel. 0 means without limit; at most 4096.
    pub channels: u32,
    /// Extra time when a write or write_zeroes ends past the device's end,
    /// in ns: the file system under an image file allocating blocks and
    /// updating the file's size. A case file written before this field
    /// existed reads it as 0, so that it replays as it ran.
    #[serde(default)]
    pub extend: Nanos,
    /// A rotating disk's head travel: extra time for a seek, on top of
    /// `seek`, in proportion to the distance the head moves, reaching
    /// `stroke` at `stroke_span` bytes or more. 0, the default and what a
    /// case file written before this field existed reads: every seek costs
    /// `seek` alone. Left out of a case's JSON when 0.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub stroke: Nanos,
    /// The distance, in bytes, over which a seek costs all of `stroke`.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub stroke_span: u64,
    /// Where an efficient write_zeroes takes the head, as a device offset,
    /// when set: a file system records a zeroed range of a file as
    /// unwritten extents in its journal, not in the range itself, so the
    /// request is a small write there and the next one seeks back. `None`
    /// (the default): it is timed as a write of its range that transfers
    /// nothing. Left out of a case's JSON when unset.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub zeroes_journal: Option<u64>,
    /// Requests held far longer than the rest (latency outliers), per
    /// device and per kind. A case file written before this field existed
    /// reads it as "no outliers", so that it replays as it ran; it is left
    /// out of a case's JSON when it holds none.
    #[serde(default, skip_serializing_if = "OutlierOptions::is_none")]
    pub outliers: OutlierOptions,
}

/// Which of a case's devices a disk is: each draws its outliers at its own
/// rates ([`OutlierOptions`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum DeviceRole {
    /// The image file (also every disk a test builds without a role).
    #[default]
    Image,
    /// The image's external data file.
    DataFile,
    /// The backing file.
    Backing,
}

/// Latency outliers: a request that is drawn one (at its device's and
/// kind's rate) takes its drawn latency times a factor drawn uniformly from
/// `[factor_min, factor_max]` (seek, extension and transfer are not
/// multiplied), so that it stays in flight while the rest of the workload
/// goes on: other requests complete, flushes complete (a flush makes
/// durable only writes that completed before it was issued, so never a
/// held write), crashes happen (a held write is pending, and a crash keeps
/// any of its sectors or none). Real devices do this (a remapped sector, a
/// firmware hiccup, a request stuck behind a queue), and it is what makes
/// the interleavings that need a long-lived request happen at all.
///
/// Drawn from the disk's own outlier stream, one draw per request and only
/// for kinds whose rate is not 0, so that turning outliers on moves no
/// other draw.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct OutlierOptions {
    /// The image file's rates.
    pub image: OutlierRates,
    /// The external data file's rates (unused without one).
    pub data_file: OutlierRates,
    /// The backing file's rates (unused without one).
    pub backing: OutlierRates,
    /// Least factor a held request's latency is multiplied by: 1 to
    /// `factor_max`.
    pub factor_min: u32,
    /// Largest factor: at most [`MAX_OUTLIER_FACTOR`].
    pub factor_max: u32,
    /// Requests held by rank rather than by rate, each with its factor:
    /// what `qcsim shrink` pins a failing case's drawn outliers to, so
    /// that removing an operation does not redraw which requests are held
    /// (one fewer draw shifts every later one). No draw is made for a
    /// request held here.
    pub held: Vec<HeldRequest>,
}

/// A request held by rank (`OutlierOptions::held`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HeldRequest {
    /// Which disk: its index on the simulation, in the order the run
    /// creates its disks (the image's, a data file's, a backing file's,
    /// and a new one for each at every crash).
    pub device: u32,
    /// The kind of request: read, write, write_zeroes, discard or flush.
    pub op: IoOp,
    /// Which one of its kind on that disk, counting from 1.
    pub n: u64,
    /// Its latency is multiplied by this: 1 to [`MAX_OUTLIER_FACTOR`].
    pub factor: u32,
}

/// Most requests `OutlierOptions::held` may name.
pub const MAX_HELD_REQUESTS: usize = 4096;

/// Largest factor an outlier's latency may be multiplied by
/// ([`OutlierOptions::factor_max`]).
pub const MAX_OUTLIER_FACTOR: u32 = 1000;

impl Default for OutlierOptions {
    fn default() -> Self {
        Self {
            image: OutlierRates::default(),
            data_file: OutlierRates::default(),
            backing: OutlierRates::default(),
            factor_min: 10,
            factor_max: MAX_OUTLIER_FACTOR,
            held: Vec::new(),
        }
    }
}

/// One device's outlier rates, each in parts per million of its kind's
/// requests.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct OutlierRates {
    pub read_ppm: u32,
    pub write_ppm: u32,
    pub flush_ppm: u32,
    pub zeroes_ppm: u32,
    pub discard_ppm: u32,
}

impl OutlierRates {
    /// The rate of requests of kind `op` (truncates are never held).
    pub fn of(&self, op: IoOp) -> u32 {
        match op {
            IoOp::Read => self.read_ppm,
            IoOp::Write => self.write_ppm,
            IoOp::Flush => self.flush_ppm,
            IoOp::WriteZeroes => self.zeroes_ppm,
            IoOp::Discard => self.discard_ppm,
            IoOp::Truncate => 0,
        }
    }

    fn all(&self) -> [(u32, &'static str); 5] {
        [
            (self.read_ppm, "read_ppm"),
            (self.write_ppm, "write_ppm"),
            (self.flush_ppm, "flush_ppm"),
            (self.zeroes_ppm, "zeroes_ppm"),
            (self.discard_ppm, "discard_ppm"),
        ]
    }

    pub fn is_none(&self) -> bool {
        self.all().iter().all(|&(v, _)| v == 0)
    }
}

impl OutlierOptions {
    /// The rates of the device in `role`.
    pub fn rates(&self, role: DeviceRole) -> &OutlierRates {
        match role {
            DeviceRole::Image => &self.image,
            DeviceRole::DataFile => &self.data_file,
            DeviceRole::Backing => &self.backing,
        }
    }

    /// Whether no device holds any request: the default, as in every case
    /// saved before outliers existed.
    pub fn is_none(&self) -> bool {
        *self == Self::default()
    }

    /// Whether some device may hold some request.
    pub fn any(&self) -> bool {
        !(self.image.is_none()
            && self.data_file.is_none()
            && self.backing.is_none()
            && self.held.is_empty())
    }

    /// The factor a latency draw may be multiplied by at worst: 1 when no
    /// request is ever held.
    pub fn worst_factor(&self) -> u64 {
        if self.any() {
            let held = self.held.iter().map(|h| h.factor).max().unwrap_or(1);
            u64::from(self.factor_max.max(held).max(1))
        } else {
            1
        }
    }

    /// Rates and factors drawn from `seed` (swarm testing), from a stream
    /// of their own: half the cases hold nothing; in the rest each device
    /// and each kind is off in a third, else rare (up to 0.5%) or common
    /// (up to 20%).
    pub fn swarm(seed: u64) -> Self {
        let mut r = rng::stream(seed, Stream::OutlierConfig);
        let mut o = OutlierOptions::default();
        if r.gen_bool(0.5) {
            return o;
        }
        let common = r.gen_bool(0.4);
        let rates = |r: &mut rand_chacha::ChaCha8Rng| {
            let mut rate = || {
                if r.gen_range(0..3) == 0 {
                    0
                } else if common {
                    r.gen_range(10_000..=200_000)
                } else {
                    r.gen_range(500..=5_000)
                }
            };
            OutlierRates {
                read_ppm: rate(),
                write_ppm: rate(),
                flush_ppm: rate(),
                zeroes_ppm: rate(),
                discard_ppm: rate(),
            }
        };
        o.image = rates(&mut r);
        o.data_file = rates(&mut r);
        o.backing = rates(&mut r);
        o.factor_max = pick_factor(&mut r);
        o
    }
}

/// The largest factor of a swarm's outliers: a tenth of the cases at most
/// 100, the rest up to [`MAX_OUTLIER_FACTOR`].
fn pick_factor(r: &mut rand_chacha::ChaCha8Rng) -> u32 {
    if r.gen_range(0..10) == 0 {
        100
    } else {
        MAX_OUTLIER_FACTOR
    }
}

impl Default for LatencyOptions {
    fn default() -> Self {
        Self::ssd()
    }
}

/// Longest any latency field (a mean, `seek`, `extend`) may be, in ns: a
/// minute. Together with [`MIN_BANDWIDTH`] this bounds what one request
/// can take ([`LatencyOptions::worst_request`]), so that the executor's
/// time budget, which scales with it, and the simulated clock stay far
/// below `u64::MAX` ns in any run the step budget allows.
pub const MAX_LATENCY_NS: Nanos = 60 * 1_000_000_000;

/// Slowest transfer rate a device may have, in bytes per second (see
/// [`MAX_LATENCY_NS`]); 0 still means transfers are free.
pub const MIN_BANDWIDTH: u64 = 1_000_000;

impl LatencyOptions {
    /// The longest one request of at most `bytes` can keep this device
    /// busy, in ns: the slowest draw of its kind (`2 * mean - min`), plus a
    /// seek and a file extension for reads and writes, plus the transfer of
    /// `bytes` (rounded up). Waiting for the bus or a channel is not
    /// counted: during the wait the device is busy with other requests,
    /// whose own worst cases count it. A latency outlier multiplies the
    /// draw (not the seek, extension or transfer) by up to
    /// `outliers.factor_max`. Saturates rather than overflows (the bounds
    /// `validate` checks keep it far from that).
    pub fn worst_request(&self, bytes: u64) -> Nanos {
        self.worst_request_held(bytes, 1)
    }

    /// `worst_request` for a device that may also hold a request by
    /// `factor` (a held background read, `SimDisk::hold_task`).
    pub fn worst_request_held(&self, bytes: u64, factor: u32) -> Nanos {
        let factor = self.outliers.worst_factor().max(u64::from(factor));
        let slowest = |min: Nanos, mean: Nanos| {
            mean.saturating_mul(2)
                .saturating_sub(min)
                .saturating_mul(factor)
        };
        let transfer = if self.bandwidth == 0 {
            0
        } else {
            let t = (u128::from(bytes) * 1_000_000_000).div_ceil(u128::from(self.bandwidth));
            u64::try_from(t).unwrap_or(Nanos::MAX)
        };
        let data = slowest(self.read_min, self.read_mean)
            .max(slowest(self.write_min, self.write_mean))
            .saturating_add(self.seek)
            .saturating_add(self.stroke)
            .saturating_add(self.extend)
            .saturating_add(transfer);
        data.max(slowest(self.flush_min, self.flush_mean))
    }

    /// The extra time of a seek over `distance` bytes (`stroke`'s share).
    pub fn travel(&self, distance: u64) -> Nanos {
        if self.stroke == 0 || self.stroke_span == 0 {
            return 0;
        }
        let d = u128::from(distance.min(self.stroke_span));
        let t = u128::from(self.stroke) * d / u128::from(self.stroke_span);
        u64::try_from(t).unwrap_or(self.stroke)
    }

    /// A fast SSD: tens of microseconds, many requests at once.
    pub fn ssd() -> Self {
        Self {
            read_min: 20_000,
            read_mean: 80_000,
            write_min: 20_000,
            write_mean: 100_000,
            flush_min: 50_000,
            flush_mean: 500_000,
            seek: 0,
            bandwidth: 2_000_000_000,
            channels: 0,
            // ext4 with O_DIRECT, 4 KiB writes at depth 64: writes that
            // extend the file cost about 46 us more each than writes inside
            // it (0.93 s over 20000 writes; docs/measured.md).
            extend: 40_000,
            stroke: 0,
            stroke_span: 0,
            zeroes_journal: None,
            outliers: OutlierOptions::default(),
        }
    }

    /// A spinning disk: one request at a time, milliseconds per seek.
    pub fn hdd() -> Self {
        Self {
            read_min: 100_000,
            read_mean: 200_000,
            write_min: 100_000,
            write_mean: 200_000,
            flush_min: 2_000_000,
            flush_mean: 8_000_000,
            seek: 8_000_000,
            bandwidth: 150_000_000,
            channels: 1,
            // Block allocation and the size update: about one more small
            // metadata write (not measured; the HDD model is a sketch).
            extend: 200_000,
            stroke: 0,
            stroke_span: 0,
            zeroes_journal: None,
            outliers: OutlierOptions::default(),
        }
    }

    /// The benchmark's rotating disk (`qcsim bench --sim --hdd`): `hdd`'s
    /// latencies, bandwidth and one request at a time, with seeks that
    /// cost with the distance (1 ms to settle on a nearby track, where the
    /// drive's write cache hides the rotation for writes, up to 16 ms across
    /// a 1 TiB platter) and efficient write_zeroes that are journal writes
    /// at 1 GiB into the disk (a file system marking the range unwritten).
    /// The journal's place is a guess: it sets how much slower a
    /// write_zeroes is than the buffers it replaces, not whether it is
    /// (two seeks of at least 1 ms cost more than a cluster's 60 KiB of
    /// zeroes take to transfer at 150 MB/s, wherever the journal is).
    /// Cases keep `hdd`, whose fixed seek their runs were drawn with.
    pub fn rotating() -> Self {
        Self {
            seek: 1_000_000,
            stroke: 15_000_000,
            stroke_span: 1 << 40,
            zeroes_journal: Some(1 << 30),
            ..Self::hdd()
        }
    }
}

/// What the device can do efficiently.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct SupportOptions {
    /// Whether `write_zeroes` is efficient. When false, a request with
    /// `no_fallback` fails with `NotSupported`, and one without writes zero
    /// buffers (counted, and timed with the transfer of the zeroes).
    pub write_zeroes: bool,
    /// What a discard does to the data.
    pub discard: DiscardEffect,
}

impl Default for SupportOptions {
    fn default() -> Self {
        Self {
            write_zeroes: true,
            discard: DiscardEffect::Zeroes,
        }
    }
}

/// What a discard does to the range (callers may rely on neither).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum DiscardEffect {
    /// The range reads as zeroes, with the durability of a write.
    Zeroes,
    /// The range keeps its content.
    Nothing,
    /// Each discard, drawn from the disk's own stream, does one or the
    /// other.
    Either,
}

/// A request that fails because it is the `n`-th of its kind.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct NthRequest {
    /// The kind of request: read, write, write_zeroes, discard or flush.
    pub op: IoOp,
    /// Which one, counting from 1 over the disk's life.
    pub n: u64,
    /// Only on this disk (its index on the simulation, as
    /// [`HeldRequest::device`]); on every disk of the case if absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub device: Option<u32>,
}

/// The faults the device injects. Faults never change the disk's pristine
/// state behind the caller's back except as the fault report says.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct FaultOptions {
    /// Master switch: when false nothing below is injected.
    pub enabled: bool,
    /// Chance in a million that a read fails with EIO.
    pub read_error_ppm: u32,
    /// Chance in a million that a write, write_zeroes or discard fails with
    /// EIO; the failed request may still have landed on a prefix of its
    /// sectors.
    pub write_error_ppm: u32,
    /// Chance in a million that a flush fails with EIO (making nothing
    /// durable).
    pub flush_error_ppm: u32,
    /// Requests that fail with EIO because of their rank.
    pub error_at: Vec<NthRequest>,
    /// Writes that would end past this many bytes fail with ENOSPC
    /// (`None`: no limit).
    pub capacity: Option<u64>,
    /// Harsher mode: chance in a million that a write reports success but
    /// never lands.
    pub lost_write_ppm: u32,
    /// Harsher mode: chance in a million that a write lands up to
    /// `misdirect_sectors_max` sectors away from where it was sent.
    pub misdirected_write_ppm: u32,
    /// How far a misdirected write may land, in sectors; at least 1 when
    /// `misdirected_write_ppm` is not 0.
    pub misdirect_sectors_max: u32,
    /// A deliberately broken disk that lies about its cache: flushes and
    /// FUA writes complete and succeed, and make nothing durable, so after
    /// a crash only what was durable at the start is certain. Not under
    /// the master switch (`enabled`) or `SimDisk::set_faults_enabled`: the
    /// disk lies always. It shows that a harness sees lost writes at all
    /// (`--disk-ignores-flush`); no correct driver survives it. Left out of
    /// a case's JSON when off.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub ignores_flush: bool,
}

impl Default for FaultOptions {
    fn default() -> Self {
        Self {
            enabled: false,
            read_error_ppm: 0,
            write_error_ppm: 0,
            flush_error_ppm: 0,
            error_at: Vec::new(),
            capacity: None,
            lost_write_ppm: 0,
            misdirected_write_ppm: 0,
            misdirect_sectors_max: 16,
            ignores_flush: false,
        }
    }
}

/// How crash images are built.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct CrashOptions {
    /// Keep the durable state and the unflushed writes apart, so that crash
    /// images can be built. Benchmarks that never crash turn it off to save
    /// memory; `crash_image` then fails.
    pub track: bool,
    /// Harsher mode: chance in a million that a sector that takes a new
    /// value in a crash is torn (only a prefix of it is new).
    pub tear_ppm: u32,
    /// What the torn part of a sector holds.
    pub tear_fill: TearFill,
    /// Chance in a million that a crash group loses power the moment one
    /// of its device flushes reaches the disk (each flush with chance 1/n,
    /// n drawn per crash up to [`AT_FLUSH_MAX`]) rather than at a random
    /// time:
    /// then everything written since the last completed flush is pending,
    /// including a writeback's metadata up to that flush, so a crash state
    /// can keep any subset of it. Ordering bugs inside a writeback (a
    /// missing flush between two of its steps) are reached only there; a
    /// random moment rarely falls in so short a window. A group that issues
    /// fewer flushes runs to its end. Absent in cases saved before it
    /// existed: 0, as they ran.
    pub at_flush_ppm: u32,
    /// The most bytes of completed writes the device holds unflushed (its
    /// volatile cache); past it, the oldest completed writes are written
    /// back (made durable, in completion order), as a real cache does when
    /// it fills. `None`: the cache holds everything, the harshest model,
    /// and the one every case runs (a case ends). A long session (`qcsim
    /// serve --sim`) sets it, so that a driver that never flushes does not
    /// make the disk keep every write it ever sent. Left out of a case's
    /// JSON when `None`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cache_bytes_max: Option<u64>,
    /// Guards armed to take the power with them: in a group with no crash
    /// of its own, each time one of these guards' condition arises (see
    /// `engine::guards`), with chance 1/`at_guard_one_in`, the power goes
    /// at the next device flush, the one the guard orders (or, with the
    /// guard broken, the next one there is). Each guard at most once per
    /// case. A table growth or a new refcount table entry happens in few
    /// cases and in a few writebacks of those, a window that crashes at a
    /// random flush of a random group almost never reach. Empty in cases
    /// saved before it existed, as they ran.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub at_guards: Vec<Guard>,
    /// See `at_guards`: 1 crashes at the first time, larger values later
    /// ones (the first new refcount table entry of an image comes with new
    /// L2 tables that no L1 entry points at yet, so a lost table entry
    /// there harms nothing).
    #[serde(default = "one", skip_serializing_if = "is_one")]
    pub at_guard_one_in: u32,
    /// Crash inside a multi-step metadata operation (snapshot create,
    /// apply and delete, table growth, shrink, amend: `engine::steps`):
    /// in a group with no crash of its own, when the engine starts such
    /// an operation a step of it is drawn, and the power goes at the first
    /// device flush once the operation reached that step or a later one.
    /// Once per kind of operation per case. A random moment or flush
    /// almost never falls inside these few flushes, where the step order
    /// is all that protects a version 2 image. False in cases saved
    /// before it existed, as they ran.
    #[serde(default, skip_serializing_if = "is_false")]
    pub at_steps: bool,
}

fn is_false(b: &bool) -> bool {
    !*b
}

fn one() -> u32 {
    1
}

fn is_one(n: &u32) -> bool {
    *n == 1
}

/// The guards a generated case may arm (`CrashOptions::at_guards`): those
/// whose window is one flush and whose condition arises in few cases.
pub const CRASH_GUARDS: [Guard; 2] = [Guard::ReftableFlushBeforeL2, Guard::ReftableBeforeHeader];

/// Largest n of a crash at a flush: each flush of the crash group takes
/// the power with it with chance 1/n.
pub const AT_FLUSH_MAX: u32 = 3;

impl Default for CrashOptions {
    fn default() -> Self {
        Self {
            track: true,
            tear_ppm: 0,
            tear_fill: TearFill::Old,
            at_flush_ppm: 0,
            cache_bytes_max: None,
            at_guards: Vec::new(),
            at_guard_one_in: 1,
            at_steps: false,
        }
    }
}

/// What the part of a torn sector past the tear holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum TearFill {
    /// Its durable content.
    Old,
    /// Random bytes (from the crash stream).
    Garbage,
}

/// What the write log keeps.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct LogOptions {
    /// Record every request.
    pub enabled: bool,
    /// Most payload bytes the log keeps (summed over requests); past it,
    /// entries keep only the payload's hash.
    pub data_bytes_max: u64,
}

impl Default for LogOptions {
    fn default() -> Self {
        Self {
            enabled: true,
            data_bytes_max: 64 << 20,
        }
    }
}

/// A setting that breaks its documented constraint.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("disk option {field}: {reason}")]
pub struct OptionsError {
    pub field: &'static str,
    pub reason: String,
}

fn check(ok: bool, field: &'static str, reason: impl Into<String>) -> Result<(), OptionsError> {
    if ok {
        Ok(())
    } else {
        Err(OptionsError {
            field,
            reason: reason.into(),
        })
    }
}

fn check_ppm(v: u32, field: &'static str) -> Result<(), OptionsError> {
    check(
        v <= PPM,
        field,
        format!("{v} is more than {PPM} per million"),
    )
}

impl DiskOptions {
    /// Check every documented constraint.
    pub fn validate(&self) -> Result<(), OptionsError> {
        check(
            self.sector_size == 512 || self.sector_size == 4096,
            "sector_size",
            format!("{} is neither 512 nor 4096", self.sector_size),
        )?;
        let l = &self.latency;
        for (min, mean, field) in [
            (l.read_min, l.read_mean, "latency.read_mean"),
            (l.write_min, l.write_mean, "latency.write_mean"),
            (l.flush_min, l.flush_mean, "latency.flush_mean"),
        ] {
            check(
                mean >= min,
                field,
                format!("{mean} is below the minimum {min}"),
            )?;
            // 2 * mean - min must not overflow, and one request must stay
            // short enough for the executor's time budget (which grows with
            // it) to be counted in u64 nanoseconds: see `MAX_LATENCY_NS`.
            check(
                mean <= MAX_LATENCY_NS,
                field,
                format!(
                    "{mean} ns is more than {} s",
                    MAX_LATENCY_NS / 1_000_000_000
                ),
            )?;
        }
        for (v, field) in [
            (l.seek, "latency.seek"),
            (l.extend, "latency.extend"),
            (l.stroke, "latency.stroke"),
        ] {
            check(
                v <= MAX_LATENCY_NS,
                field,
                format!("{v} ns is more than {} s", MAX_LATENCY_NS / 1_000_000_000),
            )?;
        }
        check(
            l.stroke == 0 || l.stroke_span > 0,
            "latency.stroke_span",
            format!("0 with a stroke of {} ns", l.stroke),
        )?;
        check(
            l.bandwidth == 0 || l.bandwidth >= MIN_BANDWIDTH,
            "latency.bandwidth",
            format!(
                "{} bytes/s is below {MIN_BANDWIDTH} (0 means transfers are free)",
                l.bandwidth
            ),
        )?;
        check(
            l.channels <= 4096,
            "latency.channels",
            format!("{} is more than 4096", l.channels),
        )?;
        let o = &l.outliers;
        for rates in [&o.image, &o.data_file, &o.backing] {
            for (v, field) in rates.all() {
                check_ppm(v, field)?;
            }
        }
        check(
            (1..=MAX_OUTLIER_FACTOR).contains(&o.factor_max),
            "latency.outliers.factor_max",
            format!("{} is not 1 to {MAX_OUTLIER_FACTOR}", o.factor_max),
        )?;
        check(
            (1..=o.factor_max).contains(&o.factor_min),
            "latency.outliers.factor_min",
            format!("{} is not 1 to factor_max {}", o.factor_min, o.factor_max),
        )?;
        check(
            o.held.len() <= MAX_HELD_REQUESTS,
            "latency.outliers.held",
            format!("{} requests, more than {MAX_HELD_REQUESTS}", o.held.len()),
        )?;
        for h in &o.held {
            check(h.n >= 1, "latency.outliers.held", "requests count from 1")?;
            check(
                h.op != IoOp::Truncate,
                "latency.outliers.held",
                "a truncate is never held",
            )?;
            check(
                (1..=MAX_OUTLIER_FACTOR).contains(&h.factor),
                "latency.outliers.held",
                format!("factor {} is not 1 to {MAX_OUTLIER_FACTOR}", h.factor),
            )?;
        }
        let f = &self.faults;
        check_ppm(f.read_error_ppm, "faults.read_error_ppm")?;
        check_ppm(f.write_error_ppm, "faults.write_error_ppm")?;
        check_ppm(f.flush_error_ppm, "faults.flush_error_ppm")?;
        check_ppm(f.lost_write_ppm, "faults.lost_write_ppm")?;
        check_ppm(f.misdirected_write_ppm, "faults.misdirected_write_ppm")?;
        check(
            f.misdirected_write_ppm == 0 || f.misdirect_sectors_max >= 1,
            "faults.misdirect_sectors_max",
            "must be at least 1 when misdirected writes are on",
        )?;
        for nth in &f.error_at {
            check(nth.n >= 1, "faults.error_at", "requests count from 1")?;
            check(
                nth.op != IoOp::Truncate,
                "faults.error_at",
                "truncate is not a fault target",
            )?;
        }
        check_ppm(self.crash.tear_ppm, "crash.tear_ppm")?;
        check_ppm(self.crash.at_flush_ppm, "crash.at_flush_ppm")?;
        check(
            self.crash.cache_bytes_max != Some(0),
            "crash.cache_bytes_max",
            "a cache of 0 bytes: leave it out for an unbounded one",
        )?;
        for (i, g) in self.crash.at_guards.iter().enumerate() {
            check(
                !self.crash.at_guards[..i].contains(g),
                "crash.at_guards",
                "names a guard twice",
            )?;
        }
        check(
            (1..=PPM).contains(&self.crash.at_guard_one_in),
            "crash.at_guard_one_in",
            format!("must be 1 to {PPM}"),
        )?;
        Ok(())
    }

    /// Whether a harsher mode is on (lost or misdirected writes, torn
    /// sectors): then qcow2 cannot promise the crash rules, and only "no
    /// panic, no hang, and the checker says what happened" holds.
    pub fn is_harsh(&self) -> bool {
        let f = &self.faults;
        (f.enabled && (f.lost_write_ppm > 0 || f.misdirected_write_ppm > 0))
            || self.crash.tear_ppm > 0
    }

    /// A whole set of disk options drawn from `seed` (swarm testing): sector
    /// size, latencies, support flags and fault rates. Harsher modes (lost
    /// and misdirected writes, torn sectors) only when `harsh`.
    pub fn swarm(seed: u64, harsh: bool) -> Self {
        let mut r = rng::stream(seed, Stream::DeviceConfig);
        let latency = match r.gen_range(0..4) {
            0 => LatencyOptions::hdd(),
            1 => {
                // A narrow spread: completions reorder less often.
                let mut l = LatencyOptions::ssd();
                l.write_mean = l.write_min * 2;
                l.read_mean = l.read_min * 2;
                l
            }
            _ => LatencyOptions::ssd(),
        };
        let latency = LatencyOptions {
            outliers: OutlierOptions::swarm(seed),
            ..latency
        };
        let mut crash = CrashOptions {
            at_flush_ppm: CrashOptions::swarm_at_flush(seed),
            at_guards: CrashOptions::swarm_at_guards(seed),
            at_guard_one_in: CrashOptions::swarm_at_guard_one_in(seed),
            at_steps: true,
            ..CrashOptions::default()
        };
        if harsh && r.gen_bool(0.5) {
            crash.tear_ppm = r.gen_range(1_000..=200_000);
            crash.tear_fill = if r.gen_bool(0.5) {
                TearFill::Old
            } else {
                TearFill::Garbage
            };
        }
        Self {
            sector_size: if r.gen_bool(0.75) { 512 } else { 4096 },
            latency,
            support: SupportOptions {
                write_zeroes: r.gen_bool(0.6),
                discard: [
                    DiscardEffect::Zeroes,
                    DiscardEffect::Nothing,
                    DiscardEffect::Either,
                ][r.gen_range(0..3)],
            },
            faults: FaultOptions::swarm(seed, harsh),
            crash,
            log: LogOptions::default(),
        }
    }
}

impl CrashOptions {
    /// How often crashes come at a flush, drawn from `seed` on a stream of
    /// its own (so the other device settings of a seed stay as they were):
    /// never in a third of cases, at every crash in a third, at half of
    /// them in the rest.
    pub fn swarm_at_flush(seed: u64) -> u32 {
        let mut r = rng::substream(seed, Stream::DeviceConfig, 1);
        [0, PPM / 2, PPM][r.gen_range(0..3)]
    }

    /// The guards a case arms (`at_guards`), drawn from `seed` on a stream
    /// of its own: each of [`CRASH_GUARDS`] with chance one half.
    pub fn swarm_at_guards(seed: u64) -> Vec<Guard> {
        let mut r = rng::substream(seed, Stream::DeviceConfig, 2);
        CRASH_GUARDS
            .into_iter()
            .filter(|_| r.gen_bool(0.5))
            .collect()
    }

    /// `at_guard_one_in`, drawn from `seed` on a stream of its own: 1 in
    /// two cases of five (a table growth's guard arises once in a case),
    /// else 2, 4 or 8.
    pub fn swarm_at_guard_one_in(seed: u64) -> u32 {
        let mut r = rng::substream(seed, Stream::DeviceConfig, 3);
        [1, 1, 2, 4, 8][r.gen_range(0..5)]
    }
}

impl FaultOptions {
    /// Fault rates drawn from `seed`: a quarter of cases inject nothing, the
    /// rest are gentle (rare errors) or brutal (frequent ones), and each kind
    /// of fault is off entirely in a third of them.
    pub fn swarm(seed: u64, harsh: bool) -> Self {
        let mut r = rng::stream(seed, Stream::FaultConfig);
        let mut f = FaultOptions::default();
        let level = r.gen_range(0..100);
        if level < 25 {
            return f;
        }
        let brutal = level >= 70;
        let rate = |r: &mut rand_chacha::ChaCha8Rng| -> u32 {
            if r.gen_range(0..3) == 0 {
                0
            } else if brutal {
                r.gen_range(10_000..=100_000)
            } else {
                r.gen_range(100..=3_000)
            }
        };
        f.enabled = true;
        f.read_error_ppm = rate(&mut r);
        f.write_error_ppm = rate(&mut r);
        f.flush_error_ppm = rate(&mut r);
        if r.gen_range(0..4) == 0 {
            let op = [IoOp::Read, IoOp::Write, IoOp::Flush][r.gen_range(0..3)];
            f.error_at.push(NthRequest {
                op,
                n: r.gen_range(1..=200),
                device: None,
            });
        }
        if brutal && r.gen_range(0..4) == 0 {
            f.capacity = Some(r.gen_range(4..=256u64) << 16);
        }
        if harsh {
            f.lost_write_ppm = rate(&mut r) / 10;
            f.misdirected_write_ppm = rate(&mut r) / 10;
        }
        f
    }
}

/// Whether a count is zero: fields left out of a case's JSON then.
fn is_zero(v: &u64) -> bool {
    *v == 0
}
