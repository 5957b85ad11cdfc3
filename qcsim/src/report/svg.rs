//! Inline SVG charts for `report.html`: horizontal bars and lines, sized
//! by their data, with no script and no external resource, so the page is
//! one file that any browser shows.

use std::fmt::Write as _;

/// XML text: `&`, `<`, `>` and quotes escaped.
pub fn esc(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

const BAR_H: usize = 16;
const LABEL_W: usize = 190;
const PLOT_W: usize = 420;

/// A horizontal bar chart: one bar per `(label, value)`, the value written
/// after the bar. Bars scale to the largest value.
pub fn bars(title: &str, rows: &[(String, f64)]) -> String {
    let max = rows.iter().map(|r| r.1).fold(0.0_f64, f64::max);
    let h = 28 + rows.len() * (BAR_H + 4) + 8;
    let w = LABEL_W + PLOT_W + 90;
    let mut s = String::new();
    let _ = write!(
        s,
        r#"<svg class="chart" xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" viewBox="0 0 {w} {h}" role="img" aria-label="{t}"><title>{t}</title><text x="4" y="16" class="title">{t}</text>"#,
        t = esc(title)
    );
    for (i, (label, v)) in rows.iter().enumerate() {
        let y = 28 + i * (BAR_H + 4);
        let len = if max > 0.0 {
            (v / max * PLOT_W as f64).round()
        } else {
            0.0
        };
        let _ = write!(
            s,
            r#"<text x="{lx}" y="{ty}" text-anchor="end">{l}</text><rect x="{bx}" y="{y}" width="{len}" height="{BAR_H}" class="bar"/><text x="{vx}" y="{ty}">{v}</text>"#,
            lx = LABEL_W - 6,
            ty = y + BAR_H - 4,
            l = esc(label),
            bx = LABEL_W,
            vx = LABEL_W as f64 + len + 4.0,
            v = fmt_num(*v),
        );
    }
    s.push_str("</svg>");
    s
}

/// A line chart of `(x, y)` series (x ascending), with axes labelled at
/// their ends.
pub fn lines(
    title: &str,
    x_label: &str,
    y_label: &str,
    series: &[(String, Vec<(f64, f64)>)],
) -> String {
    let (w, h, left, bottom, top) = (640.0, 260.0, 60.0, 36.0, 28.0);
    let pts = series.iter().flat_map(|s| s.1.iter());
    let xmax = pts.clone().map(|p| p.0).fold(0.0_f64, f64::max).max(1e-9);
    let ymax = pts.map(|p| p.1).fold(0.0_f64, f64::max).max(1e-9);
    let pw = w - left - 16.0;
    let ph = h - top - bottom;
    let mut s = String::new();
    let _ = write!(
        s,
        r#"<svg class="chart" xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" viewBox="0 0 {w} {h}" role="img" aria-label="{t}"><title>{t}</title><text x="4" y="16" class="title">{t}</text>"#,
        t = esc(title)
    );
    let _ = write!(
        s,
        r#"<line x1="{left}" y1="{top}" x2="{left}" y2="{yb}" class="axis"/><line x1="{left}" y1="{yb}" x2="{xr}" y2="{yb}" class="axis"/><text x="{left}" y="{ly}" text-anchor="start">0</text><text x="{xr}" y="{ly}" text-anchor="end">{xm} {xl}</text><text x="{tx}" y="{ty}" text-anchor="end">{ym}</text><text x="{tx}" y="{yb}" text-anchor="end">0</text><text x="{left}" y="{yt}" text-anchor="start" class="unit">{yl}</text>"#,
        yb = top + ph,
        xr = left + pw,
        ly = top + ph + 16.0,
        xm = fmt_num(xmax),
        xl = esc(x_label),
        tx = left - 4.0,
        ty = top + 10.0,
        ym = fmt_num(ymax),
        yt = top - 2.0,
        yl = esc(y_label),
    );
    for (i, (name, points)) in series.iter().enumerate() {
        let path: Vec<String> = points
            .iter()
            .map(|&(x, y)| {
                format!(
                    "{:.1},{:.1}",
                    left + x / xmax * pw,
                    top + ph - y / ymax * ph
                )
            })
            .collect();
        let _ = write!(
            s,
            r#"<polyline points="{}" class="line s{}"><title>{}</title></polyline>"#,
            path.join(" "),
            i % 6,
            esc(name)
        );
    }
    s.push_str("</svg>");
    s
}

/// A count as an integer, anything else to three significant places.
pub fn fmt_num(v: f64) -> String {
    if v.fract() == 0.0 && v.abs() < 1e15 {
        format!("{}", v as i64)
    } else if v.abs() >= 100.0 {
        format!("{v:.0}")
    } else if v.abs() >= 1.0 {
        format!("{v:.2}")
    } else {
        format!("{v:.3}")
    }
}
