//! Changing the backing file the header names (`Image::set_backing_file`),
//! what `qemu-img rebase` does last, and all `qemu-img rebase -u` does.
//! The guest data is the caller's business: a safe rebase first copies
//! into the image every cluster where the old and new backing files
//! differ, and only then switches the header.
//!
//! The change is one write of the header cluster after everything pending
//! is durable, and a flush: a crash leaves the old name or the new one.

use crate::dev::BlockDev;
use crate::error::{Error, Result};
use crate::format::header::{ext, Extension, MAX_BACKING_FILE_NAME};
use crate::format::Header;
use crate::image::Image;

impl<D: BlockDev> Image<D> {
    /// [`Image::set_backing_file`]: the implementation.
    pub(crate) async fn set_backing_file_impl(
        &mut self,
        name: Option<&str>,
        format: Option<&str>,
    ) -> Result<()> {
        self.check_writable()?;
        if let Some(n) = name {
            if n.len() > MAX_BACKING_FILE_NAME as usize {
                return Err(Error::InvalidOption {
                    name: "backing_file".into(),
                    reason: format!("the name is longer than {MAX_BACKING_FILE_NAME} bytes"),
                });
            }
        }
        self.flush_internal(false).await?;
        let mg = self.meta.lock().await;
        let mut h = mg.borrow().header.clone();
        h.backing_file = name.map(str::to_owned);
        let fmt = name.and(format);
        // Every backing format extension goes (QEMU reads the last of
        // several, so keeping any could keep the wrong one); the new one
        // takes the first one's place, or the first place, where QEMU
        // writes it.
        let at = h
            .extensions
            .iter()
            .position(|e| e.kind == ext::BACKING_FORMAT)
            .unwrap_or(0);
        h.extensions.retain(|e| e.kind != ext::BACKING_FORMAT);
        if let Some(f) = fmt {
            h.extensions.insert(
                at.min(h.extensions.len()),
                Extension {
                    kind: ext::BACKING_FORMAT,
                    data: f.as_bytes().to_vec(),
                },
            );
        }
        // Refused before anything is written if it does not fit; parsed
        // back so that the fields placing the name are the ones written.
        let h = Header::parse(&h.serialize()?)?;
        mg.borrow_mut().header = h;
        self.rules(|r| {
            let marks = r.completed();
            r.check_durable(
                marks,
                "rebase: the copied clusters before the backing file switch",
            );
        });
        self.write_header(&mg).await?;
        self.device_flush(&mg).await?;
        drop(mg);
        self.backing = None;
        Ok(())
    }
}
