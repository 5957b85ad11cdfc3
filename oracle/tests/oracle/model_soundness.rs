//! The model against a concrete device that obeys the rules: random
//! executions in which every write lands sector by sector at some moment
//! while in flight, reads sample each sector at some moment while in
//! flight, flushes make durable what completed before they were issued, and
//! crashes keep, per sector, the durable value or any value put there since.
//! Whatever such a device shows, the model must allow (no false alarms);
//! and a sector holding data no write ever put there must be reported.

use oracle::data::{fill_backing, fill_written, BackingData, BackingPattern, WriteId, SECTOR_SIZE};
use oracle::model::{Model, OpId, SectorRange, Status, Value, When, WriteKind};
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use std::collections::BTreeSet;

const DISK: u64 = 16;

struct Write {
    op: OpId,
    kind: WriteKind,
    unapplied: Vec<u64>,
    fails: bool,
}

struct Read {
    op: OpId,
    range: SectorRange,
    seen: Vec<Option<Value>>,
}

struct Device {
    rng: ChaCha8Rng,
    backing: Option<BackingData>,
    cur: Vec<Value>,
    durable: Vec<Value>,
    /// Per sector, the values applied since its durable value, in order,
    /// with the write that applied each.
    applied: Vec<Vec<(Value, OpId)>>,
    completed: BTreeSet<OpId>,
    writes: Vec<Write>,
    reads: Vec<Read>,
    /// Flushes in flight, with the writes done when each was issued.
    flushes: Vec<(OpId, BTreeSet<OpId>)>,
    next: u64,
}

impl Device {
    fn unwritten(&self, s: u64) -> Value {
        match self.backing {
            Some(b) if b.has_data(s) => Value::Backing,
            _ => Value::Zero,
        }
    }

    fn id(&mut self) -> u64 {
        self.next += 1;
        self.next
    }

    fn bytes(&self, first: u64, values: &[Value]) -> Vec<u8> {
        let mut buf = vec![0u8; values.len() * SECTOR_SIZE];
        for (i, (v, chunk)) in values
            .iter()
            .zip(buf.chunks_exact_mut(SECTOR_SIZE))
            .enumerate()
        {
            let s = first + i as u64;
            match v {
                Value::Zero => {}
                Value::Backing => fill_backing(chunk, s),
                Value::Data(id) => fill_written(chunk, *id, s),
                Value::Garbage | Value::Unspecified => {
                    unreachable!("the device never makes garbage; discards are advisory")
                }
            }
        }
        buf
    }

    fn apply(&mut self, w: usize) {
        let i = self.rng.gen_range(0..self.writes[w].unapplied.len());
        let s = self.writes[w].unapplied.swap_remove(i);
        let v = match self.writes[w].kind {
            WriteKind::Data(id) => Value::Data(id),
            WriteKind::Zero => Value::Zero,
            WriteKind::Discard => {
                let old = self.cur[s as usize];
                *[old, Value::Zero, self.unwritten(s)]
                    .choose(&mut self.rng)
                    .unwrap()
            }
        };
        self.cur[s as usize] = v;
        self.applied[s as usize].push((v, self.writes[w].op));
    }
}

