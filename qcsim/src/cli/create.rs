//! `qcsim create`: make a new image file as `qemu-img create` does, with its
//! option names (`-o cluster_size=...,refcount_bits=...,compat=...`), its
//! backing-file rules (`-b` needs `-F`; without a size the image takes the
//! backing file's virtual size) and its "Formatting ..." line.

use std::path::{Path, PathBuf};

use anyhow::{bail, Context};
use engine::dev::{BlockDev, FileOptions};
use engine::{CreateOptions, Image};
use tools::create::{check_create_options, prepare, Wanted};
use tools::files::{
    file_id_of_path, open_image_with_files, probe_path, resolve_backing_path,
    resolve_data_file_path, same_file, Format, OpenOptions, Probed,
};

use tools::qemu_args::{check_image_size, option_help, parse_size, wants_help, ImageOpts};

#[derive(clap::Args)]
pub struct Args {
    /// Image format: qcow2 (the default here) or raw.
    #[arg(
        short = 'f',
        long = "format",
        value_name = "FMT",
        default_value = "qcow2"
    )]
    pub format: String,
    /// Image options as key=value,... (qemu-img names; `-o help` lists them).
    #[arg(short = 'o', value_name = "OPTIONS")]
    pub options: Vec<String>,
    /// Backing file, stored as given (relative names are relative to FILE).
    #[arg(short = 'b', long = "backing", value_name = "BACKING")]
    pub backing: Option<String>,
    /// Format of the backing file (raw or qcow2); required with -b.
    #[arg(short = 'F', long = "backing-format", value_name = "FMT")]
    pub backing_format: Option<String>,
    /// Do not open the backing file (then SIZE is required).
    #[arg(short = 'u')]
    pub unsafe_backing: bool,
    /// Quiet: do not print the "Formatting" line.
    #[arg(short = 'q')]
    pub quiet: bool,
    /// Image file to create (an existing file is overwritten). Optional
    /// only for `-o help`.
    pub file: Option<PathBuf>,
    /// Virtual size, with an optional k, M, G, T suffix.
    pub size: Option<String>,
}

pub fn run(args: Args) -> anyhow::Result<i32> {
    if args.options.iter().any(|o| wants_help(o)) {
        print!("{}", option_help());
        return Ok(0);
    }
    let Some(file) = args.file.clone() else {
        bail!("expecting an image file name (qcsim create [OPTIONS] FILE [SIZE])");
    };
    let format: Format = args.format.parse()?;
    let mut opts = ImageOpts::default();
    for list in &args.options {
        opts.apply_list(list)
            .with_context(|| format!("{}", file.display()))?;
    }
    if let Some(s) = &args.size {
        opts.size = Some(parse_size(s).context("invalid image size")?);
    }
    if let Some(b) = &args.backing {
        opts.backing_file = Some(b.clone());
    }
    if let Some(f) = &args.backing_format {
        opts.backing_fmt = Some(f.clone());
    }
    match format {
        Format::Raw => create_raw(&args, &file, &opts),
        Format::Qcow2 => create_qcow2(&args, &file, opts),
    }
}

fn create_raw(args: &Args, file: &Path, opts: &ImageOpts) -> anyhow::Result<i32> {
    let only_size = ImageOpts {
        size: opts.size,
        ..ImageOpts::default()
    };
    if *opts != only_size {
        bail!(
            "{}: raw images take no options but size (no backing file either)",
            file.display()
        );
    }
    let Some(size) = opts.size else {
        bail!("image creation needs a size parameter");
    };
    check_image_size(size).with_context(|| format!("{}", file.display()))?;
    // Opened, locked and shown to take the size before it is emptied.
    let wanted = [Wanted {
        path: file,
        length: Some(size),
    }];
    let dev = futures::executor::block_on(prepare(&wanted, &FileOptions::default()))?.remove(0);
    if !args.quiet {
        println!("Formatting '{}', fmt=raw size={size}", file.display());
    }
    futures::executor::block_on(async {
        dev.truncate(0).await?;
        dev.truncate(size).await?;
        dev.flush().await
    })
    .with_context(|| format!("{}", file.display()))?;
    Ok(0)
}

