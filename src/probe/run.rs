//! One run of the probe, as its steps: check the options, build the requests, plan their
//! order, warm up, measure, fit, and summarize into the report.

use std::net::SocketAddr;
use std::time::Instant;

use anyhow::{bail, Context};

use super::fit::{self, Cell, Estimate, Fit};
use super::grid::{self, Shape};
use super::report::{CellSummary, Floor, Model, Pass, ProbeReport, Typical};
use super::{server_times, ProbeConn, ProbeOptions, Progress, Session, Timed};
use crate::rng::Rng;

/// Interval the report gives (the bootstrap's central 95 %).
const CONFIDENCE: f64 = 0.95;
/// Extra handshakes timed at the end, for the round-trip floor.
const EXTRA_CONNECTS: usize = 5;

/// Runs the probe against `options.target` and fits the result.
pub fn run(options: &ProbeOptions) -> anyhow::Result<ProbeReport> {
    crate::clock::init();
    validate(options)?;
    let started = Instant::now();
    let target = &options.target;
    let addr = target.resolve()?;
    let requests = Requests::build(options)?;
    let mut rng = Rng::new(options.seed);
    let plan = schedule(requests.heads.len(), options, &mut rng);

    let mut session = Session::open(addr)?;
    warm_up(&mut session, &requests, options)?;
    let measured = measure(&mut session, &requests.heads, &plan, options)?;
    let samples: Vec<Vec<f64>> = measured.all.iter().map(|t| server_times(t)).collect();
    let write_median: Vec<f64> = measured.all.iter().map(|t| median_write(t)).collect();
    time_handshakes(&mut session, addr)?;

    let cells: Vec<Cell> = requests
        .shapes
        .iter()
        .zip(&samples)
        .map(|(&shape, ttfb)| cell(shape, ttfb.clone()))
        .collect();
    let fitted = fit::fit(&cells, options.bootstrap, &mut rng)?;
    let passes = if options.repeat > 1 {
        fit_passes(&requests.shapes, &measured.by_pass, &mut rng)?
    } else {
        Vec::new()
    };
    let floor = floor(&session, &requests, &samples, &write_median);
    let typical = typical(&fitted, options);
    let cells = summaries(&requests.shapes, &samples, &write_median);
    Ok(ProbeReport {
        format: "phasescope-probe",
        format_version: 1,
        version: env!("CARGO_PKG_VERSION"),
        target: target.to_string(),
        seed: options.seed,
        grid: options.grid.to_string(),
        samples_per_cell: options.samples,
        skipped_cells: requests.skipped,
        requests: session.timed,
        failed: session.failed,
        reconnects: session.reconnects,
        statuses: session.statuses,
        elapsed_s: started.elapsed().as_secs_f64(),
        model: model(&fitted),
        floor,
        passes,
        typical,
        cells,
    })
}

/// Options no run can use.
fn validate(options: &ProbeOptions) -> anyhow::Result<()> {
    if options.samples == 0 {
        bail!("--samples must be at least 1");
    }
    if options.repeat == 0 {
        bail!("--repeat must be at least 1");
    }
    Ok(())
}

/// The heads a run sends: one per cell of the grid that can be built, then the minimal
/// request (request line and `Host`) last.
struct Requests {
    shapes: Vec<Shape>,
    skipped: Vec<Shape>,
    heads: Vec<Vec<u8>>,
    minimal_index: usize,
}

impl Requests {
    fn build(options: &ProbeOptions) -> anyhow::Result<Requests> {
        let target = &options.target;
        let (shapes, skipped) = options.grid.cells(&target.path, &target.authority);
        if shapes.len() < 3 {
            bail!(
                "the grid {} leaves {} cells that can be built for {} (need 3): use larger sizes or fewer fields",
                options.grid,
                shapes.len(),
                target
            );
        }
        let mut heads: Vec<Vec<u8>> = shapes
            .iter()
            .filter_map(|&shape| grid::build_head(&target.path, &target.authority, shape))
            .collect();
        let minimal_index = heads.len();
        heads.push(grid::minimal_head(&target.path, &target.authority));
        Ok(Requests {
            shapes,
            skipped,
            heads,
            minimal_index,
        })
    }

    fn minimal(&self) -> &[u8] {
        &self.heads[self.minimal_index]
    }
}

/// The order of the timed requests, as (pass, head): one shuffled pass over every cell
/// per repeat, the passes one after another, so that what drifts between them (the
/// machine's load, its clock) shows as their spread.
fn schedule(heads: usize, options: &ProbeOptions, rng: &mut Rng) -> Vec<(usize, usize)> {
    let mut plan: Vec<(usize, usize)> = Vec::new();
    for pass in 0..options.repeat {
        let mut one: Vec<(usize, usize)> = (0..heads)
            .flat_map(|i| std::iter::repeat_n((pass, i), options.samples))
            .collect();
        rng.shuffle(&mut one);
        plan.extend(one);
    }
    plan
}

/// Unmeasured requests: the minimal request, then every shape once, in turn, so that
/// the largest buffers get touched too.
fn warm_up(
    session: &mut Session,
    requests: &Requests,
    options: &ProbeOptions,
) -> anyhow::Result<()> {
    for i in 0..options.warmup {
        let head = if i % 2 == 0 {
            requests.minimal()
        } else {
            &requests.heads[(i / 2) % requests.heads.len()]
        };
        session
            .exchange(head)
            .with_context(|| format!("warming up against {}", options.target))?;
    }
    Ok(())
}

