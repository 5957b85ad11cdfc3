//! qcsim's engine on real image files: opening an image and its backing
//! chain on `FileDev`s as QEMU resolves them (`files`), `qemu-img create`
//! for raw and qcow2 files so that a failed command destroys none
//! (`create`), the argument syntax shared with qemu-img and qemu-io
//! (`qemu_args`), and the tools themselves as functions with typed errors
//! and structured results: `qemu-img info` (`info`), `check` with repair
//! (`check`), `convert` (`convert`) and its `-p` progress lines
//! (`progress`), the qemu-io command parser and
//! session (`io`), `qemu-img resize` (`resize`), `rebase` (`rebase`), `commit`
//! (`commit`), `qemu-img measure` (`measure`: the size a new raw or qcow2
//! image needs), `qemu-img amend` for qcow2 (`amend`), the metadata dump (`dump`), and qemu-img bench's job
//! through the engine, timed by the wall clock, with its flags and the
//! `qemu-img bench` run it is compared with (`bench`).
//!
//! The `qcsim` binary is thin glue over this crate and `sim`: it parses
//! arguments, calls these functions, prints and maps results to exit
//! codes. Each image command (create, info, check, convert, dump) has its
//! one implementation here, options in and a typed result out; `qcsim X`
//! and the drop-in `qemu-img X` are front ends that parse their own flags
//! into those options and word the result their own way. This crate never
//! uses the simulation.
//!
//! ## What it holds
//!
//! the engine on real image files, and the real-file tools as functions with
//! typed errors (`thiserror` enums naming the problem and the file) and
//! structured results: opening an image and its backing chain as QEMU resolves
//! it (`files`: every file of the chain opened and told apart by device and
//! inode first, so a backing or data file that is a file already open is
//! refused before anything is written, then the engines bottom-up; QEMU's image
//! locks on each file; `Disk::discard` leaves a version 2 image with a backing
//! file as it is, as QEMU's driver declines that discard), `qemu-img create`
//! for raw and qcow2 files, so that a failed command destroys none (`create`:
//! `prepare_image` parses the options and, after building the "Formatting ..."
//! line, makes the qcow2 driver's checks, whose failures
//! (`CreateImageError::Driver`, like raw's `RawPreallocation`) carry that line
//! because qemu-img prints it before them, opens the backing file for its size
//! and its chain's files, runs the engine's option checks on a device that
//! refuses all I/O, then opens, locks and sizes every target before any is
//! emptied; the caller prints the `PreparedImage`'s "Formatting ..." line, then
//! `write` creates the image; a `CreateImageError` names the option or file),
//! qemu-img/qemu-io argument syntax (`qemu_args`), `qemu-img info` (`info`: an
//! `InfoReport` that renders as qemu-img's human text or its JSON;
//! `info_chain` one for each image of a backing chain), `qemu-img
//! check` with repair (`check`: `oracle::check` on the file under QEMU's locks,
//! on the image and, as qemu-img check holds them, on its external data file, a
//! `CheckOutcome` with qemu-img check's exit codes), `qemu-img convert`
//! (`convert`: into a new image, into an existing one (`-n`) or onto a
//! backing file (`-B`), as `Destination` says; block status skips holes,
//! only non-zero blocks are written,
//! every check before the destination is touched; with `compress` (`-c`) each
//! data cluster goes through `Image::write_compressed`, one chunk at a time so
//! the clusters are packed in guest order as qemu-img's in-order writes pack
//! them; `ConvertStats`; `progress_plan` and `convert_reporting` for `-p`),
//! qemu-img's `-p` lines (`progress`: `Progress` prints a percentage as
//! qemu-img does, in `f32`, only past its step or at 0 and 100; `ConvertPlan`
//! holds convert's requests as qemu-img cuts them, reported in order as the
//! copy's finished prefix passes each, so the lines never depend on timing),
//! the qemu-io command set (`io`: `parse_command` with qemu-io's flags and its
//! messages for bad arguments (`write -c` a compressed write,
//! `WriteData::Compressed`, its refusals in qemu-io's errno words), each marked
//! for the stream qemu-io prints it on; a `Session` that runs one command at a
//! time on one open image and returns its output and typed failure, with
//! qemu-io's report lines, the timing line only when built `with_timing`, so
//! that library callers get reproducible output; `open`, `close`, `reopen`,
//! `quit`, `abort` and `sigraise` are parsed here and carried out by the
//! caller, which owns the session), `qemu-img map` (`map`: each run's layer,
//! flags (`compressed` from `Image::is_compressed`) and host offset, down the
//! backing chain through `Image::backing`, block status asked 1024 clusters at
//! a time so a fully allocated image maps in linear time, under the data
//! clusters of an image that `Image::looks_preallocated` the file's holes
//! (`FileDev::extent_at`, `SEEK_DATA`/`SEEK_HOLE`) as zeroes, as QEMU does,
//! merged as qemu-img merges them, rendered in its human and JSON layouts; the
//! human layout leaves zeroes out), `qemu-img resize` (`resize`: relative
//! sizes, `--shrink` required to shrink, `Image::resize`, and after a shrink
//! the closed file cut at the checker's image end offset when the checker finds
//! it consistent), `qemu-img rebase` (`rebase`: safe mode copies into the
//! image, cluster by cluster, what the old chain shows where the image
//! allocates nothing and the new backing file differs (zeroes past the old
//! backing file's end as zero clusters), then `Image::set_backing_file`; `-u`
//! the header only), `qemu-img commit` (`commit`: each image above the base
//! opened alone, lowest first, its data and zero clusters written into the
//! base, which grows first if shorter; then `Image::make_empty` on the top
//! unless `-d`, which `-b` implies), `qemu-img measure` (`measure`:
//! `qcow2_sizes` the qcow2 driver's arithmetic, the metadata of a fully
//! allocated image plus the data needed, unit-tested against figures qemu-img
//! printed; the data of a source image is what `map` finds holding data (zero
//! clusters and a file's holes left out), of an internal snapshot (`-l`) its
//! data and compressed clusters (`Image::snapshot_data_ranges`) at the image's
//! current size, each run rounded out to the target's clusters; the `-o`
//! options checked as the raw and qcow2 drivers check them, in qemu-img's
//! words; a LUKS target's header (`luks_header_bytes`, its cipher's key split
//! in 4000 stripes for each of 8 key slots) counted before the image, its
//! secret looked for among the `--object` ids), `qemu-img amend` for qcow2
//! (`amend`: the `-o` options amend takes, checked in the driver's order; the
//! version and lazy refcounts changed by the engine (`engine::amend`:
//! `Image::upgrade_to_v3`, `downgrade_to_v2` converting zero clusters as QEMU
//! does and refusing what QEMU refuses, `set_lazy_refcounts`, each with the
//! header written last), `refcount_bits` by `Image::set_refcount_bits`, `size`
//! through `resize`), the metadata dump of a file under read-only locks
//! (`dump`, over `oracle::dump`), qemu-img bench's job through the engine,
//! timed by the wall clock (`bench`: on raw, qcow2 and overlays, whose backing
//! chain it opens read-only below them through counted devices;
//! `FileBenchFlags::parse` checks the flags, a `FileBench` runs the job into a
//! `FileBenchReport` and, with `--compare-qemu`, `qemu-img bench` on a fresh
//! copy)

pub mod amend;
pub mod bench;
pub mod check;
pub mod commit;
pub mod convert;
pub mod create;
pub mod dump;
pub mod files;
pub mod info;
pub mod io;
pub mod map;
pub mod measure;
pub mod progress;
pub mod qemu_args;
pub mod rebase;
pub mod resize;
pub mod size;
pub mod snapshot;
