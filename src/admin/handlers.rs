//! What each admin path answers.

use std::sync::Arc;

use bytes::Bytes;
use hyper::header::{
    HeaderValue, ACCEPT, ALLOW, AUTHORIZATION, CACHE_CONTROL, CONTENT_SECURITY_POLICY,
    CONTENT_TYPE, RETRY_AFTER, VARY, WWW_AUTHENTICATE, X_CONTENT_TYPE_OPTIONS,
};
use hyper::{Method, Request, Response, StatusCode};

use super::body::Body;
use super::page::{self, Asset};
use super::pool::Pool;
use super::{guard, Shared};
use crate::metrics::exposition;

type Reply = Response<Body>;

const JSON: &str = "application/json";
const TEXT: &str = "text/plain; charset=utf-8";

/// Answers one admin request. The request body, if any, is ignored. Only for a `Host`
/// this server is known by (`guard`). With a token, the data paths (`/metrics`,
/// `/api/*`) need it as a bearer token; the page and `/healthz` stay open (the page asks
/// for the token and sends it itself).
pub(super) async fn handle<B>(req: Request<B>, shared: Arc<Shared>) -> Reply {
    let method = req.method();
    let read = method == Method::GET || method == Method::HEAD;
    let path = req.uri().path();
    if !guard::host_allowed(req.headers(), &shared.allowed_hosts) {
        return reply(
            StatusCode::MISDIRECTED_REQUEST,
            TEXT,
            "unknown Host: add it to [admin] allowed_hosts\n",
        );
    }
    let registry = Arc::clone(&shared.registry);
    if let Some(token) = shared.token.as_deref() {
        if (path == "/metrics" || path.starts_with("/api/")) && !authorized(&req, token) {
            return unauthorized();
        }
    }
    match path {
        "/metrics" if read => {
            // Protobuf (with native histograms) only for a scraper that asks for it.
            let format =
                exposition::negotiate(req.headers().get(ACCEPT).and_then(|v| v.to_str().ok()));
            let scrape = Arc::clone(&shared);
            blocking(&shared.scrapes, move || {
                if registry.enabled() {
                    scrape.recent.refresh(&registry);
                }
                let mut r = reply(
                    StatusCode::OK,
                    format.content_type(),
                    registry.encode(format),
                );
                // The answer depends on Accept: a cache must not give one scraper's to another.
                r.headers_mut()
                    .insert(VARY, HeaderValue::from_static("Accept"));
                r
            })
            .await
        }
        "/healthz" if read => reply(StatusCode::OK, TEXT, "ok"),
        "/api/snapshot" if read => {
            let page = Arc::clone(&shared);
            blocking(&shared.snapshots, move || {
                let snapshot = registry.snapshot();
                let route_cpu = page.route_cpu.of(&snapshot);
                match served_with(snapshot, &route_cpu).and_then(|v| serde_json::to_vec(&v)) {
                    Ok(body) => reply(StatusCode::OK, JSON, body),
                    Err(e) => internal_error(&e),
                }
            })
            .await
        }
        "/api/history" if read => history(&shared),
        "/api/reset" if method == Method::POST => {
            if let Some(refused) = refused_change(&req, &shared, "a reset") {
                return refused;
            }
            blocking(&shared.snapshots, move || {
                // The window the reset ends, whole: what a snapshot then a reset lost
                // between the two is in it (docs/metrics.md).
                let (window, since) = registry.cut_window();
                let body = served(window).map(|window| {
                    serde_json::json!({
                        "reset": true,
                        "since": humantime::format_rfc3339_millis(since).to_string(),
                        "window": window,
                    })
                });
                match body.and_then(|v| serde_json::to_vec(&v)) {
                    Ok(body) => reply(StatusCode::OK, JSON, body),
                    Err(e) => internal_error(&e),
                }
            })
            .await
        }
        "/api/profile" if method == Method::POST => {
            refused_change(&req, &shared, "asking for a profile")
                .unwrap_or_else(|| profile_on_demand(req.uri().query(), &registry))
        }
        "/metrics" | "/healthz" | "/api/snapshot" | "/api/history" => not_allowed("GET, HEAD"),
        "/api/reset" | "/api/profile" => not_allowed("POST"),
        path => match page::asset(path) {
            Some(asset) if read => page_file(asset),
            Some(_) => not_allowed("GET, HEAD"),
            None => reply(StatusCode::NOT_FOUND, TEXT, "not found\n"),
        },
    }
}

