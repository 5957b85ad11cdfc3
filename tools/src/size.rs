//! Sizes in the words qemu-img prints them (`size_to_str`): a leaf that
//! `info`, `snapshot` and the rest use.

/// A size as qemu's `size_to_str`: three significant digits and a binary
/// unit, chosen so that the number stays below 1000.
pub fn human_size(bytes: u64) -> String {
    const UNITS: [&str; 7] = ["B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"];
    let mut unit = 0;
    // Move up a unit once the value reaches 1000 of the current one
    // (0.977 of the next), as qemu does.
    while unit + 1 < UNITS.len() && bytes as f64 >= 1000.0 * (1u64 << (10 * unit)) as f64 {
        unit += 1;
    }
    let v = bytes as f64 / (1u64 << (10 * unit)) as f64;
    // printf's %.3g: three significant digits, trailing zeros dropped.
    let digits = if v > 0.0 {
        (2 - v.log10().floor() as i32).max(0) as usize
    } else {
        0
    };
    let mut s = format!("{v:.digits$}");
    if s.contains('.') {
        s = s.trim_end_matches('0').trim_end_matches('.').to_owned();
    }
    format!("{s} {}", UNITS[unit])
}
