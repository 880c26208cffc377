//! The readiness line: every server prints exactly one `SHOAL_READY <role> <addr>` on stdout once
//! it listens (the bound address, so `--listen ...:0` works), and `shoal up` prints
//! `SHOAL_READY cluster <addr>` once the whole cluster serves. Launchers and tests wait for it.
//! This module is the one owner of its format, for writers and readers alike.
//!
//! Must not: do the printing (each server writes the line and flushes; logs go to stderr).

use std::net::SocketAddr;

const PREFIX: &str = "SHOAL_READY";

/// The line for `role` listening on `addr`, without the newline.
pub fn line(role: &str, addr: impl std::fmt::Display) -> String {
    format!("{PREFIX} {role} {addr}")
}

/// `SHOAL_READY <role> <addr>` → (role, addr); `None` for any other line.
pub fn parse(line: &str) -> Option<(&str, SocketAddr)> {
    let mut words = line.split_whitespace();
    match (words.next(), words.next(), words.next(), words.next()) {
        (Some(PREFIX), Some(role), Some(addr), None) => Some((role, addr.parse().ok()?)),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_parse_back_and_others_do_not() {
        let addr: SocketAddr = "127.0.0.1:27101".parse().expect("addr");
        assert_eq!(parse(&line("shard", addr)), Some(("shard", addr)));
        assert_eq!(parse("SHOAL_READY router [::1]:0\n").map(|(r, _)| r), Some("router"));
        for bad in
            ["SHOAL_READY shard", "SHOAL_READY shard nowhere", "shard 127.0.0.1:1", "SHOAL_READY a 127.0.0.1:1 x", ""]
        {
            assert_eq!(parse(bad), None, "{bad:?}");
        }
    }
}
