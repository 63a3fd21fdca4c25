//! A sampling rate that adapts to a budget of samples per second of the whole process.
//!
//! At a fixed rate a busy server pays for every sample (997 Hz per thread: +2.9 µs a
//! request on Webdis, against +1.2 µs at 97 Hz) and an idle one gives too few to read. With
//! a budget, the period is the configured one times a power of two: doubled while the
//! process gives more than the budget, halved back while it gives under a third of it.
//! Powers of two keep the counts exact: a sample taken at `2^k` times the period counts
//! `2^k` ([`Rate::weight`]), so the samples stay in units of the configured period and
//! every share, CPU per request and pprof weight reads them as before, whatever the rate
//! did in the window.
//!
//! One controller for every sampler: the native profiler reopens its perf events with the
//! new period, the PHP and Python frame samplers change the period of the CPU-clock
//! events that pace them (or the PHP sampler's timer tick); all three count a sample
//! [`Rate::weight`] times and report that weight as the delta's `period_multiple`.

/// `PERF_EVENT_IOC_PERIOD`: `_IOW('$', 4, u64)` in the generic ioctl encoding (x86-64,
/// arm64, riscv64). The argument is a pointer to the new period: the ioctl wrapper of the
/// perf crates we use takes it by value, and perf-event2 has no method for it.
const PERF_EVENT_IOC_PERIOD: libc::c_ulong =
    (1 << 30) | (8 << 16) | ((b'$' as libc::c_ulong) << 8) | 4;

