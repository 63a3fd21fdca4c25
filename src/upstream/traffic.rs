//! Which reads of a process held traffic: at each read, whether the taps it serves
//! counted an exchange since the previous read; what the process did over those reads is
//! kept apart from the rest ([`crate::snapshot::Traffic`]), so that CPU per request and
//! cores are read over the work, not over the idle seconds around it.
//!
//! The exchanges are read through [`RouteCounts`] (the metrics' shards, which the relay
//! counts into already): nothing is added to a request's path. An exchange is counted when
//! it ends, so a read holds traffic when an exchange ended in it; a request longer than a
//! read whose CPU fell in earlier reads leaves that CPU out (a second-long request at the
//! default interval of one second).

use std::sync::Arc;

use super::account::Totals;
use super::slices::RouteCounts;

/// The reads that held traffic, for one process (the upstream's: its tap; the proxy's
/// own: every tap).
#[derive(Default)]
pub(crate) struct TrafficMeter {
    sources: Vec<Arc<dyn RouteCounts>>,
    /// The exchanges counted at the last read; `None` before the first.
    last: Option<u64>,
    /// What the reads that held traffic added, since start.
    totals: Totals,
    /// The exchanges that ended in reads of a live process, since start.
    exchanges: u64,
    scratch: Vec<u64>,
}

impl TrafficMeter {
    /// Counts `routes`' exchanges too.
    pub(crate) fn add_source(&mut self, routes: Arc<dyn RouteCounts>) {
        self.sources.push(routes);
        self.last = None;
    }

    /// Whether any exchanges are counted: without, nothing says which reads held traffic.
    pub(crate) fn counting(&self) -> bool {
        !self.sources.is_empty()
    }

    /// After a read that added `delta` to the process's totals (`alive`: the process was
    /// read): adds it to the traffic's when an exchange ended since the previous read, and
    /// counts those exchanges. Returns whether it did. A read of no process counts
    /// nothing and starts over: the exchanges until the next process's first read were
    /// served unwatched.
    pub(crate) fn after_read(&mut self, delta: &Totals, alive: bool) -> bool {
        if self.sources.is_empty() {
            return false;
        }
        if !alive {
            self.last = None;
            return false;
        }
        let mut now = 0u64;
        for s in &self.sources {
            s.exchanges(&mut self.scratch);
            now += self.scratch.iter().sum::<u64>();
        }
        let ended = self.last.map_or(0, |last| now.saturating_sub(last));
        self.last = Some(now);
        if ended > 0 {
            add(&mut self.totals, delta);
            self.exchanges += ended;
        }
        ended > 0
    }

    /// Another process is watched from now: its first read starts the count.
    pub(crate) fn restart(&mut self) {
        self.last = None;
    }

    /// The exchanges that ended in reads of a live process, since start.
    pub(crate) fn exchanges(&self) -> u64 {
        self.exchanges
    }

    /// What the reads that held traffic added since start.
    pub(crate) fn totals(&self) -> Totals {
        self.totals
    }
}

fn add(t: &mut Totals, d: &Totals) {
    t.user_ns += d.user_ns;
    t.system_ns += d.system_ns;
    t.runqueue_ns += d.runqueue_ns;
    t.watched_ns += d.watched_ns;
    t.cpu_ns += d.cpu_ns;
    t.process_cpu_ns += d.process_cpu_ns;
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Mutex;

    struct Count(Mutex<u64>);

    impl RouteCounts for Count {
        fn exchanges(&self, into: &mut Vec<u64>) {
            into.clear();
            into.push(*self.0.lock().unwrap());
        }
        fn route_name(&self, _: usize) -> String {
            "/".to_owned()
        }
    }

    #[test]
    fn only_reads_in_which_an_exchange_ended_count() {
        let count = Arc::new(Count(Mutex::new(0)));
        let mut m = TrafficMeter::default();
        let read = |cpu: u64| Totals {
            user_ns: cpu,
            watched_ns: 1_000,
            ..Totals::default()
        };
        assert!(!m.counting());
        // Nothing counted: no read holds traffic.
        assert!(!m.after_read(&read(5), true));
        m.add_source(count.clone());
        // The first read only marks where counting starts.
        *count.0.lock().unwrap() = 10;
        assert!(!m.after_read(&read(7), true));
        *count.0.lock().unwrap() = 12;
        assert!(m.after_read(&read(100), true));
        assert!(!m.after_read(&read(3), true));
        *count.0.lock().unwrap() = 13;
        assert!(m.after_read(&read(50), true));
        // The process gone: what ends until its successor's second read is unwatched.
        *count.0.lock().unwrap() = 20;
        assert!(!m.after_read(&read(0), false));
        *count.0.lock().unwrap() = 30;
        assert!(!m.after_read(&read(9), true));
        *count.0.lock().unwrap() = 31;
        assert!(m.after_read(&read(20), true));
        let t = m.totals();
        assert_eq!((t.user_ns, t.watched_ns), (170, 3_000));
        assert_eq!(m.exchanges(), 2 + 1 + 1);
    }
}
