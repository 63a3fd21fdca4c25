//! A proxy whose recorder counts connection events, for tests that must show that no
//! connection (and so no task) is left behind after a fault.
#![allow(dead_code)]

use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use phasescope::config::{Protocol, TapConfig};
use phasescope::recorder::{ErrorKind, Event, ExchangeRecord, Recorder, Side};
use tokio::sync::watch;

#[derive(Default)]
pub struct Counting {
    pub statuses: Mutex<Vec<u16>>,
    pub errors: Mutex<Vec<ErrorKind>>,
    opened: [AtomicUsize; 2],
    closed: [AtomicUsize; 2],
}

fn idx(side: Side) -> usize {
    match side {
        Side::Client => 0,
        Side::Upstream => 1,
    }
}

impl Counting {
    pub fn errors(&self) -> Vec<ErrorKind> {
        self.errors.lock().unwrap().clone()
    }

    pub fn opened(&self, side: Side) -> usize {
        self.opened[idx(side)].load(Ordering::SeqCst)
    }

    pub fn closed(&self, side: Side) -> usize {
        self.closed[idx(side)].load(Ordering::SeqCst)
    }

    /// Connections of `side` open now (the `phasescope_connections` gauge).
    pub fn open(&self, side: Side) -> usize {
        self.opened(side) - self.closed(side)
    }

    /// Waits until every connection opened on both sides was closed again, and returns
    /// (client, upstream) connections opened; panics after five seconds.
    pub async fn wait_all_closed(&self) -> (usize, usize) {
        for _ in 0..500 {
            if self.open(Side::Client) == 0 && self.open(Side::Upstream) == 0 {
                return (self.opened(Side::Client), self.opened(Side::Upstream));
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        panic!(
            "connections left open: client {}/{} upstream {}/{}",
            self.closed(Side::Client),
            self.opened(Side::Client),
            self.closed(Side::Upstream),
            self.opened(Side::Upstream)
        );
    }

    /// Waits until `n` errors were counted; panics after five seconds.
    pub async fn wait_errors(&self, n: usize) -> Vec<ErrorKind> {
        for _ in 0..500 {
            let e = self.errors();
            if e.len() >= n {
                return e;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        panic!("expected {n} errors, got {:?}", self.errors());
    }
}

impl Recorder for Counting {
    fn exchange(&self, r: &ExchangeRecord<'_>) {
        self.statuses.lock().unwrap().push(r.status);
    }
    fn event(&self, event: Event) {
        match event {
            Event::Error(kind) => self.errors.lock().unwrap().push(kind),
            Event::ConnectionOpened(side) => {
                self.opened[idx(side)].fetch_add(1, Ordering::SeqCst);
            }
            Event::ConnectionClosed(side) => {
                self.closed[idx(side)].fetch_add(1, Ordering::SeqCst);
            }
            Event::ClientClosed
            | Event::ConnectFailed(_)
            | Event::Bytes(..)
            | Event::Pushed(_)
            | Event::Correlated { .. }
            | Event::RequestHead(_) => {}
        }
    }
}

pub struct CountingProxy {
    pub addr: SocketAddr,
    pub rec: Arc<Counting>,
    stop: watch::Sender<bool>,
}

impl Drop for CountingProxy {
    fn drop(&mut self) {
        let _ = self.stop.send(true);
    }
}

pub async fn counting_proxy(
    upstream: SocketAddr,
    tune: impl FnOnce(&mut TapConfig),
) -> CountingProxy {
    let mut cfg = TapConfig::new(
        "faults",
        Protocol::Http,
        "127.0.0.1:0".parse().unwrap(),
        &upstream.to_string(),
    );
    tune(&mut cfg);
    let rec = Arc::new(Counting::default());
    let tap = phasescope::app::bind_tap(&cfg, rec.clone()).await.unwrap();
    let addr = tap.local_addr().unwrap();
    let (stop, rx) = watch::channel(false);
    tokio::spawn(tap.run(rx, Duration::from_secs(1)));
    CountingProxy { addr, rec, stop }
}
