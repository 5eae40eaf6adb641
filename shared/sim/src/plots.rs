//! SVG plots of a comparison: utilization over time for one policy, and wait-time CDFs of all
//! policies on one chart. Rendered to strings (the caller writes the files), with a bounded
//! number of points however long the trace, so an 82k-job replay still gives small files.

use plotters::coord::combinators::IntoLogRange;
use plotters::prelude::*;

use crate::measures::{utilization_series, wait_or_censored};
use crate::record::RunRecord;

/// Time slices in a utilization plot (enough to see a day's pattern in a two-month trace).
pub const UTILIZATION_BINS: usize = 600;

/// Most points drawn per CDF curve; larger runs are sampled at evenly spaced ranks.
pub const CDF_POINTS: usize = 1000;

/// Waits shorter than this are drawn at it, since the CDF's wait axis is logarithmic.
pub const CDF_MIN_WAIT_S: f64 = 1.0;

const SIZE: (u32, u32) = (900, 500);

/// A plot could not be drawn.
#[derive(Debug, thiserror::Error)]
pub enum PlotError {
    /// The plotting library reported an error.
    #[error("drawing {plot}: {message}")]
    Draw {
        /// Which plot.
        plot: String,
        /// What plotters said.
        message: String,
    },
}

fn draw_error(plot: &str) -> impl Fn(String) -> PlotError + '_ {
    move |message| PlotError::Draw {
        plot: plot.to_owned(),
        message,
    }
}

/// Colour of the `index`-th policy, the same in every plot.
fn colour(index: usize) -> RGBColor {
    const COLOURS: [RGBColor; 8] = [
        RGBColor(31, 119, 180),
        RGBColor(255, 127, 14),
        RGBColor(44, 160, 44),
        RGBColor(214, 39, 40),
        RGBColor(148, 103, 189),
        RGBColor(140, 86, 75),
        RGBColor(227, 119, 194),
        RGBColor(127, 127, 127),
    ];
    COLOURS[index % COLOURS.len()]
}

/// Utilization (busy over capacity) over time for one run, as an SVG document. Slices with no
/// capacity recorded are left as gaps rather than drawn as zero. The time axis spans
/// `axis_end_s` (or the run, if longer), so that plots of several runs share one axis.
pub fn utilization_svg(run: &RunRecord, axis_end_s: f64) -> Result<String, PlotError> {
    let plot = format!("utilization of {}", run.policy);
    let err = draw_error(&plot);
    let series = utilization_series(&run.usage, run.end_s, UTILIZATION_BINS);
    let end_h = (run.end_s.max(axis_end_s) / 3600.0).max(1.0 / 60.0);
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, SIZE).into_drawing_area();
        root.fill(&WHITE).map_err(|e| err(e.to_string()))?;
        let mut chart = ChartBuilder::on(&root)
            .caption(
                format!("Utilization over time: {}", run.policy),
                ("sans-serif", 20),
            )
            .margin(15)
            .x_label_area_size(40)
            .y_label_area_size(50)
            .build_cartesian_2d(0.0..end_h, 0.0..1.05)
            .map_err(|e| err(e.to_string()))?;
        chart
            .configure_mesh()
            .x_desc("time (hours)")
            .y_desc("fraction")
            .draw()
            .map_err(|e| err(e.to_string()))?;
        // The backlog line first, so the utilization line is drawn over it: where the grey
        // line is high and the blue one low, work waited while instances sat idle.
        let backlog: Vec<(f64, f64)> = series
            .iter()
            .map(|s| (s.t_s / 3600.0, s.backlogged_fraction))
            .collect();
        let grey = RGBColor(160, 160, 160);
        chart
            .draw_series(LineSeries::new(backlog, grey.stroke_width(1)))
            .map_err(|e| err(e.to_string()))?
            .label("fraction of time with work waiting")
            .legend(move |(x, y)| {
                PathElement::new(vec![(x, y), (x + 20, y)], grey.stroke_width(1))
            });
        // One line per run of consecutive slices with data, so gaps stay gaps.
        let mut segment: Vec<(f64, f64)> = Vec::new();
        let mut segments = Vec::new();
        for slice in &series {
            match slice.utilization {
                Some(u) => segment.push((slice.t_s / 3600.0, u)),
                None if !segment.is_empty() => segments.push(std::mem::take(&mut segment)),
                None => {}
            }
        }
        if !segment.is_empty() {
            segments.push(segment);
        }
        let blue = colour(0).stroke_width(2);
        for (index, points) in segments.into_iter().enumerate() {
            let drawn = chart
                .draw_series(LineSeries::new(points, blue))
                .map_err(|e| err(e.to_string()))?;
            if index == 0 {
                drawn
                    .label("busy / capacity")
                    .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], blue));
            }
        }
        chart
            .configure_series_labels()
            .position(SeriesLabelPosition::LowerRight)
            .background_style(WHITE.mix(0.8))
            .border_style(BLACK)
            .draw()
            .map_err(|e| err(e.to_string()))?;
        root.present().map_err(|e| err(e.to_string()))?;
    }
    Ok(svg)
}

