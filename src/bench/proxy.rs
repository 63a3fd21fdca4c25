//! The proxy a bench measures through: its config (two HTTP taps, `a` and `b`, and the
//! RESP taps of `--a-resp` and `--b-resp`), whether the servers accept connections before
//! it starts, and `--cpus`, which pins the servers' threads.

use std::net::{Ipv4Addr, SocketAddr};
use std::time::Duration;

use anyhow::Context;

use super::args::{BenchArgs, RespTap};
use super::pin;
use crate::config::{Config, Protocol, RouteRule, TapConfig};

/// How long exchanges in flight may finish when the bench stops.
pub const GRACE: Duration = Duration::from_secs(2);

/// `--cpus`: each server's threads on its own CPUs. The server must be a process of this
/// host that listens on its address, found as `[tap.process] find = "auto"` finds it.
pub fn pin_servers(args: &BenchArgs, pinned: &mut pin::Pinned) -> anyhow::Result<()> {
    let Some(cpus) = &args.cpus else {
        return Ok(());
    };
    for (flag, addr, set) in [("--a", &args.a, &cpus.a), ("--b", &args.b, &cpus.b)] {
        let which = format!("{flag} {addr}");
        let pid = crate::upstream::find::Target::Listener(addr.clone())
            .locate()
            .with_context(|| format!("--cpus: finding the process of {which} to pin"))?;
        pinned.process(pid, set, &which)?;
    }
    Ok(())
}

/// Whether the server at `addr` accepts a connection, within the client's connect
/// timeout.
pub async fn reachable(addr: &str) -> anyhow::Result<()> {
    tokio::time::timeout(
        super::client::CONNECT_TIMEOUT,
        tokio::net::TcpStream::connect(addr),
    )
    .await
    .context("connect timed out")?
    .context("connect failed")?;
    Ok(())
}

/// Two HTTP taps on free loopback ports, `a` in front of `a`, `b` in front of `b`; routes
/// by the first path segment (Webdis's command: `/GET/k` is route GET).
pub fn config(a: &str, b: &str) -> anyhow::Result<Config> {
    let mut config = Config::builtin().context("the built-in config")?;
    let tap = |name: &str, upstream: &str| {
        let mut t = TapConfig::new(
            name,
            Protocol::Http,
            SocketAddr::from((Ipv4Addr::LOCALHOST, 0)),
            upstream,
        );
        t.routes = RouteRule::Webdis;
        t
    };
    config.taps = vec![tap("a", a), tap("b", b)];
    config.correlate.clear();
    config.log.access_log = None;
    config.log.slow_log = None;
    config.shutdown_grace = GRACE;
    Ok(config)
}

/// A RESP tap `FRONT_resp` on `resp.listen` in front of `resp.redis`, correlated with the
/// HTTP tap `front` (a Webdis): the wait on Webdis then splits into `backend_in`,
/// `backend` (with `backend_queue`) and `backend_out`, phases of `front` that the compare
/// of tap `a` against tap `b` takes in like every other. The RESP tap's own series are
/// not compared (the compare is scoped to `a` and `b`).
pub fn behind(config: &mut Config, front: &str, resp: &RespTap) {
    let name = format!("{front}_resp");
    config.taps.push(TapConfig::new(
        &name,
        Protocol::Resp,
        resp.listen,
        &resp.redis,
    ));
    config.correlate.push(crate::config::CorrelateConfig {
        kind: "webdis".to_owned(),
        http: front.to_owned(),
        resp: name,
    });
}
