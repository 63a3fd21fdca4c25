//! The protocols a tap speaks, and what differs between them outside their framer and
//! their connection.
//!
//! Each question the rest of the crate asks about a protocol is one method here, answered
//! for every protocol in one exhaustive match: a new protocol is a new variant, and the
//! compiler names each answer it still owes. The metrics, the snapshot and the route
//! table ask these methods instead of naming protocols. Which connection type serves a
//! client socket is the relay's half of the same table (`relay::protocol`): `config`
//! lies below the relay, so it cannot name the relay's types.

use std::fmt;
use std::str::FromStr;

use serde::Deserialize;

/// A tap's protocol. Its serde name is its [`Protocol::as_str`] (a unit test holds them
/// equal).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Protocol {
    Http,
    Resp,
}

impl Protocol {
    /// Every protocol, in the order the error for an unknown name lists them.
    pub const ALL: [Protocol; 2] = [Protocol::Http, Protocol::Resp];

    /// Its name: the config value, the snapshot's `protocol`, what the report shows.
    pub fn as_str(self) -> &'static str {
        match self {
            Protocol::Http => "http",
            Protocol::Resp => "resp",
        }
    }

    /// Its requests carry a method, which becomes the `method` label (folded into
    /// `metrics::labels::METHODS`). Without one, every request is labelled with the
    /// protocol's own name (RESP: the command is the `route` instead).
    #[inline]
    pub fn has_methods(self) -> bool {
        match self {
            Protocol::Http => true,
            Protocol::Resp => false,
        }
    }

    /// Its requests have heads whose size and field count are recorded: the snapshot's
    /// `request_heads`, read by the probe (RESP commands are framed, not parsed heads).
    pub fn has_request_heads(self) -> bool {
        match self {
            Protocol::Http => true,
            Protocol::Resp => false,
        }
    }

    /// Its routes are its command names, whatever the tap's `routes` rule says (RESP).
    pub fn routes_by_command(self) -> bool {
        match self {
            Protocol::Http => false,
            Protocol::Resp => true,
        }
    }
}

impl fmt::Display for Protocol {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for Protocol {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        let s = s.trim();
        if let Some(p) = Protocol::ALL.into_iter().find(|p| p.as_str() == s) {
            return Ok(p);
        }
        let names: Vec<String> = Protocol::ALL
            .iter()
            .map(|p| format!("{:?}", p.as_str()))
            .collect();
        Err(format!(
            "{s:?} is not a protocol; use {}",
            names.join(" or ")
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_protocol_reads_back_from_its_name_in_flags_and_files() {
        for p in Protocol::ALL {
            assert_eq!(p.as_str().parse::<Protocol>(), Ok(p));
            let name =
                serde::de::value::StrDeserializer::<serde::de::value::Error>::new(p.as_str());
            let from_file = Protocol::deserialize(name).unwrap();
            assert_eq!(from_file, p);
        }
        assert_eq!(
            "smtp".parse::<Protocol>(),
            Err("\"smtp\" is not a protocol; use \"http\" or \"resp\"".to_owned())
        );
    }
}