/// Empirical CDF points `(wait_s, fraction of jobs)` of one run, at most [`CDF_POINTS`] of them.
/// Jobs that never started count with their censored waits, as in the measures.
pub fn wait_cdf(run: &RunRecord) -> Vec<(f64, f64)> {
    let mut waits: Vec<f64> = run
        .jobs
        .iter()
        .map(|j| wait_or_censored(j, run.end_s))
        .collect();
    waits.sort_by(f64::total_cmp);
    let n = waits.len();
    if n == 0 {
        return Vec::new();
    }
    let step = n.div_ceil(CDF_POINTS);
    let mut ranks: Vec<usize> = (step..=n).step_by(step).collect();
    if ranks.last() != Some(&n) {
        ranks.push(n);
    }
    ranks
        .into_iter()
        .filter_map(|rank| {
            let fraction = rank as f64 / n as f64;
            waits
                .get(rank - 1)
                .map(|w| (w.max(CDF_MIN_WAIT_S), fraction))
        })
        .collect()
}

/// Wait-time CDFs of every run on one chart (wait on a log axis), as an SVG document.
pub fn wait_cdf_svg(runs: &[RunRecord]) -> Result<String, PlotError> {
    let err = draw_error("wait-time CDF");
    let curves: Vec<(&str, Vec<(f64, f64)>)> = runs
        .iter()
        .map(|r| (r.policy.as_str(), wait_cdf(r)))
        .collect();
    let max_wait = curves
        .iter()
        .flat_map(|(_, points)| points.iter().map(|p| p.0))
        .fold(CDF_MIN_WAIT_S * 10.0, f64::max);
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, SIZE).into_drawing_area();
        root.fill(&WHITE).map_err(|e| err(e.to_string()))?;
        let mut chart = ChartBuilder::on(&root)
            .caption("Wait-time CDF per policy", ("sans-serif", 20))
            .margin(15)
            .x_label_area_size(40)
            .y_label_area_size(50)
            .build_cartesian_2d((CDF_MIN_WAIT_S..max_wait * 1.1).log_scale(), 0.0..1.0)
            .map_err(|e| err(e.to_string()))?;
        chart
            .configure_mesh()
            .x_desc(format!(
                "wait (s, log scale; under {CDF_MIN_WAIT_S} s drawn at {CDF_MIN_WAIT_S} s)"
            ))
            .y_desc("fraction of jobs")
            .draw()
            .map_err(|e| err(e.to_string()))?;
        for (index, (policy, points)) in curves.into_iter().enumerate() {
            if points.is_empty() {
                continue;
            }
            let style = colour(index).stroke_width(2);
            chart
                .draw_series(LineSeries::new(points, style))
                .map_err(|e| err(e.to_string()))?
                .label(policy)
                .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], style));
        }
        chart
            .configure_series_labels()
            .position(SeriesLabelPosition::LowerRight)
            .background_style(WHITE.mix(0.8))
            .border_style(BLACK)
            .draw()
            .map_err(|e| err(e.to_string()))?;
        root.present().map_err(|e| err(e.to_string()))?;
    }
    Ok(svg)
}
