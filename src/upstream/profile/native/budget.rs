//! How many perf events the profiler may hold. Each event is a file descriptor of this
//! process, and the data path needs descriptors more than the profiler does: with
//! profiling on, the proxy serves as always (docs/deploy.md). An upstream of thousands of
//! threads gets its busiest [`MAX_SAMPLED_THREADS`] sampled, never one event per thread.

use std::fs;

/// Threads sampled at most, whatever the descriptor limit: the busiest ones.
pub const MAX_SAMPLED_THREADS: usize = 64;

/// The profiler's events are at most 1/`EVENT_SHARE` of RLIMIT_NOFILE (the admin server
/// holds at most an eighth: the data path keeps the rest).
const EVENT_SHARE: u64 = 16;

/// An event is opened only while 1/`FREE_RESERVE` of RLIMIT_NOFILE stays free after it:
/// when the data path is near its limit, the profiler samples fewer threads rather than
/// take the descriptors a client would need.
const FREE_RESERVE: u64 = 4;

/// The process's descriptors: its soft limit and how many are open.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Descriptors {
    pub limit: u64,
    /// `None` when /proc/self/fd cannot be listed: then only the share applies.
    pub open: Option<u64>,
}

impl Descriptors {
    /// This process's, now.
    pub fn now() -> Descriptors {
        Descriptors {
            limit: soft_limit(),
            open: open_descriptors(),
        }
    }

    /// How many events may be held in all, `held` of them open already (they count among
    /// the open descriptors and are not taken back).
    pub fn events(self, held: usize) -> usize {
        let share = usize::try_from(self.limit / EVENT_SHARE).unwrap_or(usize::MAX);
        let cap = MAX_SAMPLED_THREADS.min(share);
        let Some(open) = self.open else {
            return cap;
        };
        let reserve = self.limit / FREE_RESERVE;
        let spare = self.limit.saturating_sub(reserve).saturating_sub(open);
        cap.min(held.saturating_add(usize::try_from(spare).unwrap_or(usize::MAX)))
    }
}

/// RLIMIT_NOFILE's soft value; unreadable (never seen), the usual default of 1024.
fn soft_limit() -> u64 {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes the struct it is given and nothing else.
    let ok = unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) } == 0;
    if ok {
        lim.rlim_cur
    } else {
        1024
    }
}

fn open_descriptors() -> Option<u64> {
    match fs::read_dir("/proc/self/fd") {
        // The listing's own descriptor is among them; it is closed again at once.
        Ok(entries) => Some(entries.count() as u64),
        Err(error) => {
            tracing::debug!(%error, "cannot list /proc/self/fd; the profiler keeps to its share");
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(limit: u64, open: u64) -> Descriptors {
        Descriptors {
            limit,
            open: Some(open),
        }
    }

    #[test]
    fn a_sixteenth_of_the_limit_and_never_more_than_the_cap() {
        assert_eq!(at(256, 20).events(0), 16);
        assert_eq!(at(2048, 20).events(0), MAX_SAMPLED_THREADS);
        assert_eq!(at(u64::MAX, 20).events(0), MAX_SAMPLED_THREADS);
        assert_eq!(at(8, 0).events(0), 0);
    }

    #[test]
    fn the_reserve_stays_free_for_the_data_path() {
        // 1024: a quarter (256) stays free, so at 760 open 8 more may be opened.
        assert_eq!(at(1024, 760).events(0), 8);
        assert_eq!(at(1024, 760).events(5), 13);
        assert_eq!(at(1024, 900).events(0), 0);
        // Events held are not taken back, but none are added.
        assert_eq!(at(1024, 900).events(10), 10);
    }

    #[test]
    fn unknown_open_count_keeps_to_the_share() {
        let d = Descriptors {
            limit: 512,
            open: None,
        };
        assert_eq!(d.events(0), 32);
    }

    #[test]
    fn this_process_is_read() {
        let d = Descriptors::now();
        assert!(d.limit > 0);
        assert!(d.open.is_some_and(|n| n >= 3), "{d:?}");
    }
}
