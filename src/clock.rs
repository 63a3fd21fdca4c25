//! The one place that reads time.
//!
//! Every instant of an exchange is a raw `quanta` reading (TSC ticks where the CPU has an
//! invariant TSC, otherwise the OS monotonic clock in nanoseconds). Raw readings are cheap
//! (~10 ns) and are converted to nanoseconds once, when an exchange is recorded, so the hot
//! path never pays for scaling.

use std::sync::OnceLock;

/// A raw clock reading. Only differences of two ticks mean anything; convert with
/// [`nanos_between`].
pub type Tick = u64;

fn clock() -> &'static quanta::Clock {
    static CLOCK: OnceLock<quanta::Clock> = OnceLock::new();
    CLOCK.get_or_init(quanta::Clock::new)
}

/// Reads the clock now.
#[inline]
pub fn now() -> Tick {
    clock().raw()
}

/// Nanoseconds from `start` to `end`; zero when `end` is not after `start`, so a phase is
/// never negative even if two instants were taken on cores whose counters disagree slightly.
#[inline]
pub fn nanos_between(start: Tick, end: Tick) -> u64 {
    clock().delta_as_nanos(start, end)
}

/// Which source the clock runs on: `"tsc"` or `"os"`. Reported in the startup log line and
/// in `phasescope_build_info{clock}` so that a reader knows how fine the timings are.
pub fn source() -> &'static str {
    static SOURCE: OnceLock<&'static str> = OnceLock::new();
    SOURCE.get_or_init(|| {
        // quanta chooses its source at construction and exposes the choice only through
        // its Debug form ("Counter" = TSC, "Monotonic" = the OS clock).
        if format!("{:?}", clock()).contains("Counter") {
            "tsc"
        } else {
            "os"
        }
    })
}

/// Warms the clock up (the TSC calibration takes a few milliseconds) so that the first
/// exchange does not pay for it.
pub fn init() {
    let _ = source();
    let _ = now();
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ticks_convert_to_wall_time() {
        init();
        let a = now();
        std::thread::sleep(std::time::Duration::from_millis(20));
        let b = now();
        let ns = nanos_between(a, b);
        assert!(ns >= 20_000_000, "slept 20 ms, measured {ns} ns");
        assert_eq!(nanos_between(b, a), 0);
        assert!(matches!(source(), "tsc" | "os"));
    }
}
