//! Building a run's world: the backing file on its own quiet disk, the
//! image created on the case's disk, and opening (or reopening) the image
//! with its backing file attached.

use engine::{Backing, CreateOptions, EngineOptions, Image};
use oracle::data::SECTOR_SIZE;

use super::{Failure, Img, Run};
use crate::case::{BackingSpec, DeviceSpec};
use crate::disk::{DiskOptions, FaultOptions, LatencyOptions, SimDisk, SupportOptions, PPM};

/// A disk without faults or crash tracking: for backing files, which the
/// engine only reads.
pub(super) fn quiet_disk() -> DiskOptions {
    let mut o = DiskOptions::default();
    o.crash.track = false;
    o.log.enabled = false;
    o
}

/// The case's device description as the simulated disk's options.
pub(super) fn disk_options(d: &DeviceSpec) -> DiskOptions {
    let us = 1_000u64;
    let lat = |min: u32, max: u32| (min as u64 * us, (min as u64 + max as u64) * us / 2);
    let (read_min, read_mean) = lat(d.latency.read_min, d.latency.read_max);
    let (write_min, write_mean) = lat(d.latency.write_min, d.latency.write_max);
    let (flush_min, flush_mean) = lat(d.latency.flush_min, d.latency.flush_max);
    let f = &d.faults;
    let ppm = |permille: u16| permille as u32 * (PPM / 1000);
    let mut o = DiskOptions {
        sector_size: d.sector_size,
        latency: LatencyOptions {
            read_min,
            read_mean,
            write_min,
            write_mean,
            flush_min,
            flush_mean,
            ..LatencyOptions::ssd()
        },
        support: SupportOptions {
            write_zeroes: d.write_zeroes_supported,
            discard: if d.discard_supported {
                crate::disk::DiscardEffect::Zeroes
            } else {
                crate::disk::DiscardEffect::Nothing
            },
        },
        faults: FaultOptions {
            enabled: true,
            read_error_ppm: ppm(f.read_eio_permille),
            write_error_ppm: ppm(f.write_eio_permille),
            flush_error_ppm: ppm(f.flush_eio_permille),
            capacity: f.capacity,
            lost_write_ppm: ppm(f.lost_writes_permille),
            misdirected_write_ppm: ppm(f.misdirected_writes_permille),
            ..FaultOptions::default()
        },
        ..DiskOptions::default()
    };
    if f.torn_writes {
        o.crash.tear_ppm = PPM / 20;
    }
    o
}

/// The backing file of a run: its disk (never crashed) and its format.
pub(super) struct BackingDisk {
    disk: SimDisk,
    spec: BackingSpec,
}

impl Run<'_> {
    /// Create the backing file and the image, and open the image.
    pub(super) fn setup(&mut self) -> Result<Img, Failure> {
        let case = self.case;
        if let Some(spec) = case.image.backing {
            let data = spec.data();
            let len = data.sectors * SECTOR_SIZE as u64;
            let mut bytes = vec![0u8; len as usize];
            data.fill(&mut bytes, 0);
            let disk = match spec {
                BackingSpec::Raw { .. } => SimDisk::from_bytes(&self.sim, quiet_disk(), &bytes)
                    .expect("quiet disk options are valid"),
                BackingSpec::Qcow2 { cluster_size, .. } => {
                    let disk = SimDisk::new(&self.sim, quiet_disk())
                        .expect("quiet disk options are valid");
                    let d = disk.clone();
                    let co = CreateOptions {
                        size: len,
                        cluster_size,
                        ..Default::default()
                    };
                    let r = self.block(async move {
                        Image::create(&d, &co).await?;
                        let img = Image::open(d, EngineOptions::default()).await?;
                        img.write(0, &bytes).await?;
                        img.close().await.map(|_| ())
                    });
                    r.map_err(|e| Failure::Engine {
                        what: format!("building the qcow2 backing file: {e}"),
                    })?;
                    disk
                }
            };
            if let Some(dir) = self.export_dir() {
                let _ = std::fs::create_dir_all(&dir);
                let _ = std::fs::write(dir.join(spec.file_name()), disk.volatile().to_bytes());
            }
            self.backing = Some(BackingDisk { disk, spec });
        }
        let opts = disk_options(&case.device);
        self.disk = SimDisk::new(&self.sim, opts).map_err(|e| Failure::Engine {
            what: format!("device options: {e}"),
        })?;
        self.disk.set_faults_enabled(false);
        let d = self.disk.clone();
        let co = case.image.create.clone();
        self.block(async move { Image::create(&d, &co).await })
            .map_err(|e| Failure::Engine {
                what: format!("create: {e}"),
            })?;
        let img = self.open_image().map_err(|e| Failure::Engine {
            what: format!("open after create: {e}"),
        })?;
        self.disk.set_faults_enabled(true);
        Ok(img)
    }

    /// Open the image on the current disk and attach the backing file.
    pub(super) fn open_image(&self) -> Result<Img, engine::Error> {
        let d = self.disk.clone();
        let eo = self.case.engine.clone();
        let mut img = self.block(async move { Image::open(d, eo).await })?;
        if let Some(b) = &self.backing {
            let backing = match b.spec {
                BackingSpec::Raw { .. } => Backing::Raw(b.disk.clone()),
                BackingSpec::Qcow2 { .. } => {
                    let d = b.disk.clone();
                    let ro = EngineOptions {
                        read_only: true,
                        ..Default::default()
                    };
                    let bimg = self.block(async move { Image::open(d, ro).await })?;
                    Backing::Qcow2(Box::new(bimg))
                }
            };
            img.attach_backing(backing);
        }
        Ok(img)
    }
}
