//! The public face of an opened qcow2 image. (Skeleton: the API is fixed,
//! the implementation is being written.)

use crate::counters::Counters;
use crate::dev::BlockDev;
use crate::error::{Error, Result};
use crate::options::EngineOptions;

/// qcow2 version: 2 (compat 0.10) or 3 (compat 1.1).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum Compat {
    #[serde(rename = "0.10")]
    V2,
    #[serde(rename = "1.1")]
    V3,
}

/// What `create` formats a device with; names follow qemu-img's `-o` options.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct CreateOptions {
    /// Virtual disk size in bytes.
    pub size: u64,
    /// Power of two from 512 to 2 MiB.
    pub cluster_size: u64,
    /// Power of two from 1 to 64 (v2 images only 16).
    pub refcount_bits: u32,
    pub compat: Compat,
    pub lazy_refcounts: bool,
    pub extended_l2: bool,
    /// Backing file name as stored in the header.
    pub backing_file: Option<String>,
    /// Backing format ("qcow2" or "raw") stored in the header extension.
    pub backing_format: Option<String>,
}

impl Default for CreateOptions {
    fn default() -> Self {
        CreateOptions {
            size: 0,
            cluster_size: 65536,
            refcount_bits: 16,
            compat: Compat::V3,
            lazy_refcounts: false,
            extended_l2: false,
            backing_file: None,
            backing_format: None,
        }
    }
}

/// The backing file of an image: raw, or a qcow2 image with its own chain.
pub enum Backing<D: BlockDev> {
    Raw(D),
    Qcow2(Box<Image<D>>),
}

/// An opened qcow2 image.
pub struct Image<D: BlockDev> {
    dev: D,
    _backing: Option<Backing<D>>,
    _opts: EngineOptions,
}

impl<D: BlockDev> Image<D> {
    /// Format `dev` as an empty qcow2 image.
    pub async fn create(_dev: &D, _opts: &CreateOptions) -> Result<()> {
        Err(Error::Unsupported("create: not implemented yet".into()))
    }

    /// Open the image on `dev`. The backing file, if the header names one,
    /// is attached afterwards with [`Image::attach_backing`].
    pub async fn open(_dev: D, _opts: EngineOptions) -> Result<Self> {
        Err(Error::Unsupported("open: not implemented yet".into()))
    }

    /// The backing file name and format the header names.
    pub fn backing_spec(&self) -> Option<(String, Option<String>)> {
        None
    }

    pub fn attach_backing(&mut self, backing: Backing<D>) {
        self._backing = Some(backing);
    }

    pub fn virtual_size(&self) -> u64 {
        0
    }

    pub fn cluster_size(&self) -> u64 {
        0
    }

    pub async fn read(&self, _offset: u64, _buf: &mut [u8]) -> Result<()> {
        Err(Error::Unsupported("read: not implemented yet".into()))
    }

    pub async fn write(&self, _offset: u64, _buf: &[u8]) -> Result<()> {
        Err(Error::Unsupported("write: not implemented yet".into()))
    }

    /// Make the range read as zeroes; with `unmap`, deallocate whole
    /// clusters where the format allows.
    pub async fn write_zeroes(&self, _offset: u64, _len: u64, _unmap: bool) -> Result<()> {
        Err(Error::Unsupported(
            "write_zeroes: not implemented yet".into(),
        ))
    }

    pub async fn discard(&self, _offset: u64, _len: u64) -> Result<()> {
        Err(Error::Unsupported("discard: not implemented yet".into()))
    }

    /// Make every guest write that completed before this call durable.
    pub async fn flush(&self) -> Result<()> {
        Err(Error::Unsupported("flush: not implemented yet".into()))
    }

    /// Clean close: flush everything, clear the dirty bit, give the device back.
    pub async fn close(self) -> Result<D> {
        Ok(self.dev)
    }

    /// Drop the image without writing anything (what a crash leaves).
    pub fn into_device(self) -> D {
        self.dev
    }

    pub fn device(&self) -> &D {
        &self.dev
    }

    pub fn counters(&self) -> Counters {
        Counters::default()
    }
}
