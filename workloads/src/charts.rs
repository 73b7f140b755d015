//! The load generator's charts, as SVG documents: latency by percentile
//! (one line per run) and the latency timeline of one run (p50, p99 and
//! max per interval, with every checkpoint drawn as a band from its trigger
//! to its end, and failures as markers with their recovery).
//!
//! Both have a log-scale latency axis (a tail of 12 ms beside a median of
//! 40 µs would leave the body of a linear plot at zero), a title and a
//! subtitle (what ran), and use the Okabe–Ito palette (Okabe & Ito, "Color
//! Universal Design", 2008: distinguishable with the common colour-vision
//! deficiencies, and every colour but its yellow, left out, is readable on
//! white). Text is SVG `<text>` (no font is loaded: the viewer renders it),
//! so widths are estimates with margins to spare.

use crate::latency::{LatencyError, MAX_NINES, NS_PER_MS, TICKS_PER_HALF_DISTANCE};
use hdrhistogram::Histogram;
use plotters::prelude::*;

/// The size of the charts, px.
pub const CHART_SIZE: (u32, u32) = (1000, 620);

/// Okabe–Ito's colours without the yellow: blue, vermillion, bluish green,
/// reddish purple, orange, sky blue, black.
const PALETTE: [RGBColor; 7] = [
    RGBColor(0, 114, 178),
    RGBColor(213, 94, 0),
    RGBColor(0, 158, 115),
    RGBColor(204, 121, 167),
    RGBColor(230, 159, 0),
    RGBColor(86, 180, 233),
    RGBColor(0, 0, 0),
];

/// The colour of series `i` (the palette repeats after 7).
fn color(i: usize) -> RGBColor {
    PALETTE[i % PALETTE.len()]
}

/// A chart's words: the title, a subtitle line (what ran: workload, rate,
/// parallelism, duration, mode, commit, date) and an optional note, a
/// third line in orange (e.g. "closed loop: not a latency test").
#[derive(Clone, Debug, Default)]
pub struct ChartText {
    /// The first line, large.
    pub title: String,
    /// The second line, smaller.
    pub subtitle: String,
    /// Drawn under the subtitle when given.
    pub note: Option<String>,
}

/// One line of the percentile chart.
#[derive(Clone, Copy, Debug)]
pub struct PercentileSeries<'a> {
    /// The legend's name (e.g. `run-a exactly-once`).
    pub name: &'a str,
    /// Its latencies, ns.
    pub histogram: &'a Histogram<u64>,
}

/// The unit a latency axis reads best in, and its size in ns: µs when
/// every value is below 10 ms, else ms.
fn unit_for(max_ns: u64) -> (&'static str, f64) {
    if max_ns < 10_000_000 {
        ("µs", 1_000.0)
    } else {
        ("ms", NS_PER_MS)
    }
}

/// A tick value without a trailing `.0` (`20`, `0.5`, `0.05`).
fn tick(v: f64) -> String {
    if v >= 1.0 || v == 0.0 {
        format!("{v:.0}")
    } else {
        let s = format!("{v:.6}");
        s.trim_end_matches('0').trim_end_matches('.').to_string()
    }
}

/// A log axis reaches 1 % past its end decades, so that both carry a tick
/// label (plotters labels only decades strictly inside the range).
const AXIS_SLACK: f64 = 0.99;

/// The log axis' range around `lo..=hi` (in the axis' unit): whole
/// decades, and never below 0.01 of the unit (a 0 ns latency is drawn
/// there).
fn decades(lo: f64, hi: f64) -> (f64, f64) {
    let lo = 10f64.powf(lo.max(0.01).log10().floor());
    let hi = 10f64.powf(hi.max(lo * 10.0).log10().ceil());
    (lo, if hi <= lo { lo * 10.0 } else { hi })
}

/// The x label of `nines` (position `log10(1/(1-p))`): 0 → "0%", 1 →
/// "90%", 2 → "99%", 3 → "99.9%", …
fn percentile_label(nines: u32) -> String {
    match nines {
        0 => "0%".to_string(),
        1 => "90%".to_string(),
        2 => "99%".to_string(),
        k => format!("99.{}%", "9".repeat(k as usize - 2)),
    }
}

