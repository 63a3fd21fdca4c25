//! Which process serves a tap's upstream: a fixed pid, a pid file, or the process that
//! holds the socket listening on the upstream's address.

use std::collections::BTreeSet;
use std::net::{IpAddr, SocketAddr, ToSocketAddrs, UdpSocket};
use std::path::PathBuf;

use anyhow::{bail, Context};
use procfs::net::TcpState;
use procfs::process::FDTarget;

use crate::config::{FindProcess, TapConfig};

/// How one tap's upstream process is found (again, after it restarts).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Target {
    /// The process listening on the upstream's `host:port`.
    Listener(String),
    /// A fixed pid: once it exits there is nothing to follow.
    Pid(u32),
    /// The pid in this file, read again whenever the process goes away.
    PidFile(PathBuf),
}

impl Target {
    /// What `[tap.process]` asks for; `None` when accounting is off (`find = "none"`).
    pub fn of(tap: &TapConfig) -> Option<Target> {
        let p = &tap.process;
        if let Some(pid) = p.pid {
            return Some(Target::Pid(pid));
        }
        if let Some(path) = &p.pid_file {
            return Some(Target::PidFile(path.clone()));
        }
        match p.find {
            Some(FindProcess::None) => None,
            Some(FindProcess::Auto) | None => Some(Target::Listener(tap.upstream.clone())),
        }
    }

    /// The pid this target names now: with `auto`, the lowest pid of the group that
    /// serves the upstream's socket ([`Target::locate_group`]).
    pub fn locate(&self) -> anyhow::Result<u32> {
        self.locate_group()?
            .first()
            .copied()
            .context("no process serves the upstream")
    }

    /// Every process that serves the upstream, lowest pid first, never none: with
    /// `auto`, each process holding a socket that listens on its address (forked workers
    /// share their parent's socket; processes bound with SO_REUSEPORT each hold one of
    /// their own); with `pid` or `pid_file`, the one process named.
    pub fn locate_group(&self) -> anyhow::Result<Vec<u32>> {
        match self {
            Target::Pid(pid) => Ok(vec![*pid]),
            Target::PidFile(path) => {
                let text = std::fs::read_to_string(path)
                    .with_context(|| format!("reading the pid file {}", path.display()))?;
                let pid = text.trim().parse::<u32>().with_context(|| {
                    format!(
                        "the pid file {} holds {:?}, not a pid",
                        path.display(),
                        text.trim()
                    )
                })?;
                Ok(vec![pid])
            }
            Target::Listener(upstream) => listener_pids(upstream),
        }
    }

    /// Whether the group may gain members after it was found (workers forked later, a
    /// new SO_REUSEPORT process): only `auto` looks again.
    pub fn finds_groups(&self) -> bool {
        matches!(self, Target::Listener(_))
    }

    /// Whether a pid that went away may come back under another pid.
    pub fn follows_restarts(&self) -> bool {
        !matches!(self, Target::Pid(_))
    }
}

/// The upstream's address is not one of this host's: its process cannot be read here,
/// now or later, so the watcher stops looking.
#[derive(Debug, thiserror::Error)]
#[error("{0} is not an address of this host, so its process cannot be read here; set [tap.process] pid or pid_file, or find = \"none\"")]
pub struct NotLocal(pub String);

/// The children of process `pid` forked by its main thread (/proc/PID/task/PID/children:
/// a forking server forks from it; the other threads' files are not read, a process of
/// hundreds of threads would cost as many reads a turn). Empty when unreadable.
pub fn children(pid: u32) -> Vec<u32> {
    std::fs::read_to_string(format!("/proc/{pid}/task/{pid}/children"))
        .map(|text| {
            text.split_whitespace()
                .filter_map(|c| c.parse().ok())
                .collect()
        })
        .unwrap_or_default()
}

/// No socket listens on the upstream's address: found from /proc/net/tcp alone, before
/// any process's open files are scanned, so looking again costs little.
#[derive(Debug, thiserror::Error)]
#[error("nothing listens on {0} in this network namespace")]
pub struct NothingListens(pub String);

/// The thread ids of process `pid` (the entries of /proc/PID/task).
pub fn threads(pid: u32) -> std::io::Result<Vec<u32>> {
    let mut tids = Vec::new();
    for entry in std::fs::read_dir(format!("/proc/{pid}/task"))? {
        let entry = entry?;
        if let Some(tid) = entry.file_name().to_str().and_then(|s| s.parse().ok()) {
            tids.push(tid);
        }
    }
    Ok(tids)
}

