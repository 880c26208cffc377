//! The text of SCRAM messages (RFC 5802 §7): parsing the client's two messages, with the user
//! name's `=2C`/`=3D` escapes, and nothing else. Channel binding is not offered (as MongoDB over
//! TLS does not either): a client that requires it (`p=`) is refused.

use super::unb64;

/// Longest message accepted (a proof and nonce are well under 1 KiB; names are bounded too).
pub const MESSAGE_BYTES_MAX: usize = 4096;

/// A malformed message; its text says what was wrong without naming any secret.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("malformed SCRAM message: {0}")]
pub struct Malformed(pub &'static str);

/// `client-first-message`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClientFirst {
    /// The GS2 header as sent (`n,,` or `y,,`), echoed back base64-encoded in `c=`.
    pub gs2_header: String,
    pub user: String,
    pub nonce: String,
    /// `client-first-message-bare`, part of the AuthMessage.
    pub bare: String,
}

impl ClientFirst {
    pub fn parse(bytes: &[u8]) -> Result<ClientFirst, Malformed> {
        let text = text(bytes)?;
        let mut parts = text.splitn(3, ',');
        let flag = parts.next().ok_or(Malformed("empty message"))?;
        let authzid = parts.next().ok_or(Malformed("no GS2 header"))?;
        let bare = parts.next().ok_or(Malformed("no client-first-message-bare"))?;
        match flag {
            "n" | "y" => {}
            f if f.starts_with("p=") => return Err(Malformed("channel binding is not supported")),
            _ => return Err(Malformed("bad GS2 channel binding flag")),
        }
        if !authzid.is_empty() && !authzid.starts_with("a=") {
            return Err(Malformed("bad GS2 authzid"));
        }
        let mut fields = bare.split(',');
        let user = match fields.next() {
            Some(f) if f.starts_with("m=") => return Err(Malformed("mandatory extensions are not supported")),
            Some(f) => unescape_name(f.strip_prefix("n=").ok_or(Malformed("no user name"))?)?,
            None => return Err(Malformed("no user name")),
        };
        let nonce = fields.next().and_then(|f| f.strip_prefix("r=")).ok_or(Malformed("no client nonce"))?;
        check_nonce(nonce)?;
        // Optional extensions (`x=...`) are ignored, as RFC 5802 allows; anything else is not SCRAM.
        if !fields.all(|f| f.len() >= 2 && f.as_bytes()[0].is_ascii_alphabetic() && f.as_bytes()[1] == b'=') {
            return Err(Malformed("bad extension attribute"));
        }
        if user.is_empty() {
            return Err(Malformed("empty user name"));
        }
        Ok(ClientFirst {
            gs2_header: format!("{flag},{authzid},"),
            user,
            nonce: nonce.to_owned(),
            bare: bare.to_owned(),
        })
    }
}

/// `client-final-message`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClientFinal {
    /// The decoded `c=` attribute: must equal the GS2 header of the first message.
    pub channel_binding: Vec<u8>,
    pub nonce: String,
    pub proof: Vec<u8>,
    /// `client-final-message-without-proof`, part of the AuthMessage.
    pub without_proof: String,
}

impl ClientFinal {
    pub fn parse(bytes: &[u8]) -> Result<ClientFinal, Malformed> {
        let text = text(bytes)?;
        let (without_proof, proof) = text.rsplit_once(",p=").ok_or(Malformed("no proof"))?;
        let mut fields = without_proof.split(',');
        let binding = fields.next().and_then(|f| f.strip_prefix("c=")).ok_or(Malformed("no channel binding"))?;
        let nonce = fields.next().and_then(|f| f.strip_prefix("r=")).ok_or(Malformed("no nonce"))?;
        Ok(ClientFinal {
            channel_binding: unb64(binding).ok_or(Malformed("channel binding is not base64"))?,
            nonce: nonce.to_owned(),
            proof: unb64(proof).ok_or(Malformed("proof is not base64"))?,
            without_proof: without_proof.to_owned(),
        })
    }
}

fn text(bytes: &[u8]) -> Result<&str, Malformed> {
    if bytes.len() > MESSAGE_BYTES_MAX {
        return Err(Malformed("message too long"));
    }
    std::str::from_utf8(bytes).map_err(|_| Malformed("not UTF-8"))
}

/// RFC 5802's `saslname`: `=2C` is `,` and `=3D` is `=`; any other `=` is an error.
fn unescape_name(name: &str) -> Result<String, Malformed> {
    let mut out = String::with_capacity(name.len());
    let mut rest = name;
    while let Some(i) = rest.find('=') {
        out.push_str(&rest[..i]);
        rest = match &rest[i..] {
            r if r.starts_with("=2C") => {
                out.push(',');
                &r[3..]
            }
            r if r.starts_with("=3D") => {
                out.push('=');
                &r[3..]
            }
            _ => return Err(Malformed("bad escape in user name")),
        };
    }
    out.push_str(rest);
    Ok(out)
}

/// A nonce is printable ASCII without `,` (RFC 5802 `printable`).
fn check_nonce(nonce: &str) -> Result<(), Malformed> {
    if nonce.is_empty() || !nonce.bytes().all(|b| (0x21..=0x7e).contains(&b) && b != b',') {
        return Err(Malformed("bad nonce"));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn client_first_parses_and_unescapes() {
        let m = ClientFirst::parse(b"n,,n=us=2Cer=3D,r=fyko+d2lbbFgONRv9qkxdawL").unwrap();
        assert_eq!(m.user, "us,er=");
        assert_eq!(m.nonce, "fyko+d2lbbFgONRv9qkxdawL");
        assert_eq!(m.gs2_header, "n,,");
        assert_eq!(m.bare, "n=us=2Cer=3D,r=fyko+d2lbbFgONRv9qkxdawL");
    }

    #[test]
    fn client_first_refusals() {
        for bad in [
            &b""[..],
            b"n,,",
            b"p=tls-unique,,n=u,r=x",
            b"n,,n=u",
            b"n,,n=u,r=",
            b"n,,n=u=41,r=abc",
            b"n,,r=abc",
            b"n,,n=,r=abc",
            b"x,,n=u,r=abc",
            b"n,,m=ext,n=u,r=abc",
            b"n,,n=u,r=a,b",
            b"\xff\xfe",
        ] {
            assert!(ClientFirst::parse(bad).is_err(), "{:?}", String::from_utf8_lossy(bad));
        }
        assert!(ClientFirst::parse(&vec![b'a'; MESSAGE_BYTES_MAX + 1]).is_err());
    }

    #[test]
    fn client_final_splits_off_the_proof() {
        let m = ClientFinal::parse(b"c=biws,r=abcdef,p=v0X8v3Bz2T0CJGbJQyF0X+HI4Ts=").unwrap();
        assert_eq!(m.channel_binding, b"n,,");
        assert_eq!(m.nonce, "abcdef");
        assert_eq!(m.without_proof, "c=biws,r=abcdef");
        assert_eq!(m.proof.len(), 20);
        assert!(ClientFinal::parse(b"c=biws,r=abc").is_err());
        assert!(ClientFinal::parse(b"c=!!,r=abc,p=AAAA").is_err());
        assert!(ClientFinal::parse(b"r=abc,p=AAAA").is_err());
    }
}
