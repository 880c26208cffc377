//! How a process's address becomes the URI a gRPC channel dials, and back: the one rule every
//! client (router → shard, shard → shard, anyone → config server) uses. The catalog stores bare
//! `host:port`; channels want `http://host:port` (TLS will make it `https://`, here and only here).
//!
//! Must not: open connections (callers build their own `tonic` endpoints with their timeouts).

/// The scheme every channel uses today.
const SCHEME: &str = "http://";

/// The URI to dial for `addr`: `host:port` gets the scheme; a URI that already has one (as
/// `--shard http://...` flags give) is kept as is.
pub fn uri(addr: &str) -> String {
    if addr.contains("://") { addr.to_owned() } else { format!("{SCHEME}{addr}") }
}

/// `host:port` of an address or a URI (the form the catalog and the replica-set status use).
pub fn host_port(addr: &str) -> &str {
    addr.split_once("://").map_or(addr, |(_, rest)| rest)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn addresses_and_uris_convert_both_ways() {
        assert_eq!(uri("127.0.0.1:27101"), "http://127.0.0.1:27101");
        assert_eq!(uri("http://h:1"), "http://h:1");
        assert_eq!(uri("https://h:1"), "https://h:1", "a given scheme is kept");
        assert_eq!(uri("httpbin:80"), "http://httpbin:80", "a host named http... is a host");
        assert_eq!(host_port("http://h:1"), "h:1");
        assert_eq!(host_port("h:1"), "h:1");
        assert_eq!(host_port(&uri("[::1]:5")), "[::1]:5");
    }
}
