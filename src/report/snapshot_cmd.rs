//! `phasescope snapshot`: save a running proxy's `/api/snapshot` to a file, and optionally
//! start the next run clean with `/api/reset`.
//!
//! The file is the document the admin server sent (version, clock source, `since` and
//! `taken_at` included), checked to be a snapshot this build reads, pretty-printed. Fields
//! this build does not know are kept, so a newer proxy's additions survive the copy.

use std::path::Path;

use anyhow::{ensure, Context};

use super::file;
use super::source::http::{self, Url};
use super::source::snapshots::{self, Source, RESET_PATH, SNAPSHOT_PATH};
use crate::snapshot::Snapshot;

/// What was saved.
#[derive(Debug, Clone)]
pub struct Saved {
    pub url: String,
    pub taps: usize,
    /// Exchanges in the snapshot window, over all taps (counts of `total`).
    pub exchanges: u64,
    pub since: String,
    pub taken_at: String,
    /// The new `since`, when a reset followed.
    pub reset_since: Option<String>,
}

/// The snapshot and reset URLs of an admin server given as `http://host:port[/api/snapshot]`.
pub fn admin_urls(from: &str) -> anyhow::Result<(Url, Url)> {
    let Source::Admin(url) = Source::parse(from)? else {
        anyhow::bail!("{from}: --from must be the admin server's http:// URL");
    };
    let prefix = url
        .path_and_query
        .strip_suffix(SNAPSHOT_PATH)
        .with_context(|| {
            format!("{url}: expected the admin server's base URL or its {SNAPSHOT_PATH}")
        })?;
    let reset = url.with_path(&format!("{prefix}{RESET_PATH}"));
    Ok((url, reset))
}

/// Fetches the snapshot, writes it to `out` (whole or not at all). With `reset`, the
/// snapshot is the window the reset ended, as `POST /api/reset` hands it back: two
/// `snapshot --reset` loops at once, or one beside the live page's Reset, lose no exchange
/// between a fetch and a reset (each is in exactly one saved window).
pub fn save(from: &str, out: &Path, reset: bool) -> anyhow::Result<Saved> {
    let (snapshot_url, reset_url) = admin_urls(from)?;
    let (value, reset_since) = if reset {
        let (window, since) = reset_window(&reset_url)?;
        (window, Some(since))
    } else {
        let body =
            http::get(&snapshot_url).map_err(|e| snapshots::no_admin_server(&snapshot_url, e))?;
        let text =
            std::str::from_utf8(&body).with_context(|| format!("{snapshot_url}: not UTF-8"))?;
        let value: serde_json::Value =
            serde_json::from_str(text).with_context(|| format!("{snapshot_url}"))?;
        (value, None)
    };
    let mut pretty = serde_json::to_string_pretty(&value)?;
    let snap = Snapshot::from_json(&pretty).with_context(|| format!("{snapshot_url}"))?;
    pretty.push('\n');
    file::write_output(out, pretty.as_bytes())?;
    let exchanges = snap
        .taps
        .values()
        .filter_map(|t| t.phases.get("total"))
        .flat_map(|routes| routes.values())
        .map(|s| s.count)
        .sum();
    Ok(Saved {
        url: if reset { reset_url } else { snapshot_url }.to_string(),
        taps: snap.taps.len(),
        exchanges,
        since: snap.since,
        taken_at: snap.taken_at,
        reset_since,
    })
}

/// `POST /api/reset`: the window it ended, and the `since` of the one it began.
fn reset_window(reset_url: &Url) -> anyhow::Result<(serde_json::Value, String)> {
    let answer = http::post(reset_url, "application/json", b"")
        .map_err(|e| snapshots::no_admin_server(reset_url, e))?;
    let mut v: serde_json::Value = serde_json::from_slice(&answer)
        .with_context(|| format!("{reset_url}: the answer is not JSON"))?;
    ensure!(
        v.get("reset").and_then(serde_json::Value::as_bool) == Some(true),
        "{reset_url} did not confirm the reset"
    );
    let since = v
        .get("since")
        .and_then(serde_json::Value::as_str)
        .unwrap_or_default()
        .to_owned();
    let window = v.get_mut("window").map(serde_json::Value::take).with_context(|| {
        format!("{reset_url} reset without handing back the window it ended (a proxy older than this phasescope): its exchanges since the last reset are lost")
    })?;
    Ok((window, since))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reset_sits_beside_the_snapshot() {
        let (s, r) = admin_urls("http://127.0.0.1:9464").unwrap();
        assert_eq!(s.to_string(), "http://127.0.0.1:9464/api/snapshot");
        assert_eq!(r.to_string(), "http://127.0.0.1:9464/api/reset");
        let (_, r) = admin_urls("http://h:1/proxy/api/snapshot").unwrap();
        assert_eq!(r.path_and_query, "/proxy/api/reset");
        assert!(admin_urls("file.json").is_err());
        assert!(admin_urls("http://h:1/metrics").is_err());
    }
}
