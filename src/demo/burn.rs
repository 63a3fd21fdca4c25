//! The demo upstream's CPU work: a known amount of CPU per request, spent in functions
//! named the way a profiler finds them in real servers, so that the inside-the-upstream
//! section of the demo's report has something true to show.
//!
//! - [`http_parser_demo_execute`] stands for the server's request parser: its name starts
//!   with `http_parser_`, which the built-in `http_parser` component rule recognises (the
//!   rule reads symbol names; a Rust function's name would carry its module path, so it is
//!   exported unmangled).
//! - [`demo_backend_query`] stands for the application's own work on a backend's answer
//!   (the demo's config names it the `backend` component).
//!
//! The burn is a fixed number of loop iterations per microsecond, calibrated once at start
//! ([`Burn::calibrate`]): the fastest of a few timed runs, so a run slowed by preemption
//! does not make later burns longer. On a busy machine the wall time of a burn grows, its
//! CPU time does not; the loop makes no system call, so its samples stay in the function.

use std::hint::black_box;
use std::time::{Duration, Instant};

/// How long one calibration run lasts at least, and how many runs are timed.
const CALIBRATION_RUN: Duration = Duration::from_micros(500);
const CALIBRATION_RUNS: usize = 7;

/// What one request costs the demo upstream's CPU.
#[derive(Debug, Clone, Copy)]
pub struct Burn {
    /// Loop iterations per microsecond of CPU, measured at start.
    per_us: f64,
    /// Parser CPU per request.
    pub parser: Duration,
    /// Backend-side CPU per backend call.
    pub backend: Duration,
}

impl Burn {
    /// Measures the loop's speed on this machine now: runs long enough to time well
    /// ([`CALIBRATION_RUN`]), the fastest of [`CALIBRATION_RUNS`].
    pub fn calibrate(parser: Duration, backend: Duration) -> Burn {
        let timed = |iterations: u64| {
            let start = Instant::now();
            black_box(spin::<PARSER_INCREMENT>(iterations, 1));
            start.elapsed()
        };
        let mut iterations = BLOCK;
        while timed(iterations) < CALIBRATION_RUN && iterations < u64::MAX / 4 {
            iterations *= 2;
        }
        let fastest = (0..CALIBRATION_RUNS)
            .map(|_| timed(iterations))
            .min()
            .unwrap_or(CALIBRATION_RUN);
        let per_us = iterations as f64 / (fastest.as_secs_f64() * 1e6).max(1e-3);
        Burn {
            per_us: per_us.max(1.0),
            parser,
            backend,
        }
    }

    fn iterations(&self, d: Duration) -> u64 {
        (d.as_secs_f64() * 1e6 * self.per_us) as u64
    }

    /// Parses a request head of `len` bytes: the parser's CPU.
    pub fn parse(&self, len: usize) -> u64 {
        http_parser_demo_execute(len as u64, self.iterations(self.parser))
    }

    /// The application's CPU around one backend call.
    pub fn backend(&self, key: u64) -> u64 {
        demo_backend_query(key, self.iterations(self.backend))
    }
}

/// Steps of the loop between two [`black_box`] calls.
const BLOCK: u64 = 64;
/// The loop's additive constants, one per burn function (see [`spin`]).
const PARSER_INCREMENT: u64 = 1_442_695_040_888_963_407;
const BACKEND_INCREMENT: u64 = 1_013_904_223;

/// The loop both burns run, written so that it stays in its caller in any build: no
/// iterator (whose `next` a debug build would call, moving the samples out of the named
/// function), integer steps that are always inlined, and one `black_box` per block, which
/// an optimised build cannot see through (it may fold a block's steps into one; the
/// calibration times whatever the build made of the loop).
///
/// `INCREMENT` differs between the two callers so that their machine code differs too:
/// identical functions would be folded into one by the optimiser or the linker, and
/// every sample of either would then carry the one name left.
#[inline(always)]
fn spin<const INCREMENT: u64>(iterations: u64, seed: u64) -> u64 {
    let mut x = seed | 1;
    let mut done = 0;
    while done < iterations {
        let mut step = 0;
        while step < BLOCK {
            x = x
                .wrapping_mul(6_364_136_223_846_793_005)
                .wrapping_add(INCREMENT);
            step += 1;
        }
        x = black_box(x);
        done += BLOCK;
    }
    x
}

/// The simulated request parser (see the module's note on its name).
#[no_mangle]
#[inline(never)]
pub extern "C" fn http_parser_demo_execute(len: u64, iterations: u64) -> u64 {
    spin::<PARSER_INCREMENT>(iterations, len)
}

/// The simulated application work on a backend call.
#[no_mangle]
#[inline(never)]
pub extern "C" fn demo_backend_query(key: u64, iterations: u64) -> u64 {
    spin::<BACKEND_INCREMENT>(iterations, key)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_burn_lasts_about_what_it_was_calibrated_for() {
        let burn = Burn::calibrate(Duration::from_micros(400), Duration::from_micros(400));
        // The fastest of several runs: a burn is never much shorter than asked (it may be
        // longer on a busy machine, which is not what this checks).
        let fastest = (0..5)
            .map(|_| {
                let start = Instant::now();
                black_box(burn.parse(100));
                start.elapsed()
            })
            .min()
            .unwrap_or_default();
        assert!(
            fastest >= Duration::from_micros(200),
            "a 400 µs burn took {fastest:?}"
        );
    }
}