/// Sets the period of an open sampling event, effective at once: the kernel restarts the
/// event's count (for a CPU clock, its timer) at the new period, so the first record
/// at it comes a whole new period later. The frame samplers change their pacing this way
/// rather than reopening the events (the native profiler reopens its own, whose buffers
/// also depend on the stack copy's size): no record is lost, no descriptor changes, and
/// the records already in the ring, drained right after the call, are all of the old
/// period, which is how they are counted.
pub fn set_period(event: &impl std::os::fd::AsRawFd, period_ns: u64) -> std::io::Result<()> {
    let mut period = period_ns.max(1);
    // SAFETY: a valid descriptor, and a pointer to a u64 the call only reads.
    let rc = unsafe { libc::ioctl(event.as_raw_fd(), PERF_EVENT_IOC_PERIOD as _, &mut period) };
    if rc < 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

/// The period is at most this power of two times the configured one (997 Hz → 31 Hz).
pub const MAX_SHIFT: u32 = 5;

/// Under this share of the budget the period halves (with some margin below the budget
/// the doubling aims for, so the rate does not swing at each collect).
const UNDER: f64 = 1.0 / 3.0;

/// The controller of one process's rate.
#[derive(Debug, Clone)]
pub struct Rate {
    /// Samples per second the whole process may give; 0: the configured rate, fixed.
    budget: u32,
    /// The period is the configured one times `2^shift`.
    shift: u32,
}

impl Rate {
    pub fn new(budget: u32) -> Rate {
        Rate { budget, shift: 0 }
    }

    /// What a sample taken now counts, in periods of the configured rate.
    pub fn weight(&self) -> u64 {
        1 << self.shift
    }

    pub fn shift(&self) -> u32 {
        self.shift
    }

    /// The shift the events really have (they could not be reopened with another).
    pub fn set_shift(&mut self, shift: u32) {
        self.shift = shift;
    }

    /// After `taken` samples in `seconds`: the shift to reopen the events with, when it
    /// changes.
    pub fn next(&mut self, taken: u64, seconds: f64) -> Option<u32> {
        if self.budget == 0 || seconds <= 0.0 {
            return None;
        }
        let per_second = taken as f64 / seconds;
        let budget = f64::from(self.budget);
        let mut shift = self.shift;
        if per_second > budget {
            // Enough doublings to come under the budget at once.
            let over = (per_second / budget).log2().ceil() as u32;
            shift = (shift + over.max(1)).min(MAX_SHIFT);
        } else if per_second < budget * UNDER && shift > 0 {
            // Halve while twice the rate still stays under the budget.
            let under = (budget / per_second.max(1e-9)).log2().floor() as u32;
            shift = shift.saturating_sub(under.saturating_sub(1).max(1));
        }
        (shift != self.shift).then(|| {
            self.shift = shift;
            shift
        })
    }
}

/// A profiler's side of the rate: the configured frequency, the controller, and when the
/// last collect was, so that each collect turns the samples it took into the next shift.
/// The native, PHP and Python profilers each hold one.
#[derive(Debug, Clone)]
pub struct Adaptive {
    frequency_hz: u32,
    rate: Rate,
    /// When the rate was last decided, and the samples taken since.
    last_collect: std::time::Instant,
    taken_since: u64,
}

/// The shortest stretch of samples the rate is decided over: under the production
/// collects' 1 s, so that each of them decides.
pub const DECIDE_OVER: std::time::Duration = std::time::Duration::from_millis(900);

impl Adaptive {
    /// At `frequency_hz`, fixed until [`Self::set_budget`].
    pub fn new(frequency_hz: u32) -> Adaptive {
        Adaptive {
            frequency_hz,
            rate: Rate::new(0),
            last_collect: std::time::Instant::now(),
            taken_since: 0,
        }
    }

    /// Samples per second the process may give; 0 keeps the configured rate.
    pub fn set_budget(&mut self, samples_per_second: u32) {
        self.rate = Rate::new(samples_per_second);
    }

    /// Samples per second of a thread's CPU now: the configured rate over the period's
    /// multiple.
    pub fn rate_hz(&self) -> f64 {
        f64::from(self.frequency_hz) / self.rate.weight() as f64
    }

    /// What a sample taken now counts ([`Rate::weight`]): the delta's `period_multiple`.
    pub fn weight(&self) -> u64 {
        self.rate.weight()
    }

    pub fn shift(&self) -> u32 {
        self.rate.shift()
    }

    /// The shift the sampler really has (it could not apply another, or not yet).
    pub fn set_shift(&mut self, shift: u32) {
        self.rate.set_shift(shift);
    }

    /// At a collect that took `taken` samples since the last one: the shift to sample at
    /// next, when it changes.
    ///
    /// The samples are added up over at least [`DECIDE_OVER`] before the rate moves:
    /// collects a tenth of a second apart (the demo's) moved it at nearly every one, and
    /// each change restarts the clocks of the process's threads (a thread's partial period
    /// is lost), which left the demo's samples covering 38 % of its CPU.
    pub fn collected(&mut self, taken: u64) -> Option<u32> {
        self.taken_since += taken;
        let seconds = self.last_collect.elapsed().as_secs_f64();
        if seconds < DECIDE_OVER.as_secs_f64() {
            return None;
        }
        self.last_collect = std::time::Instant::now();
        self.rate
            .next(std::mem::take(&mut self.taken_since), seconds)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_busy_process_is_sampled_less_and_an_idle_one_back_at_the_rate() {
        let mut r = Rate::new(80);
        // One core at 997 Hz: 997 samples a second, over 12 times the budget: 16× the
        // period, 62 Hz.
        assert_eq!(r.next(997, 1.0), Some(4));
        assert_eq!(r.weight(), 16);
        // 62 a second is within the budget: it stays.
        assert_eq!(r.next(62, 1.0), None);
        // Two cores: 125 a second, over: 32×, the most.
        assert_eq!(r.next(125, 1.0), Some(5));
        assert_eq!(r.next(500, 1.0), None, "at most {MAX_SHIFT}");
        // Idle: 2 a second is a fortieth of the budget: back down by 4 doublings.
        assert_eq!(r.next(2, 1.0), Some(1));
        assert_eq!(r.next(0, 1.0), Some(0));
        assert_eq!(r.next(0, 1.0), None);
    }

    #[test]
    fn no_budget_keeps_the_rate() {
        let mut r = Rate::new(0);
        assert_eq!(r.next(100_000, 1.0), None);
        assert_eq!(r.weight(), 1);
    }
}