/// The processes holding a socket that listens on `upstream` (`host:port`), found through
/// /proc/net/tcp{,6} (the sockets' inodes) and /proc/*/fd (who holds them), lowest pid
/// first; never empty.
fn listener_pids(upstream: &str) -> anyhow::Result<Vec<u32>> {
    let addrs: Vec<SocketAddr> = upstream
        .to_socket_addrs()
        .with_context(|| format!("resolving {upstream}"))?
        .collect();
    let local: Vec<SocketAddr> = addrs.into_iter().filter(|a| is_local(a.ip())).collect();
    if local.is_empty() {
        return Err(NotLocal(upstream.to_owned()).into());
    }
    let mut inodes = BTreeSet::new();
    let mut owners = BTreeSet::new();
    let tables = [procfs::net::tcp(), procfs::net::tcp6()];
    for table in tables.into_iter().flatten() {
        for entry in table {
            if entry.state == TcpState::Listen
                && local.iter().any(|a| serves(&entry.local_address, a))
            {
                inodes.insert(entry.inode);
                owners.insert(entry.uid);
            }
        }
    }
    if inodes.is_empty() {
        return Err(NothingListens(upstream.to_owned()).into());
    }
    let mut holders = BTreeSet::new();
    let mut unreadable = 0usize;
    for process in procfs::process::all_processes().context("listing /proc")? {
        let Ok(process) = process else { continue };
        match process.fd() {
            Ok(fds) => {
                for fd in fds.flatten() {
                    if let FDTarget::Socket(inode) = fd.target {
                        if inodes.contains(&inode) {
                            holders.insert(process.pid() as u32);
                        }
                    }
                }
            }
            Err(_) => unreadable += 1,
        }
    }
    // Forked servers share one listening socket; the oldest holder (lowest pid, as a
    // rule the parent) comes first: it names the group.
    match holders.first() {
        Some(_) => Ok(holders.into_iter().collect()),
        None => bail!(
            "a socket listens on {upstream} (owned by uid {}), but no process whose /proc/PID/fd this user can read holds it ({unreadable} processes are not readable): run phasescope as that user or as root, or grant CAP_SYS_PTRACE, or set [tap.process] pid",
            owners.iter().map(|u| u.to_string()).collect::<Vec<_>>().join(", "),
        ),
    }
}

/// A listening socket bound to `bound` accepts connections to `target`.
fn serves(bound: &SocketAddr, target: &SocketAddr) -> bool {
    if bound.port() != target.port() {
        return false;
    }
    let ip = bound.ip();
    if ip.is_unspecified() {
        // 0.0.0.0 takes IPv4 only; [::] takes both unless IPV6_V6ONLY (which /proc does
        // not show), so count it for both.
        return ip.is_ipv6() || target.is_ipv4();
    }
    let v4 = |ip: IpAddr| match ip {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(ip, IpAddr::V4),
        v4 => v4,
    };
    v4(ip) == v4(target.ip())
}

/// Whether `ip` is one of this host's addresses: only then can a socket bind to it.
fn is_local(ip: IpAddr) -> bool {
    ip.is_loopback() || UdpSocket::bind(SocketAddr::new(ip, 0)).is_ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_wildcard_listener_serves_its_family() {
        let t4: SocketAddr = "127.0.0.1:80".parse().unwrap();
        let t6: SocketAddr = "[::1]:80".parse().unwrap();
        assert!(serves(&"0.0.0.0:80".parse().unwrap(), &t4));
        assert!(!serves(&"0.0.0.0:80".parse().unwrap(), &t6));
        assert!(serves(&"[::]:80".parse().unwrap(), &t4));
        assert!(serves(&"127.0.0.1:80".parse().unwrap(), &t4));
        assert!(!serves(&"127.0.0.2:80".parse().unwrap(), &t4));
        assert!(!serves(&"127.0.0.1:81".parse().unwrap(), &t4));
        assert!(serves(&"[::ffff:127.0.0.1]:80".parse().unwrap(), &t4));
    }

    #[test]
    fn remote_addresses_are_not_local() {
        assert!(is_local("127.0.0.1".parse().unwrap()));
        // TEST-NET-3: never assigned to a host.
        assert!(!is_local("203.0.113.9".parse().unwrap()));
    }

    #[test]
    fn finds_the_process_listening_on_a_port() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let pid = Target::Listener(addr.to_string()).locate().unwrap();
        assert_eq!(pid, std::process::id());
    }

    #[test]
    fn nothing_listening_is_a_clear_error() {
        let port = {
            let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            l.local_addr().unwrap().port()
        };
        let e = Target::Listener(format!("127.0.0.1:{port}"))
            .locate()
            .unwrap_err();
        assert!(e.to_string().contains("nothing listens"), "{e}");
        let e = Target::Listener("203.0.113.9:80".into())
            .locate()
            .unwrap_err();
        assert!(e.to_string().contains("not an address of this host"), "{e}");
    }
}
