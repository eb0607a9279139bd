//! Before anyone is known: who is at the door, and how often they may
//! fail to get in.
//!
//! Every request without a valid credential costs the server work before
//! it can be refused (an access token is two JSON parses and a signature
//! check), and no identity's rate limit applies yet. So each client
//! address has a bucket of failures (`--failed-auth-per-minute`): a
//! missing, unknown or refused credential takes a token, and an address
//! whose bucket is empty is answered 429 before its credential is
//! checked, unless it is an enrolled key (a hash to recognise) or an
//! access token that passed its check in the last five minutes: a crowd
//! failing behind one address does not lock out the people behind it
//! who have credentials. IPv6
//! clients are counted by their /64, which one machine usually holds
//! whole.
//!
//! Behind a reverse proxy every request comes from the proxy's address.
//! Addresses named by `--trusted-proxy` are believed about who they
//! forward for: the client is the right-most `X-Forwarded-For` entry that
//! is not itself a trusted proxy (entries further left were written by
//! the client and prove nothing). Without trusted proxies the header is
//! ignored.

use std::{
    net::{IpAddr, Ipv6Addr, SocketAddr},
    sync::Mutex,
    time::Instant,
};

use axum::http::HeaderMap;
use ipnet::IpNet;

/// Token buckets keyed by a string (an identity, a client address):
/// `per_minute` tokens, refilled continuously, a crowd of keys gone quiet
/// swept out (`airlock_gateway::rate::Swept`).
pub struct Buckets {
    per_minute: u32,
    map: Mutex<airlock_gateway::rate::Swept<(f64, Instant)>>,
    /// The clock the sweeps are timed by.
    started: Instant,
}

impl Buckets {
    /// `per_minute` 0: no limit.
    pub fn new(per_minute: u32) -> Self {
        Self {
            per_minute,
            map: Mutex::new(airlock_gateway::rate::Swept::new()),
            started: Instant::now(),
        }
    }

    pub fn per_minute(&self) -> u32 {
        self.per_minute
    }

    /// Takes a token from `key`'s bucket, or says how many whole seconds
    /// until the next one is due.
    pub fn take(&self, key: &str) -> Result<(), u64> {
        let per_minute = self.per_minute as f64;
        if per_minute == 0.0 {
            return Ok(());
        }
        let mut buckets = self.map.lock().unwrap_or_else(|p| p.into_inner());
        let now = Instant::now();
        let refill = std::time::Duration::from_secs(60);
        if !buckets.map.contains_key(key) {
            // Keys are not a fixed, small set: buckets idle a minute
            // (full again, so the same as none) are swept out.
            let now_ms = now.saturating_duration_since(self.started).as_millis() as i64;
            buckets.make_room(now_ms, |(_, at)| now.duration_since(*at) < refill);
        }
        let (tokens, at) = buckets
            .map
            .entry(key.to_string())
            .or_insert((per_minute, now));
        *tokens =
            (*tokens + now.duration_since(*at).as_secs_f64() * per_minute / 60.0).min(per_minute);
        *at = now;
        if *tokens < 1.0 {
            let wait = (1.0 - *tokens) * 60.0 / per_minute;
            return Err(wait.ceil().max(1.0) as u64);
        }
        *tokens -= 1.0;
        Ok(())
    }

    /// Gives a token taken back (the request it was taken for was not
    /// what the bucket counts).
    pub fn refund(&self, key: &str) {
        let mut buckets = self.map.lock().unwrap_or_else(|p| p.into_inner());
        if let Some((tokens, _)) = buckets.map.get_mut(key) {
            *tokens = (*tokens + 1.0).min(self.per_minute as f64);
        }
    }

    /// Keys with a bucket kept (for tests).
    pub fn tracked(&self) -> usize {
        self.map.lock().unwrap_or_else(|p| p.into_inner()).map.len()
    }
}

/// How long an access token that passed its check is let past an empty
/// bucket (it is checked again each time; this only says it is worth it).
const GOOD_FOR_MS: i64 = 5 * 60 * 1000;

/// Access tokens that passed their check lately, by their hash: behind
/// an address whose failures used its bucket up (a NAT, a proxy not
/// declared), their holders are still let in to be checked, as enrolled
/// keys are, so a crowd failing there does not lock out people signed in
/// with the identity provider. Only a token that was once good gets in;
/// what it may do is decided by the full check, never by this set.
pub struct GoodTokens {
    map: Mutex<airlock_gateway::rate::Swept<i64>>,
    started: Instant,
}

