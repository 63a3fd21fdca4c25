//! Exemplars: for each slow bucket of a `total` histogram, the last exchange counted in it.
//!
//! A bucket's exemplar names one exchange (its [`ExchangeId`], the `exchange_id` of the
//! access and slow log lines), its total and when it ended, so that a p99 spike on a
//! dashboard leads to the exact request. Each series keeps one slot per bucket per worker
//! thread, overwritten in place (no allocation, no shared line); a scrape keeps the most
//! recent of the threads' slots. docs/metrics.md, "Exemplars", is the contract.

use crate::recorder::ExchangeId;

/// One exchange counted in a bucket. `id` [`ExchangeId::NONE`] means an empty slot.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Exemplar {
    pub id: ExchangeId,
    /// The observed value (the exchange's total).
    pub ns: u64,
    /// When it was recorded: milliseconds since the Unix epoch.
    pub unix_ms: u64,
}

impl Exemplar {
    pub fn is_empty(&self) -> bool {
        self.id == ExchangeId::NONE
    }

    /// The value in seconds, as the histogram's.
    pub fn seconds(&self) -> f64 {
        self.ns as f64 / 1e9
    }

    /// The timestamp in seconds, as OpenMetrics writes it.
    pub fn unix_seconds(&self) -> f64 {
        self.unix_ms as f64 / 1e3
    }
}

/// Keeps, bucket by bucket, the more recent of `acc` and `other` (as long as the longer).
pub fn merge_latest(acc: &mut Vec<Exemplar>, other: &[Exemplar]) {
    if acc.len() < other.len() {
        acc.resize(other.len(), Exemplar::default());
    }
    for (a, b) in acc.iter_mut().zip(other) {
        if !b.is_empty() && (a.is_empty() || b.unix_ms >= a.unix_ms) {
            *a = *b;
        }
    }
}

/// Wall-clock milliseconds from the kernel's coarse clock: a read of the vDSO page (a
/// few ns, no system call), at the clock tick's resolution (1–4 ms), which is all an
/// exemplar's timestamp needs.
#[inline]
pub fn coarse_unix_ms() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable timespec; CLOCK_REALTIME_COARSE exists on every
    // Linux since 2.6.32.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_REALTIME_COARSE, &mut ts) };
    if rc != 0 {
        return 0;
    }
    let secs = u64::try_from(ts.tv_sec).unwrap_or(0);
    let millis = u64::try_from(ts.tv_nsec).unwrap_or(0) / 1_000_000;
    secs * 1_000 + millis
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(id: u64, unix_ms: u64) -> Exemplar {
        Exemplar {
            id: ExchangeId(id),
            ns: id * 10,
            unix_ms,
        }
    }

    #[test]
    fn merging_keeps_each_buckets_latest_and_ignores_empty_slots() {
        let mut acc = vec![at(1, 100), Exemplar::default()];
        merge_latest(&mut acc, &[at(2, 50), at(3, 10), at(4, 5)]);
        assert_eq!(acc, vec![at(1, 100), at(3, 10), at(4, 5)]);
        merge_latest(&mut acc, &[Exemplar::default(), at(5, 11)]);
        assert_eq!(acc[0], at(1, 100));
        assert_eq!(acc[1], at(5, 11));
    }

    #[test]
    fn the_coarse_clock_is_the_wall_clock() {
        let wall = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_millis() as u64)
            .unwrap_or(0);
        let coarse = coarse_unix_ms();
        assert!(coarse.abs_diff(wall) < 1_000, "{coarse} vs {wall}");
    }
}
