//! Building a run's world: the backing file on its own quiet disk, the
//! image created on the case's disk (with its external data file on a
//! second disk of the same options), and opening (or reopening) the image
//! with its data file and backing file attached.

use engine::{Backing, CreateOptions, EngineOptions, Image};

use super::state::{BackingDisk, Failure, Img, Run};
use crate::case::BackingSpec;
use crate::devices::backing_disk;
use crate::disk::{DeviceRole, SimDisk, SparseStore};

impl Run<'_> {
    /// Create the backing file and the image, and open the image.
    pub(super) fn setup(&mut self) -> Result<Img, Failure> {
        let case = self.case;
        if let Some(spec) = case.image.backing {
            let bytes = spec.data().to_bytes();
            let len = bytes.len() as u64;
            let role = DeviceRole::Backing;
            let disk = match spec {
                BackingSpec::Raw { .. } => SimDisk::with_role(
                    &self.sim,
                    backing_disk(case),
                    SparseStore::from_bytes(&bytes),
                    role,
                )
                .expect("the case's disk options were validated"),
                BackingSpec::Qcow2 { cluster_size, .. } => {
                    let disk =
                        SimDisk::with_role(&self.sim, backing_disk(case), SparseStore::new(), role)
                            .expect("the case's disk options were validated");
                    let d = disk.clone();
                    let co = CreateOptions {
                        size: len,
                        cluster_size,
                        ..Default::default()
                    };
                    let r = self.block("building the qcow2 backing file", async move {
                        Image::create(&d, &co).await?;
                        // Built the same way in every version, so that
                        // saved cases replay bit for bit: without growing
                        // the file ahead, which came later.
                        let build = EngineOptions {
                            grow_ahead: 0,
                            ..EngineOptions::default()
                        };
                        let img = Image::open(d, build).await?;
                        img.write(0, &bytes).await?;
                        img.close().await.map(|_| ())
                    })?;
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
        let opts = case.disk.clone();
        self.disk = SimDisk::new(&self.sim, opts).map_err(|e| Failure::Engine {
            what: format!("device options: {e}"),
        })?;
        // Made after the image disk, so that the image disk takes the
        // device index (and so the latency and fault streams) it has in a
        // case without a data file.
        if case.image.data_file.is_some() {
            let data = SimDisk::with_role(
                &self.sim,
                case.disk.clone(),
                SparseStore::new(),
                DeviceRole::DataFile,
            )
            .map_err(|e| Failure::Engine {
                what: format!("device options: {e}"),
            })?;
            self.data = Some(data);
        }
        self.set_faults_enabled(false);
        let created = self.driver.create(
            self.disk.clone(),
            self.data.clone(),
            case.image.create.clone(),
        );
        self.block("create", created)?
            .map_err(|e| Failure::Engine {
                what: format!("create: {e}"),
            })?;
        let img = self
            .open_image("open after create")?
            .map_err(|e| Failure::Engine {
                what: format!("open after create: {e}"),
            })?;
        self.set_faults_enabled(true);
        Ok(img)
    }

    /// Open the image on the current disk, with the current data file's
    /// disk, and attach the backing file. The outer error is a hang of the
    /// executor while doing `what`, the inner one the engine's.
    pub(super) fn open_image(&self, what: &str) -> Result<Result<Img, engine::Error>, Failure> {
        let opened = self.driver.open(
            self.disk.clone(),
            self.data.clone(),
            self.case.engine.clone(),
        );
        match self.block(what, opened)? {
            Ok(img) => self.attach_backing(img, what),
            Err(e) => Ok(Err(e)),
        }
    }

    /// The case's backing file attached to the just opened `img` (a raw
    /// disk, or its qcow2 image opened read-only by the engine).
    pub(super) fn attach_backing(
        &self,
        mut img: Img,
        what: &str,
    ) -> Result<Result<Img, engine::Error>, Failure> {
        if let Some(b) = &self.backing {
            let backing = match b.spec {
                BackingSpec::Raw { .. } => Backing::Raw(b.disk.clone()),
                BackingSpec::Qcow2 { .. } => {
                    let d = b.disk.clone();
                    let ro = EngineOptions {
                        read_only: true,
                        ..Default::default()
                    };
                    let bimg = match self.block(what, async move { Image::open(d, ro).await })? {
                        Ok(bimg) => bimg,
                        Err(e) => return Ok(Err(e)),
                    };
                    Backing::Qcow2(Box::new(bimg))
                }
            };
            if let Err(e) = img.attach_backing(backing) {
                return Ok(Err(e));
            }
        }
        Ok(Ok(img))
    }
}
