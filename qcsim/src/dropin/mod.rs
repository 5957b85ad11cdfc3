//! The drop-in layer: qcsim standing in for QEMU's `qemu-img` and
//! `qemu-io`, so that scripts written for those tools (QEMU's own
//! qemu-iotests among them) run on qcsim's engine. Reached as `qcsim img
//! ARGS` and `qcsim io ARGS`, or by invoking the binary under the name
//! `qemu-img` or `qemu-io` (a symlink): [`tool_of_argv0`] picks the tool
//! from the program name. The command lines are scanned as those tools scan
//! them (`getopt`), not by clap; the work is `tools`'; this layer owns only
//! the tools' syntax, wording, prefixes and exit codes (`qemu_img`,
//! `qemu_io`). What both tools share (QEMU's words for errors and
//! drivers, file names, cache modes) is `shared`; what the `qemu-img`
//! subcommands share is `img_common`; neither imports from this module or
//! from the dispatcher `qemu_img`.

mod blockopts;
pub mod getopt;
mod img_common;
pub mod qemu_img;
mod qemu_img_amend;
mod qemu_img_dd;
mod qemu_img_edit;
mod qemu_img_measure;
mod qemu_img_snapshot;
pub mod qemu_io;
mod shared;

use std::path::Path;

/// Which QEMU tool the binary stands in for, from its invoked name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Tool {
    Img,
    Io,
}

/// The tool `argv0` names (its file name `qemu-img` or `qemu-io`), if any.
pub fn tool_of_argv0(argv0: &str) -> Option<Tool> {
    let name = Path::new(argv0).file_name()?.to_str()?;
    match name {
        "qemu-img" => Some(Tool::Img),
        "qemu-io" => Some(Tool::Io),
        _ => None,
    }
}

/// Run `tool` on `args` (the words after the program name, or after `qcsim
/// img`/`qcsim io`); returns the exit code.
pub fn run(tool: Tool, args: &[String]) -> i32 {
    match tool {
        Tool::Img => qemu_img::main("qemu-img", args),
        Tool::Io => qemu_io::main("qemu-io", args),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_program_name_picks_the_tool() {
        assert_eq!(tool_of_argv0("/usr/local/bin/qemu-img"), Some(Tool::Img));
        assert_eq!(tool_of_argv0("qemu-io"), Some(Tool::Io));
        assert_eq!(tool_of_argv0("./target/release/qcsim"), None);
        assert_eq!(tool_of_argv0("qemu-img-old"), None);
    }
}
