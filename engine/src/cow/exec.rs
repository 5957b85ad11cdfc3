//! Carrying out COW plans: an allocation's COW described to the planner
//! (`Image::cow_job`), and the plan's requests issued on the data device
//! (`Image::run_cow_plan`). Nothing here decides; `cow::plan` has.

use super::plan::{CowJob, CowPlan, CowSwitches, Part, Range, Step, Write};
use crate::alloc::allocs::Alloc;
use crate::broken::{self, Broken};
use crate::dev::{BlockDev, WriteFlags, ZeroFlags};
use crate::error::Result;
use crate::image::Image;
use crate::rules::{Dev, Kind};

/// Where an allocation's guest bytes live on the data device: guest
/// `guest_start` at host `host`, the rest contiguous after it.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Place {
    pub guest_start: u64,
    pub host: u64,
}

impl Place {
    pub fn of(a: &Alloc) -> Place {
        Place {
            guest_start: a.guest_start(),
            host: a.host(),
        }
    }

    fn host_of(&self, guest: u64) -> u64 {
        self.host + (guest - self.guest_start)
    }
}

impl<D: BlockDev> Image<D> {
    /// What the planner needs to know of allocation `a`'s COW: the ranges
    /// `todo` still to copy, and the guest data range `data` written with
    /// them (see [`CowJob::data`]).
    pub(crate) fn cow_job(&self, a: &Alloc, todo: Vec<Range>, data: Option<Range>) -> CowJob {
        let (cover_start, cover_end) = a.cover();
        CowJob {
            cover: (cover_start, cover_end),
            pieces: self.cow_pieces(a, cover_start, cover_end),
            todo,
            data,
            in_place: a.in_place(),
            fresh: a.fresh(),
            failed_write: a.failed_write(),
        }
    }

    /// The switches the COW planner obeys in this image.
    pub(crate) fn cow_switches(&self) -> CowSwitches {
        CowSwitches {
            zero_cow: self.opts.switches.zero_cow,
            merge_cow: self.opts.switches.merge_cow,
            drop_cow: broken::is(&self.opts, Broken::DropPartialCow),
        }
    }

    /// Issue `plan`'s requests for the allocation at `place`, in order,
    /// stopping at the first error. `data` holds the guest data of the
    /// plan's [`Part::Data`] parts, starting at guest offset `data_at`.
    pub(crate) async fn run_cow_plan(
        &self,
        place: Place,
        plan: &CowPlan,
        data_at: u64,
        data: &[u8],
    ) -> Result<()> {
        let t = Target {
            place,
            data_at,
            data,
        };
        for step in &plan.steps {
            match step {
                Step::AlreadyZero(_) => self.count(|c| c.cow_already_zero += 1),
                Step::Zero {
                    range: (s, e),
                    then,
                    or_else,
                } => {
                    let flags = ZeroFlags {
                        no_fallback: true,
                        ..Default::default()
                    };
                    match self
                        .zeroes_write(Dev::Data, Kind::Data, place.host_of(*s), e - s, flags)
                        .await
                    {
                        Ok(()) => {
                            self.count(|c| c.zeroing_requests += 1);
                            self.write_group(&t, then).await?;
                        }
                        Err(err) if err.is_not_supported() => {
                            self.count(|c| c.zeroing_fallbacks += 1);
                            self.write_group(&t, or_else).await?;
                        }
                        Err(err) => return Err(err.into()),
                    }
                }
                Step::Write(ws) => self.write_group(&t, ws).await?,
            }
        }
        Ok(())
    }

    /// Read every COW part of the group's writes, then issue the writes in
    /// order.
    async fn write_group(&self, t: &Target<'_>, writes: &[Write]) -> Result<()> {
        // One buffer per write that holds old content; a write of guest
        // data alone goes out from the caller's buffer.
        let mut bufs: Vec<Option<Vec<u8>>> = Vec::with_capacity(writes.len());
        for w in writes {
            if w.cow_bytes() == 0 {
                bufs.push(None);
                continue;
            }
            let (s, e) = w.range();
            let mut b = vec![0u8; (e - s) as usize];
            for part in &w.0 {
                let (ps, pe) = part.range();
                let slot = &mut b[(ps - s) as usize..(pe - s) as usize];
                match part {
                    Part::Cow(p) => self.read_cow_source(&p.src, ps, slot).await?,
                    Part::Data(r) => slot.copy_from_slice(t.data_of(*r)),
                }
            }
            bufs.push(Some(b));
        }
        for (w, b) in writes.iter().zip(&bufs) {
            let bytes = match b {
                Some(b) => b.as_slice(),
                None => t.data_of(w.range()),
            };
            self.data_write(t.place.host_of(w.range().0), bytes, WriteFlags::default())
                .await?;
            let n = w.cow_bytes();
            self.count(|c| c.cow_bytes_written += n);
        }
        Ok(())
    }
}

/// What the writes of a plan being carried out go to, and with.
struct Target<'a> {
    place: Place,
    data_at: u64,
    data: &'a [u8],
}

impl Target<'_> {
    fn data_of(&self, (s, e): Range) -> &[u8] {
        &self.data[(s - self.data_at) as usize..(e - self.data_at) as usize]
    }
}