/// `s` without control characters (each becomes U+FFFD): they would make
/// the SVG invalid XML (a chart's words may come from a saved file).
fn printable(s: &str) -> String {
    s.chars()
        .map(|c| if c.is_control() { '\u{FFFD}' } else { c })
        .collect()
}

fn plot_err(e: &dyn std::fmt::Display) -> LatencyError {
    LatencyError::Plot(e.to_string())
}

/// Draws the title, the subtitle and the note; returns the area left for
/// the plot.
fn frame<DB: DrawingBackend>(
    root: &DrawingArea<DB, plotters::coord::Shift>,
    text: &ChartText,
) -> Result<DrawingArea<DB, plotters::coord::Shift>, LatencyError> {
    root.fill(&WHITE).map_err(|e| plot_err(&e))?;
    let (top, rest) = root.split_vertically(88);
    top.draw(&Text::new(
        printable(&text.title),
        (20, 12),
        ("sans-serif", 24).into_font().color(&BLACK),
    ))
    .map_err(|e| plot_err(&e))?;
    top.draw(&Text::new(
        printable(&text.subtitle),
        (20, 44),
        ("sans-serif", 15).into_font().color(&RGBColor(80, 80, 80)),
    ))
    .map_err(|e| plot_err(&e))?;
    if let Some(note) = &text.note {
        top.draw(&Text::new(
            printable(note),
            (20, 66),
            ("sans-serif", 15).into_font().color(&RGBColor(213, 94, 0)),
        ))
        .map_err(|e| plot_err(&e))?;
    }
    Ok(rest)
}

/// Latency by percentile, one line per series, as an SVG document.
///
/// As HdrHistogram's plots, the x axis is `1/(1-p)` on a log scale, ticks
/// labelled 90%, 99%, 99.9%, … (points at [`TICKS_PER_HALF_DISTANCE`]
/// ticks per half distance, up to 7 nines (99.99999%); the 100% point, at
/// infinity, is left out and each max is in the legend). The y axis is the
/// latency on a log scale, in µs or ms. Empty histograms are skipped.
///
/// # Errors
/// [`LatencyError::NothingToPlot`] when every histogram is empty,
/// [`LatencyError::Plot`].
pub fn percentile_chart_svg(
    text: &ChartText,
    series: &[PercentileSeries<'_>],
) -> Result<String, LatencyError> {
    let mut lines = Vec::new();
    let (mut x_max, mut y_min_ns, mut y_max_ns) = (0.0_f64, u64::MAX, 0u64);
    for s in series.iter().filter(|s| !s.histogram.is_empty()) {
        let h = s.histogram;
        let points: Vec<(f64, u64)> = h
            .iter_quantiles(TICKS_PER_HALF_DISTANCE)
            .map(|v| (v.quantile_iterated_to(), v.value_iterated_to()))
            .filter(|(q, _)| *q < 1.0)
            .map(|(q, value)| ((1.0 / (1.0 - q)).log10().min(f64::from(MAX_NINES)), value))
            .collect();
        for (x, y) in &points {
            x_max = x_max.max(*x);
            y_max_ns = y_max_ns.max(*y);
            y_min_ns = y_min_ns.min(*y);
        }
        y_max_ns = y_max_ns.max(h.max());
        let (u, per) = unit_for(h.max());
        lines.push((
            format!(
                "{} (max {} {u})",
                printable(s.name),
                tick_precise(h.max() as f64 / per)
            ),
            points,
        ));
    }
    if lines.is_empty() {
        return Err(LatencyError::NothingToPlot);
    }
    let (unit, per_unit) = unit_for(y_max_ns);
    // At least up to 99.9%, rounded up to whole nines.
    let nines = (x_max.ceil() as u32).clamp(3, MAX_NINES);
    let (y_lo, y_hi) = decades(y_min_ns as f64 / per_unit, y_max_ns as f64 / per_unit);
    let (y_lo, y_hi) = (y_lo * AXIS_SLACK, y_hi / AXIS_SLACK);
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, CHART_SIZE).into_drawing_area();
        let area = frame(&root, text)?;
        let mut chart = ChartBuilder::on(&area)
            .margin_left(15)
            // Room for the last label ("99.99999%") centred on the edge.
            .margin_right(55)
            .margin_bottom(10)
            .x_label_area_size(45)
            .y_label_area_size(75)
            .build_cartesian_2d(0f64..f64::from(nines), (y_lo..y_hi).log_scale())
            .map_err(|e| plot_err(&e))?;
        let x_fmt = |x: &f64| {
            let k = x.round();
            if (x - k).abs() < 1e-9 && k >= 0.0 {
                percentile_label(k as u32)
            } else {
                String::new()
            }
        };
        let y_fmt = |y: &f64| tick(*y);
        chart
            .configure_mesh()
            .x_labels(nines as usize + 1)
            .x_label_formatter(&x_fmt)
            .y_label_formatter(&y_fmt)
            .x_desc("percentile")
            .y_desc(format!("latency ({unit}, log scale)"))
            .label_style(("sans-serif", 15))
            .axis_desc_style(("sans-serif", 16))
            .light_line_style(RGBColor(235, 235, 235))
            .draw()
            .map_err(|e| plot_err(&e))?;
        for (i, (name, points)) in lines.into_iter().enumerate() {
            let c = color(i);
            let points: Vec<(f64, f64)> = points
                .into_iter()
                .map(|(x, y)| (x, (y as f64 / per_unit).max(y_lo)))
                .collect();
            chart
                .draw_series(LineSeries::new(points, c.stroke_width(2)))
                .map_err(|e| plot_err(&e))?
                .label(name)
                .legend(line_sample(c));
        }
        // Curves rise to the right: the lower right stays empty.
        legend(&mut chart, SeriesLabelPosition::LowerRight)?;
        root.present().map_err(|e| plot_err(&e))?;
    }
    Ok(svg)
}