/// `GET /api/history`: what the window held second by second, whether or not a page was
/// open.
fn history(shared: &Shared) -> Reply {
    let body = serde_json::json!({
        "interval_seconds": super::history::EVERY.as_secs_f64(),
        "points": shared.history.window(),
    });
    match serde_json::to_vec(&body) {
        Ok(body) => reply(StatusCode::OK, JSON, body),
        Err(e) => internal_error(&e),
    }
}

/// The 403 for a request that would change the proxy's state (`what`: a reset, asking
/// for a profile) without the JSON content type (or an `X-Phasescope-*` header) and from
/// another site; `None` when it may.
fn refused_change<B>(req: &Request<B>, shared: &Shared, what: &str) -> Option<Reply> {
    (!guard::may_change_state(req.headers(), &shared.allowed_hosts)).then(|| {
        reply(
            StatusCode::FORBIDDEN,
            TEXT,
            format!(
                "{what} needs Content-Type: application/json (or an X-Phasescope-* header) and no cross-site Origin\n"
            ),
        )
    })
}

/// `POST /api/profile?seconds=N`: the taps with `profile = "on-demand"` sample their
/// upstream for N seconds (1 to 3600) from their watcher's next turn.
fn profile_on_demand(query: Option<&str>, registry: &crate::metrics::Registry) -> Reply {
    let seconds = query
        .unwrap_or("")
        .split('&')
        .find_map(|kv| kv.strip_prefix("seconds="))
        .and_then(|v| v.parse::<u64>().ok())
        .filter(|s| (1..=3600).contains(s));
    let Some(seconds) = seconds else {
        return reply(
            StatusCode::BAD_REQUEST,
            TEXT,
            "give ?seconds=N, 1 to 3600\n",
        );
    };
    let taps = registry.profile_for(std::time::Duration::from_secs(seconds));
    if taps.is_empty() {
        return reply(
            StatusCode::CONFLICT,
            TEXT,
            "no tap samples on demand: set profile = \"on-demand\" in its [tap.process]\n",
        );
    }
    let body = serde_json::json!({ "profiling": taps, "seconds": seconds });
    reply(StatusCode::OK, JSON, body.to_string())
}

/// Hot functions per tap `/api/snapshot` carries for the live page.
const LIVE_HOT: usize = 5;

/// What `/api/snapshot` answers: the snapshot with what the rules of docs/findings.md
/// find in its window, and beside them `hot`,
/// each sampled tap's hot path, `what_if`, each sampled tap's what-if of a faster parser,
/// and `route_cpu`, each tap's CPU per route (docs/metrics.md).
/// They are computed here, as the findings are, not kept in the snapshot: a report
/// recomputes them from the stacks and the slices.
pub fn served(snapshot: crate::snapshot::Snapshot) -> serde_json::Result<serde_json::Value> {
    let route_cpu = crate::findings::route_cpu::estimates(&snapshot);
    served_with(snapshot, &route_cpu)
}

/// [`served`] with the CPU per route already estimated (the live page's, at most every
/// few seconds).
pub fn served_with(
    mut snapshot: crate::snapshot::Snapshot,
    route_cpu: &crate::findings::route_cpu::Estimates,
) -> serde_json::Result<serde_json::Value> {
    let (findings, hot, what_if) = crate::findings::diagnose_with_hot(&snapshot, LIVE_HOT);
    snapshot.findings = findings;
    let hot = serde_json::to_value(hot)?;
    let what_if = serde_json::to_value(what_if)?;
    let route_cpu = serde_json::to_value(route_cpu)?;
    let mut value = serde_json::to_value(&snapshot)?;
    if let Some(map) = value.as_object_mut() {
        map.insert("hot".to_owned(), hot);
        map.insert("what_if".to_owned(), what_if);
        map.insert("route_cpu".to_owned(), route_cpu);
    }
    Ok(value)
}

