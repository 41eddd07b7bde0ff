//! `simulate --requests --plot FILE.png|svg`: `spec.replicas` of every policy over time (top),
//! the arrival rate (bottom), the SLO attainment in the legend and the trace's attribution in
//! the caption. Needs the `plot` cargo feature, like [`super::plot`].

use std::path::Path;

use llmscaler_loadmodel::Request;

use super::compare::Report;
use super::plot::PlotError;

/// Requests per second in each minute of the trace: `(minute start, s; rate)`.
pub fn arrival_rate(requests: &[Request]) -> Vec<(f64, f64)> {
    let span = requests.last().map_or(0.0, |r| r.arrival_s);
    #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
    let minutes = (span / 60.0).floor() as usize + 1;
    let mut counts = vec![0u64; minutes];
    for r in requests {
        #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
        let m = ((r.arrival_s / 60.0).floor() as usize).min(minutes - 1);
        counts[m] += 1;
    }
    counts
        .iter()
        .enumerate()
        .map(|(m, &c)| (m as f64 * 60.0, c as f64 / 60.0))
        .collect()
}

/// Draws `report` to `path` (format by extension).
///
/// # Errors
/// [`PlotError::Format`] for an extension other than `.svg` or `.png`,
/// [`PlotError::Unsupported`] without the `plot` feature, [`PlotError::Draw`] when plotters
/// fails.
pub fn draw(
    path: &Path,
    report: &Report,
    requests: &[Request],
    title: &str,
) -> Result<(), PlotError> {
    let display = path.display().to_string();
    let svg = match path.extension().and_then(|e| e.to_str()) {
        Some("svg") => true,
        Some("png") => false,
        _ => return Err(PlotError::Format(display)),
    };
    #[cfg(feature = "plot")]
    {
        let rate = arrival_rate(requests);
        drawing::draw(path, svg, report, &rate, title).map_err(|message| PlotError::Draw {
            path: display,
            message,
        })
    }
    #[cfg(not(feature = "plot"))]
    {
        let _ = (svg, report, requests, title);
        Err(PlotError::Unsupported(display))
    }
}

#[cfg(feature = "plot")]
mod drawing {
    use std::path::Path;

    use plotters::coord::Shift;
    use plotters::prelude::*;

    use super::super::compare::Report;
    use super::super::plot::step_points;

    const SIZE: (u32, u32) = (1400, 900);

    fn color(name: &str) -> RGBColor {
        match name {
            "llmscaler" => RGBColor(0, 90, 200),
            "hpa" => RGBColor(220, 50, 30),
            "keda" => RGBColor(240, 150, 0),
            "ideal" => RGBColor(20, 160, 60),
            _ => RGBColor(120, 120, 120),
        }
    }

    pub(super) fn draw(
        path: &Path,
        svg: bool,
        report: &Report,
        rate: &[(f64, f64)],
        title: &str,
    ) -> Result<(), String> {
        let text = |e: &dyn std::fmt::Display| e.to_string();
        if svg {
            let root = SVGBackend::new(path, SIZE).into_drawing_area();
            draw_on(&root, report, rate, title).map_err(|e| text(&e))?;
            root.present().map_err(|e| text(&e))
        } else {
            let root = BitMapBackend::new(path, SIZE).into_drawing_area();
            draw_on(&root, report, rate, title).map_err(|e| text(&e))?;
            root.present().map_err(|e| text(&e))
        }
    }

    type DrawResult<DB> = Result<(), DrawingAreaErrorKind<<DB as DrawingBackend>::ErrorType>>;

    fn draw_on<DB: DrawingBackend>(
        root: &DrawingArea<DB, Shift>,
        report: &Report,
        rate: &[(f64, f64)],
        title: &str,
    ) -> DrawResult<DB> {
        root.fill(&WHITE)?;
        let root = root.titled(title, ("sans-serif", 20))?;
        let (body, foot) = root.split_vertically(SIZE.1 - 60);
        foot.draw(&Text::new(
            report.attribution.clone(),
            (10, 10),
            ("sans-serif", 14),
        ))?;
        let (top, bottom) = body.split_vertically((SIZE.1 - 60) * 2 / 3);
        let t_end = report.trace_seconds.max(1.0) / 60.0;
        let max_replicas = report
            .timelines
            .values()
            .flatten()
            .map(|p| p.replicas)
            .max()
            .unwrap_or(1)
            .max(1);
        let mut chart = ChartBuilder::on(&top)
            .caption("spec.replicas", ("sans-serif", 18))
            .margin(10)
            .x_label_area_size(30)
            .y_label_area_size(50)
            .build_cartesian_2d(0.0..t_end, 0.0..f64::from(max_replicas) * 1.1 + 0.5)?;
        chart.configure_mesh().x_desc("trace minutes").draw()?;
        for (name, timeline) in &report.timelines {
            let c = color(name);
            let slo = report
                .policies
                .get(name)
                .map_or(f64::NAN, |p| p.slo_attainment * 100.0);
            let hours = report
                .policies
                .get(name)
                .map_or(f64::NAN, |p| p.replica_hours);
            chart
                .draw_series(LineSeries::new(
                    step_points(timeline, |p| (p.t_s / 60.0, f64::from(p.replicas))),
                    c.stroke_width(2),
                ))?
                .label(format!("{name}: SLO {slo:.2}%, {hours:.1} replica-h"))
                .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], c));
        }
        chart
            .configure_series_labels()
            .position(SeriesLabelPosition::UpperLeft)
            .border_style(BLACK)
            .background_style(WHITE.mix(0.85))
            .draw()?;
        let peak = rate.iter().map(|r| r.1).fold(1e-9, f64::max);
        let mut chart = ChartBuilder::on(&bottom)
            .caption("arrival rate (requests/s per minute)", ("sans-serif", 18))
            .margin(10)
            .x_label_area_size(30)
            .y_label_area_size(50)
            .build_cartesian_2d(0.0..t_end, 0.0..peak * 1.1)?;
        chart.configure_mesh().x_desc("trace minutes").draw()?;
        chart.draw_series(LineSeries::new(
            step_points(rate, |r| (r.0 / 60.0, r.1)),
            BLACK.stroke_width(2),
        ))?;
        Ok(())
    }
}
