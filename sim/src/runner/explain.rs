//! Wrong reads described: each wrong sector, where it maps, the device
//! writes that last touched it (before the crash, after one), and the
//! same as data for a report's hex diff.

use super::state::*;

/// Violations reported in full per check (the rest are counted).
pub(super) const VIOLATIONS_SHOWN: usize = 8;

/// Violations, each with where the sector lives on the device now and
/// the last device writes that touched it.
/// The violations in words (the first [`VIOLATIONS_SHOWN`]), and the same
/// sectors as data for a report's hex diff: what came back, each value the
/// model allowed with its bytes, and the device writes that last touched
/// the sector.
pub(super) async fn describe_violations(
    img: &Img,
    disk: &SimDisk,
    before: Option<&SimDisk>,
    vs: &[Violation],
) -> (String, Vec<WrongSector>) {
    let mut text = String::new();
    let mut sectors = Vec::new();
    for v in vs.iter().take(VIOLATIONS_SHOWN) {
        text.push_str(&format!("{v}\n"));
        let mut host_offset = None;
        let mut last_device_writes = Vec::new();
        match img.host_offset(v.sector * SECTOR_SIZE as u64).await {
            Ok(Some(host)) => {
                text.push_str(&format!(
                    "  maps to host offset {host:#x}; last device writes there:\n"
                ));
                for w in disk.writes_touching(host, SECTOR_SIZE as u64, 4) {
                    text.push_str(&format!("    {w}\n"));
                    last_device_writes.push(w.to_string());
                }
                // Each crash reopens the image on a new disk with a new
                // log: after a crash, the writes that made the sector
                // what it is are on the disk as the power went.
                if last_device_writes.is_empty() {
                    if let Some(b) = before {
                        for w in b.writes_touching(host, SECTOR_SIZE as u64, 4) {
                            let w = format!("before the crash: {w}");
                            text.push_str(&format!("    {w}\n"));
                            last_device_writes.push(w);
                        }
                    }
                }
                if last_device_writes.is_empty() {
                    text.push_str(&format!("    {NO_WRITES_LOGGED}\n"));
                }
                host_offset = Some(host);
            }
            Ok(None) => text.push_str("  not mapped to a data cluster now\n"),
            Err(e) => text.push_str(&format!("  mapping unknown: {e}\n")),
        }
        sectors.push(wrong_sector(v, host_offset, last_device_writes));
    }
    if vs.len() > VIOLATIONS_SHOWN {
        text.push_str(&format!(
            "... and {} more sectors\n",
            vs.len() - VIOLATIONS_SHOWN
        ));
    }
    (text, sectors)
}

/// What a wrong sector's description says when neither the disk's log
/// nor, after a crash, the log of the disk as the power went holds a
/// write to it.
pub const NO_WRITES_LOGGED: &str = "none since the epoch began (each crash starts the disk's log \
     anew): the sector was last written in an earlier epoch, or never";

/// One violation as data, each allowed value with the bytes it stands for
/// (also what a `--driver qemu` run reports of a wrong sector).
pub fn wrong_sector(
    v: &Violation,
    host_offset: Option<u64>,
    last_device_writes: Vec<String>,
) -> WrongSector {
    use oracle::data::Content;
    use oracle::model::Value;
    let mut write_ids = Vec::new();
    let allowed = v
        .allowed
        .iter()
        .map(|value| {
            let mut bytes = vec![0u8; SECTOR_SIZE];
            let (write_id, shown) = match *value {
                Value::Zero => (None, true),
                Value::Backing => {
                    oracle::data::fill_backing(&mut bytes, v.sector);
                    (None, true)
                }
                Value::Data(id) => {
                    oracle::data::fill_written(&mut bytes, id, v.sector);
                    write_ids.push(id.0);
                    (Some(id.0), true)
                }
                Value::Garbage | Value::Unspecified => (None, false),
            };
            AllowedValue {
                value: value.to_string(),
                write_id,
                bytes: if shown { to_hex(&bytes) } else { String::new() },
            }
        })
        .collect();
    if let Content::Written { id, .. } = v.observed {
        write_ids.push(id.0);
    }
    write_ids.sort_unstable();
    write_ids.dedup();
    WrongSector {
        sector: v.sector,
        when: v.when.to_string(),
        observed: v.observed.to_string(),
        got: to_hex(&v.got),
        allowed,
        write_ids,
        host_offset,
        last_device_writes,
        driver: None,
    }
}

pub(super) async fn describe_owned(
    img: Rc<Img>,
    disk: SimDisk,
    before: Option<SimDisk>,
    vs: Vec<Violation>,
) -> (String, Vec<WrongSector>) {
    describe_violations(&img, &disk, before.as_ref(), &vs).await
}
