//! `phasescope profile`: asks a running proxy to sample its upstreams for N seconds
//! (`POST /api/profile`, taps with `profile = "on-demand"`), waits for them, and then
//! reports the window as `report --from` does, with every export `report` writes.

use std::time::Duration;

use anyhow::Context;

use super::snapshot_cmd::admin_urls;
use super::source::http;
use super::source::snapshots::{self, SNAPSHOT_PATH};

/// Past the asked seconds, how long to wait for the watcher: it starts at its next turn
/// and adds the last samples at the turn after the end (`interval`, 1 s by default).
pub const SETTLE: Duration = Duration::from_secs(2);

/// `POST /api/profile?seconds=N` on the admin server `from`: the taps that sample.
pub fn ask(from: &str, seconds: u64) -> anyhow::Result<Vec<String>> {
    let (snapshot_url, _) = admin_urls(from)?;
    let prefix = snapshot_url
        .path_and_query
        .strip_suffix(SNAPSHOT_PATH)
        .unwrap_or_default()
        .to_owned();
    let url = snapshot_url.with_path(&format!("{prefix}/api/profile?seconds={seconds}"));
    let answer = http::post(&url, "application/json", b"")
        .map_err(|e| snapshots::no_admin_server(&url, e))?;
    let v: serde_json::Value = serde_json::from_slice(&answer)
        .with_context(|| format!("{url}: the answer is not JSON"))?;
    let taps: Vec<String> = v
        .get("profiling")
        .and_then(serde_json::Value::as_array)
        .map(|taps| {
            taps.iter()
                .filter_map(|t| t.as_str().map(str::to_owned))
                .collect()
        })
        .unwrap_or_default();
    anyhow::ensure!(!taps.is_empty(), "{url} started no sampling");
    Ok(taps)
}
