//! `cargo run --release -p llmscaler-loadmodel --example saturation -- TRACE [PROFILE]`: the
//! requests per second one replica of the load model completes at full load on a trace's
//! request mix ([`llmscaler_loadmodel::calibration::saturated_throughput`]), for the default
//! parameters or a model profile file (docs/load-model.md, "Model profiles"). Prints one
//! number; exit 2 on a bad argument or file.

use std::process::ExitCode;

use llmscaler_loadmodel::{Params, Profile, calibration, trace};

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let (trace_path, profile) = match args.as_slice() {
        [t] => (t, None),
        [t, p] => (t, Some(p)),
        _ => return fail("usage: saturation TRACE [PROFILE]"),
    };
    let requests = match std::fs::File::open(trace_path)
        .map_err(|e| e.to_string())
        .and_then(|f| trace::read_azure(f).map_err(|e| e.to_string()))
    {
        Ok(r) => r,
        Err(e) => return fail(&format!("{trace_path}: {e}")),
    };
    let params = match profile {
        None => Params::default(),
        Some(p) => match Profile::from_file(std::path::Path::new(p)) {
            Ok(profile) => profile.apply(Params::default()),
            Err(e) => return fail(&e.to_string()),
        },
    };
    match calibration::saturated_throughput(&requests, params) {
        Some(mu) => {
            println!("{mu:.4}");
            ExitCode::SUCCESS
        }
        None => fail("the queue emptied within the first 60 s: too few requests"),
    }
}

fn fail(why: &str) -> ExitCode {
    eprintln!("saturation: {why}");
    ExitCode::from(2)
}
