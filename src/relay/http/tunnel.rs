//! After a protocol switch (101) or a CONNECT, the connection is a plain byte tunnel.

use tokio::io::{copy_bidirectional, AsyncWriteExt};
use tokio::net::TcpStream;

/// Bytes moved through a tunnel, per direction.
#[derive(Debug, Default, Clone, Copy)]
pub struct Moved {
    pub to_upstream: u64,
    pub to_client: u64,
}

/// Forwards what was already buffered on each side, then copies both ways until both
/// sides have closed.
pub async fn run(
    client: &mut TcpStream,
    upstream: &mut TcpStream,
    client_buffered: &[u8],
    upstream_buffered: &[u8],
) -> std::io::Result<Moved> {
    upstream.write_all(client_buffered).await?;
    client.write_all(upstream_buffered).await?;
    let (up, down) = copy_bidirectional(client, upstream).await?;
    Ok(Moved {
        to_upstream: up + client_buffered.len() as u64,
        to_client: down + upstream_buffered.len() as u64,
    })
}