/// The legend box, at `position`.
fn legend<'a, DB: DrawingBackend + 'a, CT: plotters::coord::CoordTranslate>(
    chart: &mut ChartContext<'a, DB, CT>,
    position: SeriesLabelPosition,
) -> Result<(), LatencyError> {
    chart
        .configure_series_labels()
        .position(position)
        .border_style(RGBColor(160, 160, 160))
        .background_style(WHITE.mix(0.9))
        .label_font(("sans-serif", 14))
        .draw()
        .map_err(|e| plot_err(&e))
}

/// A legend sample: a short line of `c`.
fn line_sample(c: RGBColor) -> impl Fn((i32, i32)) -> PathElement<(i32, i32)> {
    move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], c.stroke_width(2))
}

/// A value with up to 3 significant decimals, without trailing zeros.
fn tick_precise(v: f64) -> String {
    let s = format!("{v:.3}");
    s.trim_end_matches('0').trim_end_matches('.').to_string()
}

/// One interval of a timeline: its latencies' count, p50, p99 and max, ns.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct TimelinePoint {
    /// The interval's start, ns from the timeline's start.
    pub offset_ns: u64,
    /// Latencies recorded in it.
    pub count: u64,
    /// Median, ns.
    pub p50_ns: u64,
    /// 99th percentile, ns.
    pub p99_ns: u64,
    /// Maximum, ns.
    pub max_ns: u64,
}

impl TimelinePoint {
    /// The point of interval `index` (of `interval_ns`) holding `h`.
    pub fn of(index: usize, interval_ns: u64, h: &Histogram<u64>) -> Self {
        TimelinePoint {
            offset_ns: (index as u64).saturating_mul(interval_ns),
            count: h.len(),
            p50_ns: h.value_at_quantile(0.5),
            p99_ns: h.value_at_quantile(0.99),
            max_ns: h.max(),
        }
    }
}

