//! How Airlock's HTTP listeners treat the connections they accept.

/// Every accepted socket sends at once (`TCP_NODELAY`). An answer goes
/// out in several small writes (an event stream's priming event, the
/// message, the closing chunk); with Nagle's algorithm on, the second
/// waited for the client's delayed acknowledgement: about 40 ms on every
/// request of a kept-alive connection (Node's `fetch`, and so the
/// TypeScript SDK and Claude Code). A socket that refuses the option
/// still serves, only slower.
pub fn no_delay(listener: tokio::net::TcpListener) -> NoDelay {
    use axum::serve::ListenerExt;
    listener.tap_io(set_no_delay as fn(&mut tokio::net::TcpStream))
}

/// A listener whose accepted sockets send at once; axum gives its
/// handlers the peer's address as for a plain `TcpListener`.
pub type NoDelay = axum::serve::TapIo<tokio::net::TcpListener, fn(&mut tokio::net::TcpStream)>;

fn set_no_delay(tcp: &mut tokio::net::TcpStream) {
    if let Err(e) = tcp.set_nodelay(true) {
        tracing::debug!(error = %e, "could not set TCP_NODELAY on an accepted socket");
    }
}
