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

/// The tick `after` past `since`: deadlines are kept as ticks, so that checking one costs a
/// clock read and a comparison, with no conversion on the way.
#[inline]
pub fn after(since: Tick, after: std::time::Duration) -> Tick {
    let nanos = u64::try_from(after.as_nanos()).unwrap_or(u64::MAX);
    since.saturating_add(ticks_in(nanos))
}

/// How many ticks `nanos` nanoseconds last.
#[inline]
fn ticks_in(nanos: u64) -> u64 {
    // quanta scales ticks to nanoseconds with a fixed factor; this is its inverse, read
    // once from the nanoseconds of a long span of ticks, as a 32.32 fixed-point factor.
    static TICKS_PER_NANO: OnceLock<u128> = OnceLock::new();
    const SPAN: u64 = 1 << 40;
    let factor = *TICKS_PER_NANO.get_or_init(|| {
        let span_nanos = nanos_between(0, SPAN).max(1);
        (u128::from(SPAN) << 32) / u128::from(span_nanos)
    });
    u64::try_from((u128::from(nanos) * factor) >> 32).unwrap_or(u64::MAX)
}

/// An instant that may not have been taken yet: an exchange's timeline is filled in as
/// it happens, and a phase exists only when both its instants were taken. Reading one
/// gives an `Option`, so no instant is read as if it were taken when it was not (the
/// timeline used to be plain ticks with 0 for "not taken", tested by hand at each use).
///
/// Inside, still a tick with 0 for "not taken" (the clock never reads 0: quanta's counter
/// and the monotonic clock both count from far below now), so that taking an instant is
/// one store on the relay's path; only this type looks at the 0.
///
/// Instants compare in time order, and one not taken comes before every taken one.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct At(Tick);

impl At {
    /// Not taken.
    pub const UNSET: At = At(0);

    /// Taken at `t`.
    #[inline]
    pub fn tick(t: Tick) -> At {
        At(t)
    }

    /// Taken now.
    #[inline]
    pub fn now() -> At {
        At(now())
    }

    /// The tick, if taken.
    #[inline]
    pub fn get(self) -> Option<Tick> {
        (self.0 != 0).then_some(self.0)
    }

    #[inline]
    pub fn is_set(self) -> bool {
        self.0 != 0
    }

    /// Takes `t` unless it was taken already.
    #[inline]
    pub fn set_once(&mut self, t: Tick) {
        if self.0 == 0 {
            self.0 = t;
        }
    }

    /// Nanoseconds from this instant to `end`, when both were taken.
    #[inline]
    pub fn to(self, end: At) -> Option<u64> {
        Some(nanos_between(self.get()?, end.get()?))
    }
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

/// This thread's CPU time in nanoseconds: the tests that burn a known CPU time measure it
/// with this.
#[cfg(test)]
pub(crate) fn thread_cpu_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: a valid clock id and a pointer to a timespec on the stack.
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
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

    #[test]
    fn a_duration_after_a_tick_is_that_many_nanoseconds_later() {
        init();
        let t = now();
        for d in [1_000u64, 1_000_000, 30_000_000_000, 3_600_000_000_000] {
            let later = after(t, std::time::Duration::from_nanos(d));
            let back = nanos_between(t, later);
            // Two conversions, each rounding down: off by at most a few nanoseconds per
            // second of span.
            assert!(
                back <= d && d - back <= 2 + d / 1_000_000_000 * 2,
                "{d} ns -> {back} ns"
            );
        }
        assert_eq!(after(t, std::time::Duration::MAX), u64::MAX);
    }
}
