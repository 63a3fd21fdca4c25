//! The memory routes cost, and the ceiling `check-config` and `run` warn past
//! (docs/deploy.md, "Memory").
//!
//! Each route in use keeps its series on every worker thread that served it, and a scrape
//! or a snapshot formats all of them: the process's memory and `/metrics` grow with the
//! routes, not with the traffic. `max_routes` bounds them per tap, up to 65,534, where
//! `/metrics` would be gigabytes; nothing said so. The figures below were measured
//! (release build, default buckets, an HTTP tap on 2 workers: `scripts/route_memory.py
//! target/release/phasescope 64 256 2000`)
//! and the ceiling is where `/metrics` still scrapes in well under Prometheus's default
//! 10 s timeout on a loaded 2-core machine.

use super::Config;

/// Routes in use, over all taps, past which `check-config` and `run` warn: `/metrics`
/// is then about 14 MiB (0.2–0.6 s to scrape here) and the RSS peaks near 150 MiB.
pub const ROUTES_CEILING: usize = 256;
/// `/metrics` bytes per route with the default buckets (measured: 55.2–55.9 KiB at 64,
/// 256 and 2,000 routes).
pub const METRICS_BYTES_PER_ROUTE: u64 = 56 * 1024;
/// The RSS at a scrape's and a snapshot's peak: a base and so much per route (measured:
/// 147 MiB at 256 routes, 527 MiB at 2,000; of the 224 KiB, about 120 are the series
/// themselves, the rest their formatting).
pub const RSS_BASE_BYTES: u64 = 96 << 20;
pub const RSS_BYTES_PER_ROUTE: u64 = 224 * 1024;
/// The process's stated ceiling with `ROUTES_CEILING` routes in use, scrapes and a
/// snapshot included: the estimate above (152 MiB) with room for a debug build's
/// (164–173 MiB measured) and the allocator's.
pub const PROCESS_RSS_CEILING: u64 = 224 << 20;
/// Bucket lines of a phase histogram with the default buckets (`le="0"` … `+Inf`).
const DEFAULT_BUCKET_LINES: u64 = 62;

/// What the config's routes would cost at their maximum, when past the ceiling.
pub fn warnings(config: &Config) -> Vec<String> {
    if !config.metrics.enabled {
        return Vec::new();
    }
    let routes: usize = config.taps.iter().map(|t| t.max_routes).sum();
    let lines = if config.metrics.buckets.is_empty() {
        DEFAULT_BUCKET_LINES
    } else {
        config.metrics.buckets.len() as u64 + 2
    };
    // The exposition grows with the bucket lines (and a little with the rest).
    let per_route = METRICS_BYTES_PER_ROUTE * (lines + 3) / (DEFAULT_BUCKET_LINES + 3);
    let metrics = routes as u64 * per_route;
    if metrics <= ROUTES_CEILING as u64 * METRICS_BYTES_PER_ROUTE {
        return Vec::new();
    }
    let mib = |b: u64| b as f64 / f64::from(1 << 20);
    vec![format!(
        "the taps' max_routes allow {routes} routes, past the ceiling of {ROUTES_CEILING} (docs/deploy.md, Memory): with all of them in use /metrics is about {:.0} MiB and the RSS peaks near {:.0} MiB; lower max_routes, or fold paths into fewer routes (routes = \"regex\")",
        mib(metrics),
        mib(RSS_BASE_BYTES + routes as u64 * RSS_BYTES_PER_ROUTE),
    )]
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(max_routes: &[usize], buckets: Vec<f64>) -> Config {
        let taps: String = max_routes
            .iter()
            .enumerate()
            .map(|(i, n)| {
                format!("[[tap]]\nname = \"t{i}\"\nlisten = \"127.0.0.1:{}\"\nupstream = \"127.0.0.1:1\"\nmax_routes = {n}\n", 20000 + i)
            })
            .collect();
        let mut c = Config::from_toml_str(&taps, std::path::Path::new("t.toml")).unwrap();
        c.metrics.buckets = buckets;
        c
    }

    #[test]
    fn past_the_ceiling_over_all_taps_a_warning_says_what_it_costs() {
        assert!(warnings(&config(&[256], vec![])).is_empty());
        assert!(warnings(&config(&[128, 128], vec![])).is_empty());
        let w = warnings(&config(&[200, 200], vec![]));
        assert_eq!(w.len(), 1);
        assert!(
            w[0].contains("400 routes") && w[0].contains("22 MiB"),
            "{w:?}"
        );
        let w = warnings(&config(&[65_534], vec![]));
        assert!(w[0].contains("3584 MiB"), "{w:?}");
    }

    #[test]
    fn fewer_buckets_allow_more_routes() {
        let eight = vec![0.001, 0.002, 0.005, 0.01, 0.05, 0.1, 0.5, 1.0];
        assert!(warnings(&config(&[1000], eight)).is_empty());
        assert!(!warnings(&config(&[1000], vec![])).is_empty());
    }
}
