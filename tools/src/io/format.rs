//! qemu-io's text for numbers, times, data and errors: sizes and rates
//! ([`cvtstr`]), durations ([`timestr`]), `read -v`'s hex dump
//! ([`hexdump`]) and the C library's words for the errno QEMU would
//! return ([`errno_text`]). Pure functions, below everything that prints.

use std::io::Write;
use std::time::Duration;

/// A size as qemu-io prints sizes and rates: three decimals in the largest
/// binary unit the value reaches (six for bytes), cut at a ".000".
pub fn cvtstr(value: f64) -> String {
    const UNITS: [(u32, &str); 6] = [
        (60, "EiB"),
        (50, "PiB"),
        (40, "TiB"),
        (30, "GiB"),
        (20, "MiB"),
        (10, "KiB"),
    ];
    let (mut s, suffix) = UNITS
        .iter()
        .find(|(shift, _)| value >= (1u64 << shift) as f64)
        .map(|&(shift, unit)| (format!("{:.3}", value / (1u64 << shift) as f64), unit))
        .unwrap_or_else(|| (format!("{value:.6}"), "bytes"));
    if let Some(at) = s.find(".000") {
        s.truncate(at);
    }
    format!("{s} {suffix}")
}

/// A duration as qemu-io's report prints it: `SS.ss sec` under a second,
/// `H:MM:SS.ss` from one second on (always with `-C`).
pub fn timestr(t: Duration, verbose: bool) -> String {
    let secs = t.as_secs();
    let frac = f64::from(t.subsec_nanos()) / 1e9;
    if verbose || secs > 0 {
        format!(
            "{}:{:02}:{:05.2}",
            secs / 3600,
            (secs / 60) % 60,
            (secs % 60) as f64 + frac
        )
    } else {
        format!("{frac:05.2} sec")
    }
}

/// `x / t`, infinite for a zero time as in C.
pub(super) fn per_second(x: f64, t: Duration) -> f64 {
    x / t.as_secs_f64()
}

/// Hex dump lines as qemu-io's `read -v` prints them: offset, 16 bytes in
/// hex, then the alphanumeric ones as text.
pub fn hexdump(out: &mut impl Write, offset: u64, data: &[u8]) -> std::io::Result<()> {
    for (i, line) in data.chunks(16).enumerate() {
        write!(out, "{:08x}:  ", offset + 16 * i as u64)?;
        for b in line {
            write!(out, "{b:02x} ")?;
        }
        let text: String = line
            .iter()
            .map(|&b| {
                if b.is_ascii_alphanumeric() {
                    b as char
                } else {
                    '.'
                }
            })
            .collect();
        writeln!(out, " {text}")?;
    }
    Ok(())
}

/// The C library's text for the errno QEMU would return for `error`.
pub fn errno_text(error: &engine::Error) -> &'static str {
    use engine::CompressedWriteError as C;
    match error {
        engine::Error::ReadOnly => "Operation not permitted",
        engine::Error::Compressed(C::DataFile | C::Format) => "Operation not supported",
        engine::Error::Compressed(C::Misaligned { .. }) => "Invalid argument",
        engine::Error::Compressed(C::Allocated { .. }) => "Input/output error",
        engine::Error::Unsupported(_) => "Operation not supported",
        engine::Error::OutOfRange { .. } => "Input/output error",
        _ => "Input/output error",
    }
}
