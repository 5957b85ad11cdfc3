//! Writing a report's files so that a failed command destroys none: each
//! is written to a temporary file beside its target and renamed over it
//! only once every one is complete.

use std::path::{Path, PathBuf};

use anyhow::Context;

/// Write every `(name, contents)` into `dir`: all temporary files first,
/// then the renames, so an error while writing leaves the old files whole.
pub fn write_all(dir: &Path, files: &[(&str, String)]) -> anyhow::Result<()> {
    let mut staged: Vec<(PathBuf, PathBuf)> = Vec::new();
    let result = (|| {
        for (name, contents) in files {
            let target = dir.join(name);
            let tmp = dir.join(format!(".{name}.tmp-{}", std::process::id()));
            staged.push((tmp.clone(), target.clone()));
            std::fs::write(&tmp, contents)
                .with_context(|| format!("writing the report file {}", target.display()))?;
        }
        Ok(())
    })();
    if let Err(e) = result {
        for (tmp, _) in &staged {
            let _ = std::fs::remove_file(tmp);
        }
        return Err(e);
    }
    for (tmp, target) in &staged {
        std::fs::rename(tmp, target)
            .with_context(|| format!("replacing the report file {}", target.display()))?;
    }
    Ok(())
}
