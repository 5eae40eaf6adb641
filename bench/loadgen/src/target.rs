//! Where the load goes. The generator only ever targets this machine: the target must be a
//! plain `http://` URL whose host is a loopback literal (127.0.0.0/8, `::1`) or `localhost`,
//! because a load test aimed anywhere else would be traffic at someone else's server.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};

/// A validated loopback target.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Target {
    /// Address to connect to.
    pub addr: SocketAddr,
    /// Value for the `Host` header (`host:port` as given).
    pub authority: String,
}

/// Why a target was refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TargetError {
    /// Only `http://` is supported (no TLS on loopback).
    Scheme(String),
    /// No usable `host:port`.
    Malformed(String),
    /// The host is not on this machine.
    NotLoopback(String),
}

// Written by hand rather than with thiserror so the load generator keeps the dependency set
// the workspace lock file already records for it.
impl std::fmt::Display for TargetError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Scheme(url) => write!(f, "target {url:?} must start with http://"),
            Self::Malformed(url) => write!(f, "target {url:?} must be http://HOST:PORT"),
            Self::NotLoopback(host) => write!(
                f,
                "target host {host:?} is not a loopback address; the load generator only \
                 targets 127.0.0.0/8, ::1 or localhost"
            ),
        }
    }
}

impl std::error::Error for TargetError {}

/// Parses `http://HOST:PORT[/]` and refuses anything that is not loopback.
pub fn parse_target(url: &str) -> Result<Target, TargetError> {
    let rest = url
        .strip_prefix("http://")
        .ok_or_else(|| TargetError::Scheme(url.to_owned()))?;
    let authority = rest.trim_end_matches('/');
    if authority.is_empty() || authority.contains('/') || authority.contains('@') {
        return Err(TargetError::Malformed(url.to_owned()));
    }
    let (host, port) =
        split_host_port(authority).ok_or_else(|| TargetError::Malformed(url.to_owned()))?;
    let ip = if host.eq_ignore_ascii_case("localhost") {
        IpAddr::V4(Ipv4Addr::LOCALHOST)
    } else {
        host.parse::<IpAddr>()
            .map_err(|_| TargetError::NotLoopback(host.to_owned()))?
    };
    if !ip.is_loopback() {
        return Err(TargetError::NotLoopback(host.to_owned()));
    }
    Ok(Target {
        addr: SocketAddr::new(ip, port),
        authority: authority.to_owned(),
    })
}

/// `host:port` or `[v6]:port`; the port is required and non-zero.
fn split_host_port(authority: &str) -> Option<(&str, u16)> {
    let (host, port) = if let Some(v6) = authority.strip_prefix('[') {
        let (host, after) = v6.split_once(']')?;
        (host, after.strip_prefix(':')?)
    } else {
        authority.rsplit_once(':')?
    };
    let port: u16 = port.parse().ok()?;
    (port != 0 && !host.is_empty()).then_some((host, port))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_loopback_http_targets_are_accepted() {
        let cases: &[(&str, &str, Option<&str>)] = &[
            (
                "the usual local server",
                "http://127.0.0.1:8080",
                Some("127.0.0.1:8080"),
            ),
            (
                "a trailing slash is fine",
                "http://127.0.0.1:8080/",
                Some("127.0.0.1:8080"),
            ),
            (
                "all of 127/8 is loopback",
                "http://127.1.2.3:9000",
                Some("127.1.2.3:9000"),
            ),
            (
                "localhost means 127.0.0.1",
                "http://localhost:81",
                Some("127.0.0.1:81"),
            ),
            ("IPv6 loopback", "http://[::1]:8080", Some("[::1]:8080")),
            ("a private address is refused", "http://10.0.0.1:8080", None),
            ("a public address is refused", "http://8.8.8.8:80", None),
            (
                "the wildcard address is refused",
                "http://0.0.0.0:8080",
                None,
            ),
            (
                "host names other than localhost are refused",
                "http://example.com:80",
                None,
            ),
            ("https is refused", "https://127.0.0.1:8080", None),
            ("a port is required", "http://127.0.0.1", None),
            ("port 0 is refused", "http://127.0.0.1:0", None),
            ("paths are refused", "http://127.0.0.1:80/v1", None),
            (
                "userinfo cannot hide another host",
                "http://127.0.0.1:80@10.0.0.1:80",
                None,
            ),
        ];
        for (name, url, want) in cases {
            let got = parse_target(url).ok().map(|t| t.addr.to_string());
            assert_eq!(got.as_deref(), *want, "{name}: {url}");
        }
    }

    #[test]
    fn refusal_names_the_host() {
        let err = parse_target("http://192.168.1.5:80").unwrap_err();
        assert!(err.to_string().contains("192.168.1.5"), "{err}");
        assert!(err.to_string().contains("loopback"), "{err}");
    }
}
