//! `simulate --plot FILE.svg|FILE.png`: replicas, desired and ready over time (top panel) and
//! each metric (bottom panel), drawn with plotters.
//!
//! The drawing needs the `plot` cargo feature (on by default). The operator's image is built
//! without it, so that it links no plotting or font library; there [`draw`] answers
//! [`PlotError::Unsupported`]. [`step_points`] is plain arithmetic and always there (the demo's
//! picture uses it too).

use std::path::Path;

use super::Step;

/// Why a plot was not written.
#[derive(Debug, thiserror::Error)]
pub enum PlotError {
    /// The extension is neither `.svg` nor `.png`.
    #[error("{0}: the plot file must end in .svg or .png")]
    Format(String),
    /// This binary was built without the `plot` feature (the operator's image build).
    #[error(
        "{0}: this llmscaler was built without the `plot` feature \
         (build with `cargo build --features plot` to draw plots)"
    )]
    Unsupported(String),
    /// plotters failed (I/O or font).
    #[error("drawing {path}: {message}")]
    Draw {
        /// The output path.
        path: String,
        /// plotters' error text.
        message: String,
    },
}

/// The picture formats, by file extension.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Format {
    Svg,
    Png,
}

/// Whether [`draw`] can write `path` at all: a known extension, and a binary built with the
/// `plot` feature. Lets a caller refuse `--plot` before the replay rather than after it.
///
/// # Errors
/// [`PlotError::Format`] for another extension, [`PlotError::Unsupported`] when built without
/// the `plot` feature.
pub fn check_target(path: &Path) -> Result<(), PlotError> {
    format_of(path).map(|_| ())
}

/// The format of `path` by its extension, if this binary can draw it.
fn format_of(path: &Path) -> Result<Format, PlotError> {
    let format = match path.extension().and_then(|e| e.to_str()) {
        Some("svg") => Format::Svg,
        Some("png") => Format::Png,
        _ => return Err(PlotError::Format(path.display().to_string())),
    };
    if cfg!(feature = "plot") {
        Ok(format)
    } else {
        Err(PlotError::Unsupported(path.display().to_string()))
    }
}

/// Draws the replay to `path` (format chosen by extension).
///
/// # Errors
/// [`PlotError::Format`] for another extension, [`PlotError::Unsupported`] when built without
/// the `plot` feature, [`PlotError::Draw`] when plotters fails.
pub fn draw(path: &Path, steps: &[Step], metric_names: &[String]) -> Result<(), PlotError> {
    let format = format_of(path)?;
    #[cfg(feature = "plot")]
    {
        drawing::draw(path, format, steps, metric_names).map_err(|message| PlotError::Draw {
            path: path.display().to_string(),
            message,
        })
    }
    #[cfg(not(feature = "plot"))]
    {
        // format_of has already refused: without the feature there is nothing to draw with.
        let _ = (format, steps, metric_names);
        Err(PlotError::Unsupported(path.display().to_string()))
    }
}

/// The plotters part, only with the `plot` feature.
#[cfg(feature = "plot")]
mod drawing {
    use std::path::Path;

    use plotters::coord::Shift;
    use plotters::prelude::*;

    use super::{Format, Step, step_points};

    const SIZE: (u32, u32) = (1200, 800);

