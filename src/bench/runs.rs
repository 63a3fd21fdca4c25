//! The runs design: whole runs, one side at a time, interleaved A B B A …, each on a
//! clean snapshot taken once the proxy has recorded every exchange the generator saw
//! answered.

use std::sync::Arc;
use std::time::Duration;

use super::measured::Measured;
use super::record::{recorded, RunRecord};
use super::{external, generate, load, order, progress, Bench};
use crate::metrics::Registry;
use crate::snapshot::Snapshot;

/// The proxy records an exchange just after its last byte reached the client: a moment
/// for the last ones before the snapshot.
const SETTLE: Duration = Duration::from_millis(50);
/// At most this long for the last exchanges to be recorded.
const SETTLE_DEADLINE: Duration = Duration::from_secs(2);

impl Bench<'_> {
    /// The runs design: whole runs, one side at a time, interleaved A B B A ….
    pub(super) async fn interleaved_runs(&self) -> anyhow::Result<(Vec<RunRecord>, Measured)> {
        let args = self.args;
        let sequence = order::interleaved(args.runs);
        let total = sequence.len();
        let mut runs = Vec::new();
        let mut measured = Measured::default();
        for (i, side) in sequence.into_iter().enumerate() {
            self.registry.reset();
            let counters = Arc::new(load::Counters::default());
            let bar = tokio::spawn(progress::bar(
                Arc::clone(&counters),
                i + 1,
                total,
                side,
                args.duration,
            ));
            let generated = match &args.load {
                None => {
                    let plan = self.load_plan(side, args.duration, args.connections);
                    Some(generate(args, self.addr(side), plan, &counters).await?)
                }
                Some(template) => {
                    let url = format!("http://{}{}", self.addr(side), self.paths[0]);
                    let cmd = external::fill(template, &url, args.duration, args.connections);
                    external::run(&cmd, args.duration).await?;
                    None
                }
            };
            bar.abort();
            let snap = settled(self.registry, &[(side, generated.as_ref())]).await;
            let record = RunRecord::new(i + 1, side, &snap, generated);
            progress::done(
                i + 1,
                total,
                side,
                record.requests,
                record.seconds,
                record.failed(),
            );
            let name = format!("run-{:02}-{}.json", i + 1, side.tap());
            self.keep(&name, &snap)?;
            runs.push(record);
            measured.push(side, snap, name);
        }
        Ok((runs, measured))
    }
}

/// The snapshot once the proxy has recorded every exchange the generator saw answered
/// (it records an exchange just after its last byte went out, and a starved worker may
/// be late), within a deadline; with an external load, after a short pause.
async fn settled(registry: &Registry, sides: &[(order::Side, Option<&load::Outcome>)]) -> Snapshot {
    let deadline = tokio::time::Instant::now() + SETTLE_DEADLINE;
    tokio::time::sleep(SETTLE).await;
    loop {
        let snap = registry.snapshot();
        let complete = sides.iter().all(|(side, generated)| {
            generated.is_none_or(|g| recorded(&snap, side.tap()) >= g.requests)
        });
        if complete || tokio::time::Instant::now() >= deadline {
            return snap;
        }
        tokio::time::sleep(SETTLE).await;
    }
}
