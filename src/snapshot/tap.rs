//! One tap's part of a snapshot: its series per phase and route, its errors and failed
//! exchanges over the window, its request heads, its counters since start, and the
//! upstream's part when it watches a process.
//!
//! The shapes only: the metrics fill them from their shards (`metrics::snapshot`), the
//! window arithmetic (`snapshot::window`) adds and subtracts them, and every reader reads
//! them.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::series::SeriesSnapshot;
use super::upstream::UpstreamSnapshot;

/// phase name → route label → series.
pub type PhaseSeries = BTreeMap<String, BTreeMap<String, SeriesSnapshot>>;

/// What the server answered, as a report's sentence says it: `503 to 1532`, or for a RESP
/// error reply (status `error` in `server_errors`) `an error reply to 12`.
pub fn answered_with(status: &str, n: u64) -> String {
    if status == "error" {
        format!("an error reply to {n}")
    } else {
        format!("{status} to {n}")
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TapSnapshot {
    /// `http` or `resp`.
    pub protocol: String,
    /// Front to back from 0: the taps clients reach first, each followed by the taps behind
    /// it (a correlated RESP tap after its HTTP tap), config order otherwise. Readers show
    /// taps in this order. Absent in snapshots of older builds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub position: Option<u32>,
    /// The `host:port` the tap forwards to, as configured (the report names it when the
    /// upstream fails). Absent in snapshots of older builds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub upstream_address: Option<String>,
    /// phase name → route label → series, of the exchanges answered. A series appears
    /// once it has an observation since `since`.
    pub phases: PhaseSeries,
    /// `kind` label → errors since `since`, the window the series cover (`totals.errors`
    /// counts since the process started). Absent in snapshots of older builds.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub errors: BTreeMap<String, u64>,
    /// The exchanges that failed since `since` (the proxy answered them itself, a 502, a
    /// 504, a 400, or cut them short): `kind` label → phase name → route label → series.
    /// Their phases are kept out of `phases`, which holds the answered exchanges only.
    /// Absent when none failed, and in snapshots of older builds (whose `phases` held
    /// both).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub failed: BTreeMap<String, PhaseSeries>,
    /// The server's own error answers since `since` (an HTTP 5xx the upstream sent, not
    /// one the proxy made; a RESP error reply): status (`"503"`; `"5xx"` for the statuses
    /// past the bound of four per route; `"error"` for RESP) → phase name → route label →
    /// series. Kept out of `phases`, which
    /// then holds the successes only, so that a fast error cannot lower their mean.
    /// Absent when the server answered no error, and in snapshots of older builds (whose
    /// `phases` held them).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub server_errors: BTreeMap<String, PhaseSeries>,
    /// Client connections the client ended between exchanges since `since`: normal ends,
    /// not errors. Absent in snapshots of older builds.
    #[serde(default)]
    pub client_closes: u64,
    /// Failed upstream connects since `since` by reason (`refused`, `timeout`, `other`):
    /// what `errors.upstream_connect` was. Absent in snapshots of older builds.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub connect_failures: BTreeMap<String, u64>,
    /// HTTP taps: the shape of the request heads read since `since`, the probe's own
    /// requests left out. Absent for RESP taps and in snapshots of older builds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub request_heads: Option<RequestHeads>,
    /// Counters since the process started; a reset does not touch them.
    pub totals: TapTotals,
    /// The upstream's process, when the tap watches one: CPU and scheduling since `since`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub upstream: Option<UpstreamSnapshot>,
    /// An HTTP tap of a `[[correlate]]`: the RESP tap between its upstream and Redis, whose
    /// watched process (Redis) splits the `backend` part of the Webdis split into Redis's
    /// CPU, its wait for one and the rest (docs/webdis.md). Absent otherwise and in older
    /// snapshots.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub backend: Option<String>,
}

/// The request heads of a window: their number, mean size and field count, and both
/// distributions as `[upper_bound, count]` pairs of power-of-two buckets (non-empty ones
/// only; the last bucket also holds everything above it).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RequestHeads {
    pub count: u64,
    /// Mean head size in bytes, request line through the empty line.
    pub mean_bytes: f64,
    /// Mean number of header fields.
    pub mean_fields: f64,
    pub bytes: Vec<[u64; 2]>,
    pub fields: Vec<[u64; 2]>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TapTotals {
    /// Exchanges recorded (all routes, methods and statuses).
    pub requests: u64,
    /// `kind` label → count; every kind is present.
    pub errors: BTreeMap<String, u64>,
    /// `side` → connections open now.
    pub connections_open: BTreeMap<String, u64>,
    /// `side` → connections opened.
    pub connections: BTreeMap<String, u64>,
    /// `direction` → bytes relayed.
    pub bytes: BTreeMap<String, u64>,
    /// Messages that answered no request (pub/sub, MONITOR, RESP3 pushes).
    #[serde(default)]
    pub pushed: u64,
    /// Client connections the client ended between exchanges (normal ends).
    #[serde(default)]
    pub client_closes: u64,
    /// For a correlated HTTP tap: requests that found their backend command, and not.
    #[serde(default)]
    pub correlations: Correlations,
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Correlations {
    pub matched: u64,
    pub unmatched: u64,
}
