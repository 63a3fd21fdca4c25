//! The proxy's own cost under each tap's headline: phasescope's CPU per request of the
//! tap (user, system), its wait for a CPU, the cores it kept busy and its share of what
//! the machine's cores did, measured from /proc as the upstream's are (docs/report.md,
//! "The proxy's own cost").

use serde::Serialize;

use crate::snapshot::{ProxySnapshot, UpstreamSnapshot};

/// phasescope's own process over the report's window, per request of one tap.
#[derive(Debug, Clone, Serialize)]
pub struct ProxyCost {
    pub pid: u32,
    pub threads: u64,
    pub watched_seconds: f64,
    /// Of `watched_seconds`, the reads in which some tap's exchanges ended: what the
    /// figures per request and the cores are read over. Absent in older snapshots (then
    /// the whole window).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub traffic_seconds: Option<f64>,
    pub requests: u64,
    /// Per exchange of the tap (answered and failed), seconds: the proxy's thread-time
    /// over the reads that held traffic, over them.
    pub cpu_user: f64,
    pub cpu_system: f64,
    pub runqueue: f64,
    /// Cores it kept busy on average.
    pub cores_used: f64,
    /// CPUs the machine has online.
    pub cpus: u64,
    /// Its share of the CPU time the machine's cores did; `None` when /proc/stat said
    /// nothing.
    pub share_of_machine: Option<f64>,
    /// Whether it may run on a CPU the tap's upstream may run on; `None` without a
    /// watched upstream or an affinity to compare.
    pub shares_cores_with_upstream: Option<bool>,
    /// Taps whose exchanges this CPU served: its workers serve every tap, so with more
    /// than one the figure is the whole proxy's, per request of this tap.
    pub taps: usize,
}

impl ProxyCost {
    pub fn new(
        p: &ProxySnapshot,
        requests: u64,
        upstream: Option<&UpstreamSnapshot>,
        taps: usize,
    ) -> Self {
        let per = |s: f64| {
            if requests == 0 {
                0.0
            } else {
                s / requests as f64
            }
        };
        let work = p.work();
        Self {
            pid: p.pid,
            threads: p.threads,
            watched_seconds: p.watched_seconds,
            traffic_seconds: p.traffic.map(|t| t.seconds),
            requests,
            cpu_user: per(work.cpu_user_seconds),
            cpu_system: per(work.cpu_system_seconds),
            runqueue: per(work.runqueue_seconds),
            cores_used: work.cores_used(),
            cpus: p.cpus,
            share_of_machine: work
                .machine_busy_seconds
                .filter(|&b| b > 0.0)
                .map(|b| (work.cpu() / b).min(1.0)),
            shares_cores_with_upstream: upstream.and_then(|u| p.shares_cores_with(u)),
            taps,
        }
    }

    /// The line under the headline.
    pub fn line(&self) -> String {
        let us = crate::units::duration;
        let traffic = self
            .traffic_seconds
            .map(|t| format!(" watched, {t:.0} s with traffic"))
            .unwrap_or_default();
        // From Prometheus there is no one pid: every instance is summed.
        let who = if self.pid == 0 {
            "from Prometheus".to_owned()
        } else {
            format!("pid {}", self.pid)
        };
        let mut l = format!(
            "phasescope itself ({who}, {} threads, {:.0} s{traffic}): per request {} on CPU (user {}, system {}), {} waiting for a CPU; {} of the {} cores",
            self.threads,
            self.watched_seconds,
            us(self.cpu_user + self.cpu_system),
            us(self.cpu_user),
            us(self.cpu_system),
            us(self.runqueue),
            crate::units::three_digits(self.cores_used),
            self.cpus
        );
        if let Some(s) = self.share_of_machine {
            l.push_str(&format!(
                ", {} of the CPU the machine did",
                crate::units::share(s)
            ));
        }
        match self.shares_cores_with_upstream {
            Some(true) => l.push_str("; it shares cores with the upstream"),
            Some(false) => l.push_str("; on cores of its own"),
            None => {}
        }
        if self.taps > 1 {
            l.push_str(&format!(
                " (the whole proxy's CPU over this tap's requests: its workers serve all {} taps)",
                self.taps
            ));
        }
        l
    }
}
