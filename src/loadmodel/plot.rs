//! A replay's timeline as a picture: replicas (spec, desired, ready), the average queue per
//! Ready replica against the scaler's target, and the arrival rate, over trace time, with the
//! trace attribution in the footer.

use std::path::Path;

use plotters::coord::Shift;
use plotters::prelude::*;
use serde::Serialize;

/// One observation of a closed-loop replay (one line of the demo's live output).
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct Sample {
    /// Trace time, seconds.
    pub t_s: f64,
    /// Arrivals per trace second since the previous sample.
    pub requests_per_s: f64,
    /// Waiting requests per Ready replica (the scaler's `avg(vllm:num_requests_waiting)`).
    pub queue: f64,
    /// Ready replicas.
    pub ready: i32,
    /// The scaler's `status.desiredReplicas`.
    pub desired: i32,
    /// The workload's `spec.replicas`.
    pub replicas: i32,
}

/// Why the picture was not written.
#[derive(Debug, thiserror::Error)]
#[error("drawing {path}: {message}")]
pub struct PlotError {
    /// The output path.
    pub path: String,
    /// plotters' error text.
    pub message: String,
}

const SIZE: (u32, u32) = (1400, 1000);

type DrawResult<DB> = Result<(), DrawingAreaErrorKind<<DB as DrawingBackend>::ErrorType>>;

/// Draws `samples` to a PNG at `path`: `title` on top, `footer` lines (summary, attribution)
/// under the panels, `target` as a dashed line on the queue panel.
///
/// # Errors
/// [`PlotError`] when plotters fails (I/O, fonts).
pub fn draw_png(
    path: &Path,
    samples: &[Sample],
    target: Option<f64>,
    title: &str,
    footer: &[String],
) -> Result<(), PlotError> {
    let err = |e: &dyn std::fmt::Display| PlotError {
        path: path.display().to_string(),
        message: e.to_string(),
    };
    let root = BitMapBackend::new(path, SIZE).into_drawing_area();
    draw_on(&root, samples, target, title, footer).map_err(|e| err(&e))?;
    root.present().map_err(|e| err(&e))
}

fn draw_on<DB: DrawingBackend>(
    root: &DrawingArea<DB, Shift>,
    samples: &[Sample],
    target: Option<f64>,
    title: &str,
    footer: &[String],
) -> DrawResult<DB> {
    root.fill(&WHITE)?;
    let footer_height = 22 * footer.len() as u32 + 10;
    let (body, foot) = root.split_vertically(SIZE.1 - footer_height);
    let body = body.titled(title, ("sans-serif", 26))?;
    let panels = body.split_evenly((3, 1));
    let minutes = |t: f64| t / 60.0;
    let t_end = samples.last().map_or(1.0, |s| minutes(s.t_s)).max(1.0);

    // Replicas.
    let max_replicas = samples
        .iter()
        .map(|s| s.replicas.max(s.desired).max(s.ready))
        .max()
        .unwrap_or(1)
        .max(1);
    let mut chart = ChartBuilder::on(&panels[0])
        .caption("replicas", ("sans-serif", 20))
        .margin(8)
        .x_label_area_size(28)
        .y_label_area_size(50)
        .build_cartesian_2d(0.0..t_end, 0.0..f64::from(max_replicas) * 1.15 + 0.5)?;
    chart.configure_mesh().x_desc("trace time (min)").draw()?;
    type Get = fn(&Sample) -> f64;
    let lines: [(&str, RGBColor, Get); 3] = [
        ("spec.replicas", BLUE, |s| f64::from(s.replicas)),
        ("desiredReplicas", RED, |s| f64::from(s.desired)),
        ("ready", GREEN, |s| f64::from(s.ready)),
    ];
    for (label, color, get) in lines {
        chart
            .draw_series(LineSeries::new(
                step_points(samples, |s| (minutes(s.t_s), get(s))),
                color.stroke_width(2),
            ))?
            .label(label)
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], color));
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperLeft)
        .border_style(BLACK)
        .background_style(WHITE.mix(0.8))
        .draw()?;

    // Queue.
    let max_queue = samples
        .iter()
        .map(|s| s.queue)
        .filter(|v| v.is_finite())
        .fold(target.unwrap_or(0.0), f64::max)
        .max(1.0);
    let mut chart = ChartBuilder::on(&panels[1])
        .caption(
            "waiting requests per Ready replica (avg vllm:num_requests_waiting)",
            ("sans-serif", 20),
        )
        .margin(8)
        .x_label_area_size(28)
        .y_label_area_size(50)
        .build_cartesian_2d(0.0..t_end, 0.0..max_queue * 1.1)?;
    chart.configure_mesh().x_desc("trace time (min)").draw()?;
    let purple = RGBColor(128, 0, 160);
    chart
        .draw_series(LineSeries::new(
            samples
                .iter()
                .filter(|s| s.queue.is_finite())
                .map(|s| (minutes(s.t_s), s.queue)),
            purple.stroke_width(2),
        ))?
        .label("queue")
        .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], purple));
    if let Some(target) = target {
        chart
            .draw_series(DashedLineSeries::new(
                [(0.0, target), (t_end, target)],
                8,
                6,
                BLACK.stroke_width(1),
            ))?
            .label(format!("target {target}"))
            .legend(|(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], BLACK));
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperLeft)
        .border_style(BLACK)
        .background_style(WHITE.mix(0.8))
        .draw()?;

    // Arrival rate.
    let max_rate = samples.iter().map(|s| s.requests_per_s).fold(1.0, f64::max);
    let mut chart = ChartBuilder::on(&panels[2])
        .caption("arrivals (requests per trace second)", ("sans-serif", 20))
        .margin(8)
        .x_label_area_size(28)
        .y_label_area_size(50)
        .build_cartesian_2d(0.0..t_end, 0.0..max_rate * 1.1)?;
    chart.configure_mesh().x_desc("trace time (min)").draw()?;
    chart.draw_series(LineSeries::new(
        samples.iter().map(|s| (minutes(s.t_s), s.requests_per_s)),
        RGBColor(200, 120, 0).stroke_width(2),
    ))?;

    for (i, line) in footer.iter().enumerate() {
        foot.draw(&Text::new(
            line.clone(),
            (12, 6 + 22 * i as i32),
            ("sans-serif", 17).into_font().color(&BLACK),
        ))?;
    }
    Ok(())
}

/// A step line: each value holds until the next sample.
fn step_points(samples: &[Sample], point: impl Fn(&Sample) -> (f64, f64)) -> Vec<(f64, f64)> {
    let mut out = Vec::with_capacity(samples.len() * 2);
    for (i, s) in samples.iter().enumerate() {
        let (x, y) = point(s);
        out.push((x, y));
        let next = samples.get(i + 1).map_or(x, |n| point(n).0);
        out.push((next, y));
    }
    out
}