    /// A replica line: its legend label, colour and the value it reads from a step.
    type Series = (&'static str, RGBColor, fn(&Step) -> i32);

    /// Draws to `path` in `format`; the error is plotters' text.
    pub(super) fn draw(
        path: &Path,
        format: Format,
        steps: &[Step],
        metric_names: &[String],
    ) -> Result<(), String> {
        let text = |e: &dyn std::fmt::Display| e.to_string();
        match format {
            Format::Svg => {
                let root = SVGBackend::new(path, SIZE).into_drawing_area();
                draw_on(&root, steps, metric_names).map_err(|e| text(&e))?;
                root.present().map_err(|e| text(&e))
            }
            Format::Png => {
                let root = BitMapBackend::new(path, SIZE).into_drawing_area();
                draw_on(&root, steps, metric_names).map_err(|e| text(&e))?;
                root.present().map_err(|e| text(&e))
            }
        }
    }

    type DrawResult<DB> = Result<(), DrawingAreaErrorKind<<DB as DrawingBackend>::ErrorType>>;

    fn draw_on<DB: DrawingBackend>(
        root: &DrawingArea<DB, Shift>,
        steps: &[Step],
        metric_names: &[String],
    ) -> DrawResult<DB> {
        root.fill(&WHITE)?;
        let (top, bottom) = root.split_vertically(SIZE.1 / 2);
        let t_end = steps.last().map_or(1.0, |s| s.t_seconds).max(1.0);

        let max_replicas = steps
            .iter()
            .map(|s| s.replicas.max(s.desired).max(s.ready))
            .max()
            .unwrap_or(1)
            .max(1);
        let mut chart = ChartBuilder::on(&top)
            .caption("replicas", ("sans-serif", 22))
            .margin(10)
            .x_label_area_size(30)
            .y_label_area_size(50)
            .build_cartesian_2d(0.0..t_end, 0.0..f64::from(max_replicas) * 1.1 + 0.5)?;
        chart.configure_mesh().x_desc("t (s)").draw()?;
        let series: [Series; 3] = [
            ("spec.replicas", BLUE, |s| s.replicas),
            ("desiredReplicas", RED, |s| s.desired),
            ("ready", GREEN, |s| s.ready),
        ];
        for (label, color, get) in series {
            chart
                .draw_series(LineSeries::new(
                    step_points(steps, |s| (s.t_seconds, f64::from(get(s)))),
                    color.stroke_width(2),
                ))?
                .label(label)
                .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], color));
        }
        chart
            .configure_series_labels()
            .border_style(BLACK)
            .background_style(WHITE.mix(0.8))
            .draw()?;

        let finite = steps
            .iter()
            .flat_map(|s| s.values.iter())
            .filter(|v| v.is_finite());
        let (lo, hi) = finite.fold((0.0f64, 1e-9f64), |(lo, hi), &v| (lo.min(v), hi.max(v)));
        let mut chart = ChartBuilder::on(&bottom)
            .caption("metrics", ("sans-serif", 22))
            .margin(10)
            .x_label_area_size(30)
            .y_label_area_size(50)
            .build_cartesian_2d(0.0..t_end, lo..hi * 1.1)?;
        chart.configure_mesh().x_desc("t (s)").draw()?;
        for (i, name) in metric_names.iter().enumerate() {
            let color = Palette99::pick(i + 3).to_rgba();
            let points: Vec<(f64, f64)> = steps
                .iter()
                .filter_map(|s| {
                    s.values
                        .get(i)
                        .filter(|v| v.is_finite())
                        .map(|v| (s.t_seconds, *v))
                })
                .collect();
            chart
                .draw_series(LineSeries::new(points, color.stroke_width(2)))?
                .label(name.as_str())
                .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], color));
        }
        chart
            .configure_series_labels()
            .border_style(BLACK)
            .background_style(WHITE.mix(0.8))
            .draw()?;
        Ok(())
    }
}

/// A step line through `items` in time order: each `(x, y)` holds until the next item's `x`.
/// Shared by the `simulate` plot and the demo's plot (`e2e/src/bin/llmscaler-demo/plot.rs`).
pub fn step_points<T>(items: &[T], point: impl Fn(&T) -> (f64, f64)) -> Vec<(f64, f64)> {
    let mut points = Vec::with_capacity(items.len() * 2);
    for (i, item) in items.iter().enumerate() {
        let (x, y) = point(item);
        points.push((x, y));
        let next = items.get(i + 1).map_or(x, |n| point(n).0);
        points.push((next, y));
    }
    points
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn check_target_refuses_other_extensions() {
        let err = check_target(Path::new("replay.jpg")).expect_err("not svg or png");
        assert_eq!(
            err.to_string(),
            "replay.jpg: the plot file must end in .svg or .png"
        );
    }

    #[cfg(feature = "plot")]
    #[test]
    fn check_target_accepts_svg_and_png_with_the_feature() {
        check_target(Path::new("replay.svg")).expect("svg");
        check_target(Path::new("replay.png")).expect("png");
    }

    #[cfg(not(feature = "plot"))]
    #[test]
    fn without_the_feature_every_plot_is_unsupported() {
        for path in ["replay.svg", "replay.png"] {
            let err = check_target(Path::new(path)).expect_err("no plot feature");
            assert!(matches!(err, PlotError::Unsupported(_)), "{err}");
            let err = draw(Path::new(path), &[], &[]).expect_err("no plot feature");
            assert!(matches!(err, PlotError::Unsupported(_)), "{err}");
        }
    }

    #[test]
    fn step_points_hold_each_value_until_the_next_time() {
        let points = step_points(&[(0.0, 1.0), (15.0, 3.0), (30.0, 2.0)], |&(t, v)| (t, v));
        assert_eq!(
            points,
            [
                (0.0, 1.0),
                (15.0, 1.0),
                (15.0, 3.0),
                (30.0, 3.0),
                (30.0, 2.0),
                (30.0, 2.0)
            ]
        );
    }
}