/// Runs a scrape, snapshot or reset on the blocking pool: they take milliseconds on a big
/// registry, which must not be taken from the runtime's workers. At most
/// `[admin] max_scrapes` of each kind run at once, as many wait up to a few seconds, and
/// the others are answered 503 at once (threads and memory stay bounded however many
/// readers come, see `pool`). The turn is held until the answer is sent (`body`).
async fn blocking(pool: &Pool, f: impl FnOnce() -> Reply + Send + 'static) -> Reply {
    let Some(turn) = pool.turn().await else {
        return busy();
    };
    // The turn goes with the work: a client gone meanwhile does not free it while the
    // work still runs.
    match tokio::task::spawn_blocking(move || (f(), turn)).await {
        Ok((mut r, turn)) => {
            r.body_mut().hold_turn(turn);
            r
        }
        Err(e) => internal_error(&e),
    }
}

/// The pool of its kind is full: come back in a second.
fn busy() -> Reply {
    let mut r = reply(
        StatusCode::SERVICE_UNAVAILABLE,
        TEXT,
        "busy: as many answers of this kind as [admin] max_scrapes are being formatted and as many wait; retry\n",
    );
    r.headers_mut()
        .insert(RETRY_AFTER, HeaderValue::from_static("1"));
    r
}

fn reply(status: StatusCode, content_type: &'static str, body: impl Into<Bytes>) -> Reply {
    let mut r = Response::new(Body::new(body));
    *r.status_mut() = status;
    let h = r.headers_mut();
    h.insert(CONTENT_TYPE, HeaderValue::from_static(content_type));
    h.insert(CACHE_CONTROL, HeaderValue::from_static("no-store"));
    r
}

/// The live page and its files, under a policy that lets them load nothing from elsewhere.
fn page_file(asset: &'static Asset) -> Reply {
    let mut r = reply(
        StatusCode::OK,
        asset.content_type,
        Bytes::from_static(asset.body),
    );
    let h = r.headers_mut();
    h.insert(
        CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(page::CONTENT_SECURITY_POLICY),
    );
    h.insert(X_CONTENT_TYPE_OPTIONS, HeaderValue::from_static("nosniff"));
    r
}

/// Compares the bearer token in constant time, so its bytes cannot be guessed one by one
/// from response times.
fn authorized<B>(req: &Request<B>, token: &str) -> bool {
    let Some(given) = req
        .headers()
        .get(AUTHORIZATION)
        .and_then(|v| v.as_bytes().strip_prefix(b"Bearer "))
    else {
        return false;
    };
    let want = token.as_bytes();
    given.len() == want.len()
        && given
            .iter()
            .zip(want)
            .fold(0u8, |acc, (a, b)| acc | (a ^ b))
            == 0
}

fn unauthorized() -> Reply {
    let mut r = reply(
        StatusCode::UNAUTHORIZED,
        TEXT,
        "a bearer token is required\n",
    );
    r.headers_mut()
        .insert(WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
    r
}

fn not_allowed(allow: &'static str) -> Reply {
    let mut r = reply(StatusCode::METHOD_NOT_ALLOWED, TEXT, "method not allowed\n");
    r.headers_mut()
        .insert(ALLOW, HeaderValue::from_static(allow));
    r
}

fn internal_error(e: &dyn std::fmt::Display) -> Reply {
    tracing::error!(error = %e, "admin request failed");
    reply(StatusCode::INTERNAL_SERVER_ERROR, TEXT, "internal error\n")
}