fn create_qcow2(args: &Args, file: &Path, mut opts: ImageOpts) -> anyhow::Result<i32> {
    let mut backing_path = None;
    // Every file the backing chain reads (when it is opened), which no
    // file this create writes may be.
    let mut chain_files = Vec::new();
    if let Some(name) = opts.backing_file.clone() {
        let path = resolve_backing_path(file, &name);
        let Some(fmt) = opts.backing_fmt.clone() else {
            bail!("{}", missing_backing_format(file, &path));
        };
        let fmt: Format = fmt.parse()?;
        // By device and inode: a hard link to the backing file is the
        // backing file, and creating the image would empty it.
        if same_file(file, &path) {
            bail!(
                "{}: trying to create an image over its own backing file: {} is the same file",
                file.display(),
                path.display()
            );
        }
        if !args.unsafe_backing {
            let open = OpenOptions {
                format: Some(fmt),
                read_only: true,
                ..OpenOptions::default()
            };
            let (backing_size, files) = futures::executor::block_on(async {
                let (disk, files) = open_image_with_files(&path, &open).await?;
                let size = disk.virtual_size();
                disk.close().await?;
                anyhow::Ok((size, files))
            })
            .with_context(|| format!("{}: could not open backing image", file.display()))?;
            opts.size.get_or_insert(backing_size);
            chain_files = files;
        }
        backing_path = Some(path);
    }
    let Some(size) = opts.size else {
        bail!("image creation needs a size parameter");
    };
    let named = || format!("{}", file.display());
    check_image_size(size).with_context(named)?;
    let create = opts.to_create_options(size).with_context(named)?;
    // Everything the engine would refuse, refused before any file is
    // touched (the engine's create empties its files first thing).
    futures::executor::block_on(check_create_options(&create)).with_context(named)?;
    // The data file is created (emptied) as qemu-img does, and a relative
    // name is taken from the working directory, as QEMU opens it.
    let data_path = create.data_file.as_deref().map(resolve_data_file_path);
    if let Some(path) = &data_path {
        if same_file(file, path) {
            bail!(
                "{}: the data file cannot be the image file itself",
                file.display()
            );
        }
        if let Some(backing) = backing_path.as_ref().filter(|b| same_file(path, b)) {
            bail!(
                "{}: the data file {} is the same file as the backing file {}: creating it would empty the backing file",
                file.display(),
                path.display(),
                backing.display()
            );
        }
    }
    for path in std::iter::once(file).chain(data_path.as_deref()) {
        let Ok(id) = file_id_of_path(path) else {
            continue;
        };
        if let Some(f) = chain_files.iter().find(|f| f.id == id) {
            bail!(
                "{}: {} is the same file as {}, which the backing chain reads: creating it would destroy it",
                file.display(),
                path.display(),
                f.first
            );
        }
    }
    // Both files opened and locked, and the data file shown to take the
    // disk's size, before either is emptied: a lock held by another
    // process on the image must not cost the data file its contents.
    let mut wanted = vec![Wanted {
        path: file,
        length: None,
    }];
    if let Some(path) = &data_path {
        wanted.push(Wanted {
            path,
            length: Some(size),
        });
    }
    let mut devs =
        futures::executor::block_on(prepare(&wanted, &FileOptions::default()))?.into_iter();
    let dev = devs.next().expect("the image file was prepared");
    let data = devs.next();
    if !args.quiet {
        println!(
            "{}",
            formatting_line(
                file,
                &create,
                opts.compat_name.as_deref(),
                opts.data_file_raw
            )
        );
    }
    futures::executor::block_on(async {
        Image::create_with_data(&dev, data.as_ref(), &create).await?;
        dev.flush().await?;
        anyhow::Ok(())
    })
    .with_context(named)?;
    Ok(0)
}

/// qemu-img refuses `-b` without `-F`; say what the file looks like, so the
/// fix is one copy away.
fn missing_backing_format(file: &Path, backing: &Path) -> String {
    let hint = match probe_path(backing) {
        Ok(Probed::Format(f)) => format!(" (detected format of {}: add -F {f})", backing.display()),
        Ok(Probed::Foreign(name)) => format!(" ({} looks like {name})", backing.display()),
        Err(_) => String::new(),
    };
    format!(
        "{}: backing file specified without backing format{hint}",
        file.display()
    )
}

/// The line qemu-img prints before creating a qcow2 image, in its order.
/// `compat_name` is the `compat` option as given, if it was, and
/// `data_file_raw` likewise.
fn formatting_line(
    file: &Path,
    c: &CreateOptions,
    compat_name: Option<&str>,
    data_file_raw: Option<bool>,
) -> String {
    let onoff = |b: bool| if b { "on" } else { "off" };
    let mut s = format!(
        "Formatting '{}', fmt=qcow2 cluster_size={} extended_l2={} compression_type={} size={}",
        file.display(),
        c.cluster_size,
        onoff(c.extended_l2),
        c.compression_type.name(),
        c.size
    );
    if let Some(b) = &c.backing_file {
        s.push_str(&format!(" backing_file={b}"));
    }
    if let Some(f) = &c.backing_format {
        s.push_str(&format!(" backing_fmt={f}"));
    }
    if let Some(name) = compat_name {
        s.push_str(&format!(" compat={name}"));
    }
    if let Some(d) = &c.data_file {
        s.push_str(&format!(" data_file={d}"));
    }
    if let Some(raw) = data_file_raw {
        s.push_str(&format!(" data_file_raw={}", onoff(raw)));
    }
    s.push_str(&format!(
        " lazy_refcounts={} refcount_bits={}",
        onoff(c.lazy_refcounts),
        c.refcount_bits
    ));
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use engine::Compat;

    #[test]
    fn formatting_line_matches_qemu_img_order() {
        let c = CreateOptions {
            size: 1 << 20,
            backing_file: Some("base.raw".into()),
            backing_format: Some("raw".into()),
            ..CreateOptions::default()
        };
        assert_eq!(
            formatting_line(Path::new("top.qcow2"), &c, None, None),
            "Formatting 'top.qcow2', fmt=qcow2 cluster_size=65536 extended_l2=off \
             compression_type=zlib size=1048576 backing_file=base.raw backing_fmt=raw \
             lazy_refcounts=off refcount_bits=16"
        );
        let c = CreateOptions {
            size: 1 << 30,
            compat: Compat::V2,
            ..CreateOptions::default()
        };
        assert_eq!(
            formatting_line(Path::new("v2.qcow2"), &c, Some("0.10"), None),
            "Formatting 'v2.qcow2', fmt=qcow2 cluster_size=65536 extended_l2=off \
             compression_type=zlib size=1073741824 compat=0.10 lazy_refcounts=off \
             refcount_bits=16"
        );
    }
}
