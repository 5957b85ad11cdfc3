//! qemu-img convert's `-p` percentages: [`progress_plan`] cuts the source
//! into the requests qemu-img would copy it in (following qemu-img's block
//! status, `request_status`), and `Reporter` reports each request's
//! percentage once the copy's finished prefix has passed its end, so the
//! sequence never depends on timing.

use engine::{Backing, Status};

use crate::files::Disk;
use crate::progress::{ConvertPlan, MAX_STATUS_REQUEST};

/// The status at `pos` (at most `len` bytes) as qemu-img's block status
/// answers it, which its progress follows: down the backing chain unless
/// `top_only`, and a data run only as far as its clusters follow one
/// another in the image file (a compressed cluster alone) and stay within
/// one L2 table, since that is where QEMU's qcow2 driver ends a run.
async fn request_status(
    src: &Disk,
    pos: u64,
    len: u64,
    top_only: bool,
) -> engine::Result<(Status, u64)> {
    let Some(mut image) = src.qcow2() else {
        return Ok((Status::Data, len));
    };
    let mut len = len;
    loop {
        let (status, n) = image.block_status(pos, len).await?;
        match (status, image.backing()) {
            (Status::Backing, Some(Backing::Qcow2(lower))) if !top_only => {
                image = lower;
                len = n;
            }
            (Status::Backing, Some(Backing::Raw(_))) if !top_only => return Ok((Status::Data, n)),
            (Status::Data, _) => {
                let cluster = image.cluster_size();
                let entry = if image.header().extended_l2() { 16 } else { 8 };
                let table = cluster / entry * cluster;
                let end = (pos + n).min((pos / table + 1) * table);
                let mut at = (pos / cluster + 1) * cluster;
                let mut host = image.host_offset(pos).await?;
                while at < end {
                    let next = image.host_offset(at).await?;
                    match (host, next) {
                        (Some(h), Some(x)) if x == h - h % cluster + cluster => host = next,
                        _ => break,
                    }
                    at += cluster;
                }
                return Ok((Status::Data, at.min(end) - pos));
            }
            _ => return Ok((status, n)),
        }
    }
}

/// qemu-img convert's progress plan for `src` (see [`ConvertPlan`]),
/// copied in requests of at most `buffer` bytes. With `top_only` (the
/// destination has a backing file, which stands for the source's), only
/// what the top image holds as data counts; otherwise whatever reads as
/// data from anywhere in the chain. A raw source is data throughout here,
/// where qemu-img would skip the holes its file system reports.
pub async fn progress_plan(src: &Disk, top_only: bool, buffer: u64) -> engine::Result<ConvertPlan> {
    let size = src.virtual_size();
    let align = src.qcow2().map_or(512, |i| i.cluster_size());
    let mut plan = ConvertPlan::new();
    let mut pos = 0;
    while pos < size {
        let len = (size - pos).min(MAX_STATUS_REQUEST);
        let (status, n) = request_status(src, pos, len, top_only).await?;
        // qemu-img counts whole sectors, and ends a run on a cluster
        // boundary of the source when that leaves something of it.
        let mut n = n.div_ceil(512) * 512;
        let tail = (pos + n) % align;
        if n > tail {
            n -= tail;
        }
        let n = n.min(size - pos);
        plan.add_run(pos, n, status == Status::Data, buffer);
        pos += n;
    }
    Ok(plan)
}

/// The progress callback of a copy with its plan: present only when the
/// caller asked for progress.
pub(super) struct Reporter<'a> {
    plan: Option<ConvertPlan>,
    progress: Option<&'a mut dyn FnMut(f32)>,
}

impl<'a> Reporter<'a> {
    /// Reports to `progress`, when given, along the plan of copying `src`
    /// in requests of `buffer` bytes (see [`progress_plan`]; made only
    /// then, as its block status queries cost).
    pub(super) async fn new(
        progress: Option<&'a mut dyn FnMut(f32)>,
        src: &Disk,
        top_only: bool,
        buffer: u64,
    ) -> engine::Result<Reporter<'a>> {
        let plan = match progress {
            Some(_) => Some(progress_plan(src, top_only, buffer).await?),
            None => None,
        };
        Ok(Reporter { plan, progress })
    }

    /// Report the percentages of the plan the copy has passed at `pos`.
    pub(super) fn reached(&mut self, pos: u64) {
        if let (Some(plan), Some(report)) = (self.plan.as_mut(), self.progress.as_mut()) {
            for percent in plan.reached(pos) {
                report(percent);
            }
        }
    }
}
