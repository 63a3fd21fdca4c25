//! The snapshot document: its header (format, version, clock, window, HDR layout, the
//! phases' order and styles), its taps, the findings the admin server adds, and the
//! proxy's own part; and reading one back from a file.
//!
//! The JSON schema is a contract with the report and compare commands; docs/metrics.md
//! describes every field. Durations are seconds (Prometheus base units) except the
//! histogram pairs, which are integer nanoseconds so that merging is exact.

use std::collections::BTreeMap;

use anyhow::{ensure, Context};
use serde::{Deserialize, Serialize};

use super::finding::Finding;
use super::proxy::ProxySnapshot;
use super::series::HdrLayout;
use super::tap::TapSnapshot;

/// The `format` field: what this document is.
pub const FORMAT: &str = "phasescope-snapshot";
/// The `format_version` field. Bumped on any change a reader must know about.
pub const FORMAT_VERSION: u32 = 1;

/// The whole document `/api/snapshot` serves and readers load (docs/metrics.md).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Snapshot {
    pub format: String,
    pub format_version: u32,
    /// The phasescope version that took it.
    pub version: String,
    /// `tsc` or `os`: what the timings were read from.
    pub clock: String,
    /// When it was taken, RFC 3339 UTC, and the same as seconds since the Unix epoch.
    pub taken_at: String,
    pub taken_at_unix: f64,
    /// Start of the window the series cover: the last reset, or the process start.
    pub since: String,
    pub since_unix: f64,
    /// False under `--no-metrics`: then nothing was recorded.
    pub metrics_enabled: bool,
    /// How the `histogram` pairs were recorded.
    pub hdr: HdrLayout,
    /// Every phase name, in the order readers show them (`Phase::ALL`): JSON objects
    /// have no order, and the live page lists phases in this one instead of keeping its
    /// own copy. Empty in snapshots of older builds.
    #[serde(default)]
    pub phase_order: Vec<String>,
    /// How to draw each phase, keyed by its name: the one colour table of
    /// `Phase::style`, so that the live page draws with the colours the SVG and the
    /// dashboard use. Empty in snapshots of older builds.
    #[serde(default)]
    pub phase_styles: BTreeMap<String, PhaseStyle>,
    /// Keyed by the `tap` label.
    pub taps: BTreeMap<String, TapSnapshot>,
    /// What the rules of docs/findings.md find in this window, most severe first. The
    /// admin server fills it in; absent when nothing was found and in older snapshots
    /// (readers diagnose the snapshot again rather than trust it).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub findings: Vec<Finding>,
    /// The proxy's own process and the machine over the same window (docs/metrics.md);
    /// absent under `--no-metrics` and in older snapshots.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub proxy: Option<ProxySnapshot>,
}

/// One phase's entry of [`Snapshot::phase_styles`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PhaseStyle {
    /// `#rrggbb`.
    pub colour: String,
    pub label: String,
    /// The phase it is drawn inside, if any.
    pub parent: Option<String>,
    /// Its place in the stacked bar from the left, if it is stacked.
    pub stack: Option<u8>,
    /// Its place from the bottom in the live page's stack of the phases that add up to
    /// `total`, if it is in it. Absent in snapshots of older builds, as are the two below.
    #[serde(default)]
    pub sum_stack: Option<u8>,
    /// What it measures, in a line.
    #[serde(default)]
    pub description: String,
    /// What a table of phases says beside its name (`in client_recv`), if anything.
    #[serde(default)]
    pub note: Option<String>,
}

impl Snapshot {
    /// Reads a snapshot file's contents, refusing other documents and newer formats.
    pub fn from_json(text: &str) -> anyhow::Result<Self> {
        let s: Snapshot = serde_json::from_str(text).context("not a phasescope snapshot")?;
        ensure!(
            s.format == FORMAT,
            "format is {:?}, not {FORMAT:?}",
            s.format
        );
        ensure!(
            s.format_version <= FORMAT_VERSION,
            "snapshot format {} is newer than this build reads ({FORMAT_VERSION})",
            s.format_version
        );
        Ok(s)
    }
}