/// What a timeline band stands for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BandKind {
    /// A completed checkpoint, trigger to completion.
    Checkpoint,
    /// An aborted checkpoint, trigger to abort.
    AbortedCheckpoint,
    /// A failure to the first record delivered after it.
    Recovery,
    /// The warm-up, not recorded.
    WarmUp,
}

/// A span drawn across the timeline, ns from the timeline's start.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Band {
    /// Its start.
    pub start_ns: u64,
    /// Its end (at least `start_ns`).
    pub end_ns: u64,
    /// What it is.
    pub kind: BandKind,
}

/// The latency timeline of one run: p50, p99 and max per interval (each
/// at its interval's middle), with checkpoints and recoveries as bands,
/// and, for a run with committed output, the committed p50 and p99
/// (`committed`, by intended send time as `points`), as an SVG document. The x axis is seconds from the start, the y axis
/// the latency on a log scale. Intervals without latencies are gaps.
///
/// # Errors
/// [`LatencyError::NothingToPlot`] when no interval has a latency,
/// [`LatencyError::Plot`].
pub fn timeline_chart_svg(
    text: &ChartText,
    points: &[TimelinePoint],
    committed: &[TimelinePoint],
    interval_ns: u64,
    bands: &[Band],
) -> Result<String, LatencyError> {
    let filled: Vec<&TimelinePoint> = points.iter().filter(|p| p.count > 0).collect();
    if filled.is_empty() {
        return Err(LatencyError::NothingToPlot);
    }
    let committed: Vec<&TimelinePoint> = committed.iter().filter(|p| p.count > 0).collect();
    let max_ns = filled
        .iter()
        .map(|p| p.max_ns)
        .chain(committed.iter().map(|p| p.p99_ns))
        .max()
        .unwrap_or(1);
    let min_ns = filled.iter().map(|p| p.p50_ns).min().unwrap_or(1);
    let (unit, per_unit) = unit_for(max_ns);
    let (y_lo, y_hi) = decades(min_ns as f64 / per_unit, max_ns as f64 / per_unit);
    // Half a decade more on top: the legend's room, above most lines.
    let (y_lo, y_hi) = (y_lo * AXIS_SLACK, y_hi * 3.0 / AXIS_SLACK);
    let end_ns = points
        .iter()
        .map(|p| p.offset_ns.saturating_add(interval_ns))
        .chain(bands.iter().map(|b| b.end_ns))
        .max()
        .unwrap_or(interval_ns);
    let x_hi = (end_ns as f64 / 1e9).max(0.1);
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, CHART_SIZE).into_drawing_area();
        let area = frame(&root, text)?;
        let mut chart = ChartBuilder::on(&area)
            .margin_left(15)
            .margin_right(30)
            .margin_bottom(10)
            .x_label_area_size(45)
            .y_label_area_size(75)
            .build_cartesian_2d(0f64..x_hi, (y_lo..y_hi).log_scale())
            .map_err(|e| plot_err(&e))?;
        let y_fmt = |y: &f64| tick(*y);
        let x_fmt = |x: &f64| tick_precise(*x);
        chart
            .configure_mesh()
            .x_label_formatter(&x_fmt)
            .y_label_formatter(&y_fmt)
            .x_desc("time since the start (s)")
            .y_desc(format!("latency ({unit}, log scale)"))
            .label_style(("sans-serif", 15))
            .axis_desc_style(("sans-serif", 16))
            .light_line_style(RGBColor(240, 240, 240))
            .max_light_lines(4)
            .draw()
            .map_err(|e| plot_err(&e))?;
        let band_style = |k: BandKind| match k {
            BandKind::Checkpoint => RGBColor(0, 114, 178).mix(0.15),
            BandKind::AbortedCheckpoint => RGBColor(230, 159, 0).mix(0.5),
            BandKind::Recovery => RGBColor(213, 94, 0).mix(0.7),
            BandKind::WarmUp => RGBColor(128, 128, 128).mix(0.15),
        };
        // Bands first, under the lines. A band narrower than a pixel is
        // widened to one (a 1 ms checkpoint in a 60 s run); failures and
        // aborts, rare and what a reader looks for, to 4 px.
        let px = x_hi / f64::from(CHART_SIZE.0);
        for kind in [
            BandKind::WarmUp,
            BandKind::Checkpoint,
            BandKind::AbortedCheckpoint,
            BandKind::Recovery,
        ] {
            let min_w = match kind {
                BandKind::Recovery | BandKind::AbortedCheckpoint => 4.0 * px,
                _ => px,
            };
            let rects: Vec<_> = bands
                .iter()
                .filter(|b| b.kind == kind)
                .map(|b| {
                    let x0 = b.start_ns as f64 / 1e9;
                    let x1 = (b.end_ns as f64 / 1e9).max(x0 + min_w);
                    Rectangle::new([(x0, y_lo), (x1, y_hi)], band_style(kind).filled())
                })
                .collect();
            if rects.is_empty() {
                continue;
            }
            let label = match kind {
                BandKind::Checkpoint => "checkpoint (trigger to completion)",
                BandKind::AbortedCheckpoint => "aborted checkpoint",
                BandKind::Recovery => "failure to recovery",
                BandKind::WarmUp => "warm-up (not recorded)",
            };
            let style = band_style(kind);
            chart
                .draw_series(rects)
                .map_err(|e| plot_err(&e))?
                .label(label)
                .legend(move |(x, y)| {
                    Rectangle::new([(x, y - 6), (x + 20, y + 6)], style.filled())
                });
        }
        let mid = interval_ns as f64 / 2e9;
        type Get = fn(&TimelinePoint) -> u64;
        let lines: [(&str, Get, &[&TimelinePoint], usize); 5] = [
            ("max", |p| p.max_ns, &filled, 6),
            ("p99", |p| p.p99_ns, &filled, 1),
            ("p50", |p| p.p50_ns, &filled, 0),
            ("committed p99", |p| p.p99_ns, &committed, 3),
            ("committed p50", |p| p.p50_ns, &committed, 2),
        ];
        for (name, get, filled, colour) in lines {
            if filled.is_empty() {
                continue;
            }
            let c = color(colour);
            // One line per run of filled intervals: an empty interval is
            // a gap, not a drop to zero.
            let mut runs: Vec<Vec<(f64, f64)>> = vec![Vec::new()];
            let mut last: Option<u64> = None;
            for p in filled.iter() {
                if last.is_some_and(|l| p.offset_ns > l.saturating_add(interval_ns)) {
                    runs.push(Vec::new());
                }
                last = Some(p.offset_ns);
                let y = (get(p) as f64 / per_unit).max(y_lo);
                runs.last_mut()
                    .expect("one run at least")
                    .push((p.offset_ns as f64 / 1e9 + mid, y));
            }
            let mut labelled = false;
            for run in runs.into_iter().filter(|r| !r.is_empty()) {
                let drawn = chart
                    .draw_series(LineSeries::new(run, c.stroke_width(2)))
                    .map_err(|e| plot_err(&e))?;
                if !labelled {
                    drawn.label(name).legend(line_sample(c));
                    labelled = true;
                }
            }
        }
        legend(&mut chart, SeriesLabelPosition::UpperRight)?;
        root.present().map_err(|e| plot_err(&e))?;
    }
    Ok(svg)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::latency::new_histogram;

    /// The contents of the SVG's `<text>` elements, trimmed.
    fn texts(svg: &str) -> Vec<String> {
        svg.split("<text")
            .skip(1)
            .filter_map(|t| {
                let body = &t[t.find('>')? + 1..];
                Some(body[..body.find("</text>")?].trim().to_string())
            })
            .collect()
    }

    fn hist(values: impl IntoIterator<Item = u64>) -> Histogram<u64> {
        let mut h = new_histogram();
        for v in values {
            h.saturating_record(v);
        }
        h
    }

    #[test]
    fn control_characters_do_not_reach_the_svg() {
        let h = hist([1_000, 2_000]);
        let text = ChartText {
            title: "W2\u{1}".into(),
            subtitle: "commit \u{1b}[31m".into(),
            note: Some("\u{0}".into()),
        };
        let svg = percentile_chart_svg(
            &text,
            &[PercentileSeries {
                name: "run\u{7}",
                histogram: &h,
            }],
        )
        .unwrap();
        assert!(!svg.chars().any(|c| c.is_control() && c != '\n'), "{svg:?}");
        assert!(svg.contains("W2\u{FFFD}"));
    }

    #[test]
    fn ticks_have_no_trailing_zeros() {
        assert_eq!(tick(20.0), "20");
        assert_eq!(tick(0.5), "0.5");
        assert_eq!(tick(0.05), "0.05");
        assert_eq!(tick_precise(12.500), "12.5");
        assert_eq!(decades(0.04, 12.0), (0.01, 100.0));
        assert_eq!(decades(0.0, 0.0), (0.01, 0.1));
    }

    #[test]
    fn the_percentile_chart_has_a_log_axis_a_subtitle_and_a_note() {
        let a = hist((0..10_000).map(|i| 20_000 + i % 50_000));
        let b = hist((0..10_000).map(|i| if i % 100 == 0 { 12_000_000 } else { 40_000 }));
        let text = ChartText {
            title: "lockgate W2".into(),
            subtitle: "200000 records/s, parallelism 2".into(),
            note: Some("interrupted".into()),
        };
        let svg = percentile_chart_svg(
            &text,
            &[
                PercentileSeries {
                    name: "a exactly-once",
                    histogram: &a,
                },
                PercentileSeries {
                    name: "b none",
                    histogram: &b,
                },
            ],
        )
        .unwrap();
        for needle in [
            "<svg",
            "lockgate W2",
            "200000 records/s",
            "interrupted",
            "latency (ms, log scale)",
            "99.9%",
            "a exactly-once (max 29.999 µs)",
            "b none (max 12",
        ] {
            assert!(svg.contains(needle), "{needle}");
        }
        // Decade ticks at both ends, none ending in ".0".
        let t = texts(&svg);
        for decade in ["0.01", "0.1", "1", "10", "100"] {
            assert!(t.iter().any(|x| x == decade), "{decade}: {t:?}");
        }
        assert!(!t.iter().any(|x| x.ends_with(".0")), "{t:?}");
        assert!(matches!(
            percentile_chart_svg(
                &text,
                &[PercentileSeries {
                    name: "x",
                    histogram: &new_histogram()
                }]
            ),
            Err(LatencyError::NothingToPlot)
        ));
    }

    #[test]
    fn the_timeline_draws_bands_and_gaps() {
        let interval = 100_000_000;
        let mut points: Vec<TimelinePoint> = (0..20)
            .map(|i| TimelinePoint::of(i, interval, &hist([30_000, 40_000, 2_000_000])))
            .collect();
        points[7].count = 0; // a gap
        let bands = [
            Band {
                start_ns: 300_000_000,
                end_ns: 310_000_000,
                kind: BandKind::Checkpoint,
            },
            Band {
                start_ns: 900_000_000,
                end_ns: 950_000_000,
                kind: BandKind::Recovery,
            },
        ];
        let svg =
            timeline_chart_svg(&ChartText::default(), &points, &[], interval, &bands).unwrap();
        assert!(svg.contains("checkpoint (trigger to completion)"));
        assert!(svg.contains("failure to recovery"));
        assert!(svg.contains("time since the start (s)"));
        assert!(!svg.contains("aborted checkpoint"), "no aborted band");
        // p50 (blue) in two pieces around the gap, and its legend sample.
        let blue = r##"stroke="#0072B2" stroke-width="2""##;
        assert_eq!(svg.matches(blue).count(), 3, "{svg}");
        assert!(matches!(
            timeline_chart_svg(&ChartText::default(), &[], &[], interval, &[]),
            Err(LatencyError::NothingToPlot)
        ));
    }
}
