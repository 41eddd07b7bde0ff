//! Both fleets over the load, one PNG (`<out>/fleets.png`): `spec.replicas` and Ready replicas
//! of the llmscaler run and of the KEDA run over trace time, above the arrival rate, with the
//! trace attribution in the footer.

use std::path::Path;

use anyhow::Context;
use plotters::prelude::*;
use serde_json::Value;

use super::Sample;

const SIZE: (u32, u32) = (1400, 900);

/// A run file's timeline and its measured figures, with the replay's prediction of the fleet.
struct Run {
    name: &'static str,
    color: RGBColor,
    samples: Vec<Sample>,
    measured: Value,
    /// `(trace second, spec.replicas)` of the offline replay's run of the same settings.
    predicted: Vec<(f64, f64)>,
}

fn load(dir: &Path, name: &'static str, color: RGBColor, replay: &Value) -> anyhow::Result<Run> {
    let path = dir.join(format!("{name}.json"));
    let text =
        std::fs::read_to_string(&path).with_context(|| format!("reading {}", path.display()))?;
    let value: Value = serde_json::from_str(&text)?;
    let samples: Vec<Sample> = serde_json::from_value(value["timeline"].clone())
        .with_context(|| format!("{}: timeline", path.display()))?;
    let predicted = replay["timelines"][name]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|p| Some((p["t_s"].as_f64()?, p["replicas"].as_f64()?)))
        .collect();
    Ok(Run {
        name,
        color,
        samples,
        measured: value["measured"].clone(),
        predicted,
    })
}

/// Reads `<dir>/llmscaler.json`, `<dir>/keda.json` and (when there) `<dir>/replay.json`,
/// writes `<dir>/fleets.png`.
///
/// # Errors
/// A missing or malformed run file; plotters' errors (I/O, fonts).
pub(crate) fn draw(dir: &Path) -> anyhow::Result<()> {
    let replay: Value = std::fs::read_to_string(dir.join("replay.json"))
        .ok()
        .and_then(|t| serde_json::from_str(&t).ok())
        .unwrap_or(Value::Null);
    let runs = [
        load(dir, "llmscaler", BLUE, &replay)?,
        load(dir, "keda", RGBColor(220, 60, 0), &replay)?,
    ];
    let path = dir.join("fleets.png");
    let root = BitMapBackend::new(&path, SIZE).into_drawing_area();
    draw_on(&root, &runs).map_err(|e| anyhow::anyhow!("drawing {}: {e}", path.display()))?;
    root.present()
        .map_err(|e| anyhow::anyhow!("writing {}: {e}", path.display()))?;
    eprintln!("==> wrote {}", path.display());
    Ok(())
}

fn draw_on<DB: DrawingBackend>(
    root: &DrawingArea<DB, plotters::coord::Shift>,
    runs: &[Run],
) -> Result<(), DrawingAreaErrorKind<DB::ErrorType>> {
    root.fill(&WHITE)?;
    let footer: Vec<String> = runs
        .iter()
        .map(|r| {
            let m = &r.measured;
            format!(
                "{}: {:.1} replica-hours (trace time), TTFT SLO attainment {:.2}%, {} dropped, {} scale events",
                r.name,
                m["replica_seconds"].as_f64().unwrap_or(f64::NAN) / 3600.0,
                m["slo_attainment"].as_f64().unwrap_or(f64::NAN) * 100.0,
                m["requests_dropped"],
                m["scale_ups"].as_u64().unwrap_or(0) + m["scale_downs"].as_u64().unwrap_or(0),
            )
        })
        .chain(std::iter::once(llmscaler_loadmodel::ATTRIBUTION.to_string()))
        .collect();
    let footer_height = 22 * footer.len() as u32 + 10;
    let (body, foot) = root.split_vertically(SIZE.1 - footer_height);
    let body = body.titled(
        "llmscaler and KEDA on the same trace (Azure conversation trace, same emulator)",
        ("sans-serif", 24),
    )?;
    let (top, bottom) = body.split_vertically((SIZE.1 - footer_height) * 3 / 5);
    let minutes = |t: f64| t / 60.0;
    let t_end = runs
        .iter()
        .filter_map(|r| r.samples.last())
        .map(|s| minutes(s.t_s))
        .fold(1.0, f64::max);
    let max_replicas = runs
        .iter()
        .flat_map(|r| {
            r.samples
                .iter()
                .map(|s| f64::from(s.replicas.max(s.ready)))
                .chain(r.predicted.iter().map(|p| p.1))
        })
        .fold(1.0, f64::max);
    let mut chart = ChartBuilder::on(&top)
        .caption(
            "replicas: spec.replicas (thick), Ready (thin), the offline replay's spec.replicas (dashed)",
            ("sans-serif", 20),
        )
        .margin(8)
        .x_label_area_size(28)
        .y_label_area_size(50)
        .build_cartesian_2d(0.0..t_end, 0.0..max_replicas * 1.15 + 0.5)?;
    chart.configure_mesh().x_desc("trace time (min)").draw()?;
    for run in runs {
        let color = run.color;
        chart
            .draw_series(LineSeries::new(
                llmscaler::simulate::plot::step_points(&run.samples, |s| {
                    (minutes(s.t_s), f64::from(s.replicas))
                }),
                color.stroke_width(3),
            ))?
            .label(format!("{} spec.replicas", run.name))
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], color));
        chart
            .draw_series(LineSeries::new(
                llmscaler::simulate::plot::step_points(&run.samples, |s| {
                    (minutes(s.t_s), f64::from(s.ready))
                }),
                color.mix(0.5).stroke_width(1),
            ))?
            .label(format!("{} Ready", run.name))
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], color.mix(0.5)));
        if !run.predicted.is_empty() {
            let mut points =
                llmscaler::simulate::plot::step_points(&run.predicted, |&(t, r)| (minutes(t), r));
            if let Some(&(_, last)) = run.predicted.last() {
                points.push((t_end, last));
            }
            chart
                .draw_series(DashedLineSeries::new(points, 6, 4, color.stroke_width(2)))?
                .label(format!("{} replay", run.name))
                .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], color));
        }
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperLeft)
        .border_style(BLACK)
        .background_style(WHITE.mix(0.8))
        .draw()?;

    // The load: the same trace in both runs; the llmscaler run's samples.
    let load = &runs[0].samples;
    let max_rate = load.iter().map(|s| s.requests_per_s).fold(1.0, f64::max);
    let mut chart = ChartBuilder::on(&bottom)
        .caption("arrivals (requests per trace second)", ("sans-serif", 20))
        .margin(8)
        .x_label_area_size(28)
        .y_label_area_size(50)
        .build_cartesian_2d(0.0..t_end, 0.0..max_rate * 1.1)?;
    chart.configure_mesh().x_desc("trace time (min)").draw()?;
    chart.draw_series(LineSeries::new(
        load.iter().map(|s| (minutes(s.t_s), s.requests_per_s)),
        RGBColor(120, 120, 120).stroke_width(2),
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