impl Default for GoodTokens {
    fn default() -> Self {
        Self {
            map: Mutex::new(airlock_gateway::rate::Swept::new()),
            started: Instant::now(),
        }
    }
}

impl GoodTokens {
    fn now_ms(&self) -> i64 {
        self.started.elapsed().as_millis() as i64
    }

    pub fn remember(&self, token: &str) {
        let key = hex::encode(airlock_gateway::keys::hash(token));
        let now = self.now_ms();
        let mut map = self.map.lock().unwrap_or_else(|p| p.into_inner());
        if !map.map.contains_key(&key) {
            map.make_room(now, |at| now - *at < GOOD_FOR_MS);
        }
        map.map.insert(key, now);
    }

    /// A token that failed its check is not let past again.
    pub fn forget(&self, token: &str) {
        let key = hex::encode(airlock_gateway::keys::hash(token));
        let mut map = self.map.lock().unwrap_or_else(|p| p.into_inner());
        map.map.remove(&key);
    }

    pub fn contains(&self, token: &str) -> bool {
        let key = hex::encode(airlock_gateway::keys::hash(token));
        let now = self.now_ms();
        let map = self.map.lock().unwrap_or_else(|p| p.into_inner());
        map.map.get(&key).is_some_and(|at| now - *at < GOOD_FOR_MS)
    }
}

/// The address a request is counted by: the peer's, or with trusted
/// proxies, the client's they forward for.
pub fn client_address(peer: IpAddr, headers: &HeaderMap, trusted: &[IpNet]) -> IpAddr {
    // A listener on `[::]` sees an IPv4 proxy as `::ffff:a.b.c.d`: compare
    // (and count) such addresses as the IPv4 they are.
    let peer = peer.to_canonical();
    let is_trusted = |ip: &IpAddr| trusted.iter().any(|net| net.contains(ip));
    if !is_trusted(&peer) {
        return peer;
    }
    // Every X-Forwarded-For header, in order, as one list, read from the
    // right: each entry was appended by the hop before it, so the first
    // one that is not a trusted proxy is the client. Entries left of it
    // were written by the client and are never read, so nothing it puts
    // there (an address, garbage, bytes that are not text) changes who
    // it is counted as. Garbage right of it was written by a trusted
    // proxy: nothing can be believed, and the peer is the client.
    let entries: Vec<&[u8]> = headers
        .get_all("x-forwarded-for")
        .iter()
        .flat_map(|v| v.as_bytes().split(|b| *b == b','))
        .collect();
    for entry in entries.into_iter().rev() {
        let Some(ip) = std::str::from_utf8(entry).ok().and_then(|s| {
            let s = s.trim();
            s.parse::<IpAddr>()
                .ok()
                .or_else(|| s.parse::<SocketAddr>().ok().map(|a| a.ip()))
                .map(|ip| ip.to_canonical())
        }) else {
            return peer;
        };
        if !is_trusted(&ip) {
            return ip;
        }
    }
    peer
}

/// The key a client address is counted under: IPv4 whole, IPv6 by its
/// /64 (an IPv4-mapped IPv6 address as its IPv4).
pub fn address_key(ip: IpAddr) -> String {
    match ip {
        IpAddr::V4(v4) => v4.to_string(),
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => v4.to_string(),
            None => {
                let s = v6.segments();
                let prefix = Ipv6Addr::new(s[0], s[1], s[2], s[3], 0, 0, 0, 0);
                format!("{prefix}/64")
            }
        },
    }
}