fn run(seed: u64) -> (u64, u64) {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let backing = rng.gen_bool(0.5).then(|| BackingData {
        sectors: rng.gen_range(1..=DISK),
        pattern: BackingPattern::Stripes { data: 3, hole: 2 },
    });
    let mut d = Device {
        rng: ChaCha8Rng::seed_from_u64(seed ^ 0xdead),
        backing,
        cur: Vec::new(),
        durable: Vec::new(),
        applied: vec![Vec::new(); DISK as usize],
        completed: BTreeSet::new(),
        writes: Vec::new(),
        reads: Vec::new(),
        flushes: Vec::new(),
        next: 0,
    };
    d.cur = (0..DISK).map(|s| d.unwritten(s)).collect();
    d.durable = d.cur.clone();
    let mut m = Model::new(DISK, backing);
    let (mut caught, mut checks) = (0, 0);
    for _ in 0..300 {
        match rng.gen_range(0..100) {
            0..20 if d.writes.len() < 4 => {
                let start = rng.gen_range(0..DISK);
                let range = SectorRange::new(start, rng.gen_range(1..=(DISK - start).min(4)));
                let op = OpId(d.id());
                let kind = match rng.gen_range(0..10) {
                    0 => WriteKind::Zero,
                    1 => WriteKind::Discard,
                    _ => WriteKind::Data(WriteId(d.id())),
                };
                m.write_issued(op, range, kind);
                d.writes.push(Write {
                    op,
                    kind,
                    unapplied: range.sectors().collect(),
                    fails: rng.gen_bool(0.1),
                });
            }
            20..45 if !d.writes.is_empty() => {
                let w = rng.gen_range(0..d.writes.len());
                let done = d.writes[w].unapplied.is_empty();
                if d.writes[w].fails && rng.gen_bool(0.3) || done {
                    let w = d.writes.swap_remove(w);
                    let status = if w.fails { Status::Failed } else { Status::Ok };
                    m.write_completed(w.op, status);
                    d.completed.insert(w.op);
                } else if !done {
                    d.apply(w);
                }
            }
            45..55 => {
                let op = OpId(d.id());
                m.flush_issued(op);
                d.flushes.push((op, d.completed.clone()));
            }
            55..62 if !d.flushes.is_empty() => {
                let (op, done) = d.flushes.swap_remove(rng.gen_range(0..d.flushes.len()));
                let ok = rng.gen_bool(0.9);
                m.flush_completed(op, if ok { Status::Ok } else { Status::Failed });
                if ok {
                    for s in 0..DISK as usize {
                        if let Some(i) = d.applied[s].iter().rposition(|(_, w)| done.contains(w)) {
                            d.durable[s] = d.applied[s][i].0;
                            d.applied[s].drain(..=i);
                        }
                    }
                }
            }
            62..72 if d.reads.len() < 3 => {
                let start = rng.gen_range(0..DISK);
                let range = SectorRange::new(start, rng.gen_range(1..=(DISK - start).min(4)));
                let op = OpId(d.id());
                m.read_issued(op, range);
                d.reads.push(Read {
                    op,
                    range,
                    seen: vec![None; range.len as usize],
                });
            }
            72..96 if !d.reads.is_empty() => {
                let r = rng.gen_range(0..d.reads.len());
                let unseen: Vec<usize> = (0..d.reads[r].seen.len())
                    .filter(|i| d.reads[r].seen[*i].is_none())
                    .collect();
                if let Some(&i) = unseen.choose(&mut rng) {
                    let s = d.reads[r].range.start + i as u64;
                    d.reads[r].seen[i] = Some(d.cur[s as usize]);
                    continue;
                }
                let r = d.reads.swap_remove(r);
                let mut values: Vec<Value> = r.seen.iter().map(|v| v.unwrap()).collect();
                let planted = rng.gen_bool(0.2).then(|| {
                    let i = rng.gen_range(0..values.len());
                    values[i] = Value::Data(WriteId(u64::MAX - d.id()));
                    r.range.start + i as u64
                });
                let result = m.read_completed(r.op, &d.bytes(r.range.start, &values));
                checks += 1;
                match planted {
                    None => result
                        .unwrap_or_else(|v| panic!("seed {seed}: false alarm on a read: {}", v[0])),
                    Some(s) => {
                        let v = result.expect_err("planted data must be reported");
                        assert_eq!(v.len(), 1);
                        assert_eq!((v[0].sector, v[0].when), (s, When::Read { op: r.op }));
                        caught += 1;
                    }
                }
            }
            96..100 => {
                m.crash();
                d.writes.clear();
                d.reads.clear();
                d.flushes.clear();
                let mut image: Vec<Value> = (0..DISK as usize)
                    .map(|s| {
                        let mut options = vec![d.durable[s]];
                        options.extend(d.applied[s].iter().map(|(v, _)| *v));
                        *options.choose(&mut rng).unwrap()
                    })
                    .collect();
                let planted = rng.gen_bool(0.3).then(|| {
                    let s = rng.gen_range(0..DISK);
                    image[s as usize] = Value::Data(WriteId(u64::MAX - d.id()));
                    s
                });
                let result = m.after_crash_check(&d.bytes(0, &image));
                checks += 1;
                match planted {
                    None => result.unwrap_or_else(|v| {
                        panic!("seed {seed}: false alarm after a crash: {}", v[0])
                    }),
                    Some(s) => {
                        let v = result.expect_err("planted data must be reported");
                        assert_eq!(v.len(), 1);
                        assert_eq!(v[0].sector, s);
                        caught += 1;
                    }
                }
                d.cur = image.clone();
                d.durable = image;
                d.applied = vec![Vec::new(); DISK as usize];
                d.completed.clear();
            }
            _ => {}
        }
    }
    (checks, caught)
}

#[test]
fn the_model_allows_every_legal_execution_and_catches_planted_data() {
    let (mut checks, mut caught) = (0, 0);
    for seed in 0..300 {
        let (c, k) = run(seed);
        checks += c;
        caught += k;
    }
    assert!(checks > 5000, "only {checks} checks");
    assert!(caught > 500, "only {caught} planted values caught");
}