/// The timed exchanges of every head: all passes together, and each pass on its own
/// (filled with `--repeat` only).
struct Measured {
    all: Vec<Vec<Timed>>,
    by_pass: Vec<Vec<Vec<Timed>>>,
}

/// Sends the plan's requests one at a time, drawing the progress line.
fn measure(
    session: &mut Session,
    heads: &[Vec<u8>],
    plan: &[(usize, usize)],
    options: &ProbeOptions,
) -> anyhow::Result<Measured> {
    let mut all: Vec<Vec<Timed>> =
        vec![Vec::with_capacity(options.samples * options.repeat); heads.len()];
    let mut by_pass: Vec<Vec<Vec<Timed>>> =
        vec![vec![Vec::with_capacity(options.samples); heads.len()]; options.repeat];
    let mut progress = Progress::new(options.progress, plan.len());
    for (done, &(pass, i)) in plan.iter().enumerate() {
        if let Some(timed) = session.exchange(&heads[i])? {
            all[i].push(timed);
            if options.repeat > 1 {
                by_pass[pass][i].push(timed);
            }
        }
        progress.update(done + 1);
    }
    progress.finish();
    Ok(Measured { all, by_pass })
}

/// The median write of one head's exchanges: the client's own cost of sending it.
fn median_write(timed: &[Timed]) -> f64 {
    fit::median(&mut timed.iter().map(|t| t.write_ns as f64).collect::<Vec<_>>())
}

/// A few more handshakes, on connections of their own, for the round-trip floor.
fn time_handshakes(session: &mut Session, addr: SocketAddr) -> anyhow::Result<()> {
    for _ in 0..EXTRA_CONNECTS {
        let (_, connect_ns) = ProbeConn::connect(addr)
            .with_context(|| format!("connecting to {addr} to time the handshake"))?;
        session.connect_ns.push(connect_ns);
    }
    Ok(())
}

fn cell(shape: Shape, ttfb_ns: Vec<f64>) -> Cell {
    Cell {
        bytes: shape.bytes as f64,
        headers: shape.headers as f64,
        ttfb_ns,
    }
}

/// Each pass fitted on its own, point estimates only: the spread between passes is the
/// interval here.
fn fit_passes(
    shapes: &[Shape],
    by_pass: &[Vec<Vec<Timed>>],
    rng: &mut Rng,
) -> anyhow::Result<Vec<Pass>> {
    let mut passes = Vec::new();
    for pass in by_pass {
        let cells: Vec<Cell> = shapes
            .iter()
            .zip(pass)
            .map(|(&shape, timed)| cell(shape, server_times(timed)))
            .collect();
        let f = fit::fit(&cells, 0, rng)?;
        passes.push(Pass {
            a_ns: f.a.value,
            b_ns_per_byte: f.b.map(|e| e.value),
            c_ns_per_header: f.c.map(|e| e.value),
        });
    }
    Ok(passes)
}

fn model(fitted: &Fit) -> Model {
    Model {
        a_ns: fitted.a,
        b_ns_per_byte: fitted.b,
        c_ns_per_header: fitted.c,
        residual_ns: fitted.residual_ns,
        confidence: CONFIDENCE,
        bootstrap_replicates: fitted.replicates,
    }
}

/// The fitted plane applied to the typical request.
fn typical(fitted: &Fit, options: &ProbeOptions) -> Typical {
    let typical = options.typical;
    let (bytes, headers) = (typical.bytes as f64, typical.headers as f64);
    let size_cost: Estimate = fitted.derive(|_, b, c| b * bytes + c * headers);
    let ttfb = fitted.derive(|a, b, c| a + b * bytes + c * headers);
    let share = fitted.derive(|a, b, c| {
        let cost = b * bytes + c * headers;
        cost / (a + cost)
    });
    Typical {
        bytes: typical.bytes,
        headers: typical.headers,
        source: options.typical_source.clone(),
        size_cost_ns: size_cost,
        ttfb_ns: ttfb,
        share,
    }
}

/// What a request costs before any server work: the fastest handshake, the minimal
/// request's time to first byte and write.
fn floor(session: &Session, requests: &Requests, samples: &[Vec<f64>], writes: &[f64]) -> Floor {
    let minimal_samples = &mut samples[requests.minimal_index].clone();
    Floor {
        connect_rtt_min_ns: session
            .connect_ns
            .iter()
            .copied()
            .min()
            .map_or(f64::NAN, |n| n as f64),
        connects: session.connect_ns.len(),
        minimal_head_bytes: requests.minimal().len(),
        minimal_ttfb_min_ns: minimal_samples
            .iter()
            .copied()
            .fold(f64::INFINITY, f64::min),
        minimal_ttfb_median_ns: fit::median(minimal_samples),
        minimal_write_median_ns: writes[requests.minimal_index],
    }
}

/// Each cell's median and fastest time to first byte, and its median write.
fn summaries(shapes: &[Shape], samples: &[Vec<f64>], writes: &[f64]) -> Vec<CellSummary> {
    shapes
        .iter()
        .zip(samples.iter().zip(writes))
        .map(|(shape, (ttfb, &write_median_ns))| CellSummary {
            bytes: shape.bytes,
            headers: shape.headers,
            samples: ttfb.len(),
            median_ns: fit::median(&mut ttfb.clone()),
            min_ns: ttfb.iter().copied().fold(f64::INFINITY, f64::min),
            write_median_ns,
        })
        .collect()
}