/// `--trusted-proxy`: an address (`10.0.0.5`) or a network (`10.0.0.0/8`).
pub fn parse_trusted_proxy(s: &str) -> Result<IpNet, String> {
    s.parse::<IpNet>()
        .or_else(|_| s.parse::<IpAddr>().map(IpNet::from))
        .map_err(|_| {
            format!("`{s}` is not an address or a network; write e.g. 127.0.0.1 or 10.0.0.0/8")
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(values: &[&str]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for v in values {
            h.append("x-forwarded-for", v.parse().unwrap());
        }
        h
    }

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn forwarded_for_is_believed_only_from_trusted_proxies() {
        let trusted = [parse_trusted_proxy("10.0.0.0/8").unwrap()];
        let h = headers(&["203.0.113.9"]);
        // From a proxy we trust: the client it forwards for.
        assert_eq!(
            client_address(ip("10.1.2.3"), &h, &trusted),
            ip("203.0.113.9")
        );
        // From anyone else: the header is the client's own word.
        assert_eq!(
            client_address(ip("198.51.100.7"), &h, &trusted),
            ip("198.51.100.7")
        );
        // No trusted proxies: never believed.
        assert_eq!(client_address(ip("10.1.2.3"), &h, &[]), ip("10.1.2.3"));
    }

    #[test]
    fn the_client_is_the_right_most_address_no_trusted_proxy_wrote() {
        let trusted = [
            parse_trusted_proxy("10.0.0.1").unwrap(),
            parse_trusted_proxy("10.0.0.2").unwrap(),
        ];
        // The client wrote "1.1.1.1" itself; proxies appended the rest.
        let h = headers(&["1.1.1.1, 203.0.113.9", "10.0.0.2"]);
        assert_eq!(
            client_address(ip("10.0.0.1"), &h, &trusted),
            ip("203.0.113.9")
        );
        // Garbage the client wrote, left of what the proxy appended, is
        // never read: the client cannot make itself the proxy.
        let h = headers(&["not-an-address, 203.0.113.9"]);
        assert_eq!(
            client_address(ip("10.0.0.1"), &h, &trusted),
            ip("203.0.113.9")
        );
        let mut h = HeaderMap::new();
        h.append(
            "x-forwarded-for",
            axum::http::HeaderValue::from_bytes(b"\xff\xfe, 203.0.113.9").unwrap(),
        );
        assert_eq!(
            client_address(ip("10.0.0.1"), &h, &trusted),
            ip("203.0.113.9")
        );
        // Garbage right of the client was a trusted proxy's: the peer.
        let h = headers(&["203.0.113.9, not-an-address"]);
        assert_eq!(client_address(ip("10.0.0.1"), &h, &trusted), ip("10.0.0.1"));
        // Only trusted proxies in it: the peer.
        let h = headers(&["10.0.0.2"]);
        assert_eq!(client_address(ip("10.0.0.1"), &h, &trusted), ip("10.0.0.1"));
    }

    #[test]
    fn ipv6_clients_are_counted_by_their_64() {
        assert_eq!(
            address_key(ip("2001:db8:1:2:aaaa::1")),
            address_key(ip("2001:db8:1:2:bbbb::9"))
        );
        assert_ne!(
            address_key(ip("2001:db8:1:2::1")),
            address_key(ip("2001:db8:1:3::1"))
        );
        assert_eq!(address_key(ip("::ffff:192.0.2.1")), "192.0.2.1");
    }

    #[test]
    fn bad_trusted_proxies_are_refused_with_an_example() {
        let e = parse_trusted_proxy("10.0.0.0/33").unwrap_err();
        assert!(e.contains("10.0.0.0/8"), "{e}");
        assert!(parse_trusted_proxy("::1").is_ok());
    }

    #[test]
    fn an_empty_bucket_says_when_the_next_token_is_due() {
        let b = Buckets::new(2);
        b.take("a").unwrap();
        b.take("a").unwrap();
        let wait = b.take("a").unwrap_err();
        assert!((29..=30).contains(&wait), "{wait}");
        assert_eq!(b.take("b"), Ok(()), "per key");
        assert_eq!(b.tracked(), 2);
        b.refund("a");
        assert_eq!(b.take("a"), Ok(()), "a token given back");
    }

    #[test]
    fn only_tokens_once_good_are_remembered() {
        let good = GoodTokens::default();
        assert!(!good.contains("a.b.c"));
        good.remember("a.b.c");
        assert!(good.contains("a.b.c"));
        assert!(!good.contains("a.b.d"));
        good.forget("a.b.c");
        assert!(!good.contains("a.b.c"), "failed once, not let past again");
    }

    #[test]
    fn an_ipv4_proxy_seen_on_an_ipv6_listener_is_trusted() {
        let trusted = [parse_trusted_proxy("10.0.0.0/8").unwrap()];
        let h = headers(&["203.0.113.9"]);
        assert_eq!(
            client_address(ip("::ffff:10.0.0.1"), &h, &trusted),
            ip("203.0.113.9")
        );
    }
}
