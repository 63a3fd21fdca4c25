//! What the demo prints after its load: the report by route with what the findings rules
//! find in it, the totals, why the inside-the-upstream section is short when sampling
//! could not run, and the flame graph of the upstream's call stacks.

use std::collections::BTreeMap;
use std::path::Path;

use super::TAP;
use crate::report::export::stacks;
use crate::report::{self, Dataset};
use crate::snapshot::Snapshot;
use crate::upstream::Upstream;

/// Prints the report of `snapshot` and writes the flame graph to `flamegraph`.
pub fn print(
    snapshot: &Snapshot,
    upstream: Option<&Upstream>,
    flamegraph: &Path,
) -> anyhow::Result<()> {
    let dataset = Dataset::from_snapshots(std::slice::from_ref(snapshot), vec!["demo".into()])?;
    let mut by_route = report::Report::build(&dataset, true)?;
    by_route.findings = crate::findings::diagnose(snapshot);
    let colour = std::io::IsTerminal::is_terminal(&std::io::stdout());
    print!(
        "{}",
        report::render::table::render(&by_route, report::Format::Table, colour)?
    );
    println!();
    if let Some(line) = totals(snapshot) {
        println!("{line}");
    }
    if let Some(why) = not_sampled(snapshot, upstream) {
        println!("inside      not sampled: {why}");
        println!("flame graph not written: no call stacks without sampling");
        return Ok(());
    }
    match stacks::select(&dataset, Some(TAP)) {
        Ok((taps, _)) => {
            for t in &taps {
                let svg = stacks::flamegraph(t)?;
                report::file::write_output(flamegraph, &svg)?;
                println!(
                    "flame graph {}  ({} call stacks of {})",
                    flamegraph.display(),
                    t.stacks.total(),
                    t.describe()
                );
            }
        }
        Err(why) => println!("flame graph not written: {why}"),
    }
    Ok(())
}

/// `exchanges N, errors N, connections …, bytes …` of the demo's tap.
fn totals(snapshot: &Snapshot) -> Option<String> {
    let t = &snapshot.taps.get(TAP)?.totals;
    let get = |m: &BTreeMap<String, u64>, k: &str| m.get(k).copied().unwrap_or(0);
    Some(format!(
        "exchanges {}, errors {}, connections {} client / {} upstream, bytes {} in / {} out",
        t.requests,
        t.errors.values().sum::<u64>(),
        get(&t.connections, "client"),
        get(&t.connections, "upstream"),
        get(&t.bytes, "request"),
        get(&t.bytes, "response"),
    ))
}

/// Why the upstream has no CPU samples, when it has none: the demo always asks for them,
/// so the report's own hint (set `profile = true`) would be beside the point.
fn not_sampled(snapshot: &Snapshot, upstream: Option<&Upstream>) -> Option<String> {
    let tap = snapshot.taps.get(TAP)?;
    match (&tap.upstream, upstream) {
        (Some(u), _) if u.samples().is_some() => None,
        (_, None) => Some(
            "the upstream process could not be watched (see the log: RUST_LOG=info)".to_owned(),
        ),
        (_, Some(u)) => Some(
            u.sampling_off()
                .unwrap_or_else(|| "sampling had not started before the load ended".to_owned()),
        ),
    }
}
