//! What a run knows of the internal snapshots its workload takes, applies
//! and deletes: each snapshot's name, the guest disk's content when it was
//! taken (as the model's values, sector by sector), and whether it must,
//! may or must not exist.
//!
//! A snapshot operation is durable when it returns successfully (the
//! engine flushes its header switch), so a crash keeps every snapshot
//! whose create returned and loses every one whose delete returned. One
//! cut short by the crash, or that failed, may have happened or not: the
//! reopened image's table decides, and from then on the run knows.

use oracle::model::Value;

/// Whether a known snapshot is in the image's table.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Presence {
    /// Its create returned: it is there until deleted.
    Exists,
    /// Its create or delete failed or was cut short: either.
    Maybe,
    /// Its delete returned: it is gone for good.
    Deleted,
}

/// One snapshot the run took.
#[derive(Debug, Clone)]
pub struct Known {
    /// Its name in the image's snapshot table.
    pub name: String,
    /// The guest disk's content when it was taken, where it differs from
    /// what an unwritten sector reads, in ascending sector order.
    pub values: Vec<(u64, Value)>,
    /// The guest disk's size when it was taken, in sectors: an apply
    /// gives the disk this size back.
    pub sectors: u64,
    pub presence: Presence,
}

/// The run's snapshots, in the order they were taken.
#[derive(Debug, Default)]
pub struct Snapshots {
    list: Vec<Known>,
}

impl Snapshots {
    /// The name the snapshot taken by operation `n` gets: unique in a run,
    /// and never all digits, so that it is never read as an id.
    pub fn name_of(n: u64) -> String {
        format!("op{n}")
    }

    /// A snapshot about to be taken of a disk of `sectors` sectors: it
    /// may exist from now on.
    pub fn taking(&mut self, name: String, values: Vec<(u64, Value)>, sectors: u64) -> usize {
        self.list.push(Known {
            name,
            values,
            sectors,
            presence: Presence::Maybe,
        });
        self.list.len() - 1
    }

    /// The `pick`-th (modulo their number) of the snapshots that surely
    /// exist, if any does.
    pub fn pick(&self, pick: u32) -> Option<usize> {
        let sure = || (0..self.list.len()).filter(|&i| self.list[i].presence == Presence::Exists);
        let n = sure().count();
        (n > 0).then(|| sure().nth(pick as usize % n)).flatten()
    }

    /// Whether the run took none.
    pub fn is_empty(&self) -> bool {
        self.list.is_empty()
    }

    /// The `i`-th snapshot taken.
    pub fn get(&self, i: usize) -> &Known {
        &self.list[i]
    }

    /// What is now known of the `i`-th snapshot's presence.
    pub fn set(&mut self, i: usize, presence: Presence) {
        let k = &mut self.list[i];
        k.presence = presence;
        if presence == Presence::Deleted {
            // Only its name is needed now, to see that it stays gone.
            k.values = Vec::new();
        }
    }

    /// Holds the snapshots the image lists (`found`, by name) against what
    /// the run knows: every snapshot that surely exists must be there,
    /// none that is surely gone, and none the run never took. With
    /// `reopened` (the image was just opened from its disk, after a
    /// crash) those that may exist are settled by what was found; a
    /// running image may list one whose failed operation left it in
    /// memory only, which the next crash may still lose. Returns what is
    /// wrong.
    pub fn settle(&mut self, found: &[String], reopened: bool) -> Result<(), String> {
        let mut wrong = Vec::new();
        for (i, name) in found.iter().enumerate() {
            if !self.list.iter().any(|k| &k.name == name) {
                wrong.push(format!(
                    "the image lists snapshot {name:?}, which the run never took"
                ));
            } else if found[..i].contains(name) {
                wrong.push(format!("the image lists snapshot {name:?} twice"));
            }
        }
        for k in &mut self.list {
            let there = found.contains(&k.name);
            match (k.presence, there) {
                (Presence::Exists, false) => wrong.push(format!(
                    "snapshot {:?} was taken (its create returned) but the image does not list it",
                    k.name
                )),
                (Presence::Deleted, true) => wrong.push(format!(
                    "snapshot {:?} was deleted (its delete returned) but the image lists it",
                    k.name
                )),
                (Presence::Maybe, true) if reopened => k.presence = Presence::Exists,
                (Presence::Maybe, false) if reopened => k.presence = Presence::Deleted,
                _ => {}
            }
        }
        if wrong.is_empty() {
            Ok(())
        } else {
            Err(wrong.join("; "))
        }
    }
}
