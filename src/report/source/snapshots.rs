//! Where snapshots come from: a running proxy's admin server or a saved file.

use std::fmt;
use std::path::{Path, PathBuf};

use anyhow::Context;

use super::http::{self, Url};
use crate::snapshot::Snapshot;

/// The admin API path of the snapshot.
pub const SNAPSHOT_PATH: &str = "/api/snapshot";
/// The admin API path that empties the snapshot histograms.
pub const RESET_PATH: &str = "/api/reset";

/// One `--from` argument.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Source {
    /// An admin server; a URL with no path means its `/api/snapshot`.
    Admin(Url),
    /// A snapshot file, as `phasescope snapshot` saves it.
    File(PathBuf),
}

impl Source {
    /// `http://…` is an admin server, anything else a file.
    pub fn parse(arg: &str) -> anyhow::Result<Source> {
        if arg.starts_with("http://") || arg.starts_with("https://") {
            let url = Url::parse(arg)?;
            let url = if url.path_and_query == "/" {
                url.with_path(SNAPSHOT_PATH)
            } else {
                url
            };
            http::is_admin_server(&url);
            Ok(Source::Admin(url))
        } else {
            Ok(Source::File(PathBuf::from(arg)))
        }
    }

    /// The admin server's base URL for `addr` (`host:port`), as `--from` defaults to.
    pub fn admin(addr: &str) -> anyhow::Result<Source> {
        Source::parse(&format!("http://{addr}"))
    }

    /// The document's text: fetched or read.
    pub fn read_text(&self) -> anyhow::Result<String> {
        match self {
            Source::Admin(url) => {
                let body = http::get(url).map_err(|e| no_admin_server(url, e))?;
                String::from_utf8(body).with_context(|| format!("{url}: the snapshot is not UTF-8"))
            }
            Source::File(path) => {
                std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))
            }
        }
    }

    /// Fetches or reads the snapshot and checks it is one.
    pub fn load(&self) -> anyhow::Result<Snapshot> {
        let text = self.read_text()?;
        Snapshot::from_json(&text).with_context(|| format!("{self}"))
    }
}

/// A refused connection to an admin URL says what it means: no phasescope runs there, and
/// how to point at one (the bare "Connection refused" read as a fault of the report).
pub fn no_admin_server(url: &Url, e: anyhow::Error) -> anyhow::Error {
    let refused = e.chain().any(|c| {
        c.downcast_ref::<std::io::Error>()
            .is_some_and(|io| io.kind() == std::io::ErrorKind::ConnectionRefused)
    });
    if !refused {
        return e;
    }
    anyhow::anyhow!(
        "no phasescope is running at {} (nothing listens there): start one with `phasescope run`, \
         or read another with --from http://HOST:PORT (its admin address) or --from a snapshot file",
        url.authority
    )
}

impl fmt::Display for Source {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Source::Admin(url) => write!(f, "{url}"),
            Source::File(path) => write!(f, "{}", path.display()),
        }
    }
}

/// Loads every source, in order.
pub fn load_all(sources: &[Source]) -> anyhow::Result<Vec<Snapshot>> {
    sources.iter().map(Source::load).collect()
}

/// Loads snapshot files given as paths (compare takes files only).
pub fn load_files(paths: &[impl AsRef<Path>]) -> anyhow::Result<Vec<Snapshot>> {
    paths
        .iter()
        .map(|p| Source::File(p.as_ref().to_owned()).load())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_are_admin_servers_and_a_bare_one_means_the_snapshot() {
        match Source::parse("http://127.0.0.1:9464").unwrap() {
            Source::Admin(u) => assert_eq!(u.to_string(), "http://127.0.0.1:9464/api/snapshot"),
            other => panic!("{other:?}"),
        }
        match Source::parse("http://127.0.0.1:9464/other").unwrap() {
            Source::Admin(u) => assert_eq!(u.path_and_query, "/other"),
            other => panic!("{other:?}"),
        }
        assert_eq!(
            Source::parse("run1.json").unwrap(),
            Source::File("run1.json".into())
        );
        assert!(Source::parse("https://x").is_err());
    }

    #[test]
    fn a_file_that_is_not_a_snapshot_is_refused_with_its_name() {
        let dir = std::env::temp_dir().join(format!("phasescope-src-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("x.json");
        std::fs::write(&path, "{\"format\":\"something\"}").unwrap();
        let e = Source::File(path.clone()).load().unwrap_err();
        assert!(format!("{e:#}").contains("x.json"), "{e:#}");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
