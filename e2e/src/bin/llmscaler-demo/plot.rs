//! A replay's timeline as a picture: replicas (spec, desired, ready), the waiting and running
//! requests per Ready replica against the scaler's targets, and the arrival rate, over trace
//! time, with the trace attribution in the footer. Drawn here, beside the only program that
//! draws it, so that neither the load model nor the operator links a plotting library.

use std::path::Path;

use plotters::coord::Shift;
use plotters::prelude::*;

/// One observation of a closed-loop replay (one line of the demo's live output).
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) struct Sample {
    /// Trace time, seconds.
    pub t_s: f64,
    /// Arrivals per trace second since the previous sample.
    pub requests_per_s: f64,
    /// Waiting requests per Ready replica (the scaler's `avg(vllm:num_requests_waiting)`).
    pub queue: f64,
    /// Running requests per Ready replica (`avg(vllm:num_requests_running)`).
    pub running: f64,
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
pub(crate) struct PlotError {
    /// The output path.
    pub path: String,
    /// plotters' error text.
    pub message: String,
}

const SIZE: (u32, u32) = (1400, 1000);

/// The scaler's targets per replica, for the dashed lines.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub(crate) struct Targets {
    /// Target of `avg(vllm:num_requests_waiting)`.
    pub queue: Option<f64>,
    /// Target of `avg(vllm:num_requests_running)`.
    pub running: Option<f64>,
}

type DrawResult<DB> = Result<(), DrawingAreaErrorKind<<DB as DrawingBackend>::ErrorType>>;

/// Draws `samples` to a PNG at `path`: `title` on top, `footer` lines (summary, attribution)
/// under the panels, the scaler's targets for the queue and the running requests (when set) as
/// dashed lines on the per-replica panel. That panel's axis stops at 2.5 times the larger
/// target (or the largest value, if smaller); higher values are drawn at the top and the peak is
/// named in its caption.
///
/// # Errors
/// [`PlotError`] when plotters fails (I/O, fonts).
pub(crate) fn draw_png(
    path: &Path,
    samples: &[Sample],
    targets: Targets,
    title: &str,
    footer: &[String],
) -> Result<(), PlotError> {
    let err = |e: &dyn std::fmt::Display| PlotError {
        path: path.display().to_string(),
        message: e.to_string(),
    };
    let root = BitMapBackend::new(path, SIZE).into_drawing_area();
    draw_on(&root, samples, targets, title, footer).map_err(|e| err(&e))?;
    root.present().map_err(|e| err(&e))
}

fn draw_on<DB: DrawingBackend>(
    root: &DrawingArea<DB, Shift>,
    samples: &[Sample],
    targets: Targets,
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
                llmscaler::simulate::plot::step_points(samples, |s| (minutes(s.t_s), get(s))),
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

    // Per-replica load.
    let finite = |v: f64| v.is_finite().then_some(v);
    let peak = samples
        .iter()
        .flat_map(|s| [finite(s.queue), finite(s.running)])
        .flatten()
        .fold(0.0, f64::max);
    let top_target = targets
        .queue
        .into_iter()
        .chain(targets.running)
        .fold(0.0, f64::max);
    let y_max = if top_target > 0.0 {
        peak.min(2.5 * top_target).max(top_target * 1.2)
    } else {
        peak
    }
    .max(1.0);
    let caption = if peak > y_max {
        format!("requests per Ready replica (axis clipped at {y_max:.0}; peak {peak:.0})")
    } else {
        "requests per Ready replica".to_string()
    };
    let mut chart = ChartBuilder::on(&panels[1])
        .caption(caption, ("sans-serif", 20))
        .margin(8)
        .x_label_area_size(28)
        .y_label_area_size(50)
        .build_cartesian_2d(0.0..t_end, 0.0..y_max * 1.05)?;
    chart.configure_mesh().x_desc("trace time (min)").draw()?;
    let purple = RGBColor(128, 0, 160);
    let teal = RGBColor(0, 140, 140);
    type Load = fn(&Sample) -> f64;
    let loads: [(&str, RGBColor, Load, Option<f64>); 2] = [
        (
            "waiting (avg vllm:num_requests_waiting)",
            purple,
            |s| s.queue,
            targets.queue,
        ),
        (
            "running (avg vllm:num_requests_running)",
            teal,
            |s| s.running,
            targets.running,
        ),
    ];
    for (label, color, get, target) in loads {
        chart
            .draw_series(LineSeries::new(
                samples
                    .iter()
                    .filter(|s| get(s).is_finite())
                    .map(|s| (minutes(s.t_s), get(s).min(y_max * 1.05))),
                color.stroke_width(2),
            ))?
            .label(label)
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], color));
        if let Some(target) = target {
            chart
                .draw_series(DashedLineSeries::new(
                    [(0.0, target), (t_end, target)],
                    8,
                    6,
                    color.stroke_width(1),
                ))?
                .label(format!("target {target}"))
                .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], color));
        }
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperRight)
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn draws_a_png_with_clipped_peaks() {
        let samples: Vec<Sample> = (0..30)
            .map(|i| Sample {
                t_s: f64::from(i) * 60.0,
                requests_per_s: 10.0 + f64::from(i % 5),
                queue: if i == 3 { 250.0 } else { 0.5 },
                running: if i == 0 { f64::NAN } else { 11.0 },
                ready: 2 + i % 3,
                desired: 2 + i % 3,
                replicas: 2 + i % 3,
            })
            .collect();
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("t.png");
        let targets = Targets {
            queue: Some(3.0),
            running: Some(12.0),
        };
        draw_png(&path, &samples, targets, "test", &["footer".into()]).expect("drawn");
        let bytes = std::fs::read(&path).expect("written");
        assert_eq!(&bytes[..8], b"\x89PNG\r\n\x1a\n");
    }
}
