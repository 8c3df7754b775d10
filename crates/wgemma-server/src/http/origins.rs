//! The `Host` names and `Origin`s the flags allow, compared as a browser writes them:
//! `--allowed-hosts api.example:8443` allows that name on that port only (a bare name, any
//! port); an origin's default port (`:443` for https, `:80` for http) is dropped on both
//! sides, since a browser never sends it (`--cors-origins https://app.example:443` matched
//! no request before).

/// One `--allowed-hosts` entry: a lower-case name without its trailing dot, and a port if
/// it names one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AllowedHost {
    name: String,
    port: Option<u16>,
}

impl AllowedHost {
    /// Parses `api.example`, `api.example:8080` or `[::1]:8080`; None for anything else.
    pub fn parse(entry: &str) -> Option<AllowedHost> {
        if entry.is_empty() || entry.contains(['/', ' ', '@']) {
            return None;
        }
        let (name, port) = split_host(entry);
        let port = match port {
            Some(p) => Some(p.parse::<u16>().ok()?),
            None => None,
        };
        // A colon left in a name is a port that is not a number (`api.example:x`).
        if name.contains(':') && !name.starts_with('[') {
            return None;
        }
        let name = normal_name(name);
        (!name.is_empty()).then_some(AllowedHost { name, port })
    }

    /// Whether a request's `Host` header is this entry (a `Host` without a port is port 80:
    /// the server speaks plain HTTP).
    pub fn matches(&self, host: &str) -> bool {
        let (name, port) = split_host(host.trim());
        if normal_name(name) != self.name {
            return false;
        }
        match self.port {
            None => true,
            Some(want) => port.map_or(Some(80), |p| p.parse::<u16>().ok()) == Some(want),
        }
    }
}

/// `example.com:8080` -> (`example.com`, `8080`), `[::1]:80` -> (`[::1]`, `80`).
pub fn split_host(host: &str) -> (&str, Option<&str>) {
    if host.starts_with('[') {
        return match host.find(']') {
            Some(end) => (
                &host[..=end],
                host[end + 1..].strip_prefix(':').filter(|p| !p.is_empty()),
            ),
            None => (host, None),
        };
    }
    match host.rsplit_once(':') {
        Some((name, port)) if !port.is_empty() && port.bytes().all(|b| b.is_ascii_digit()) => {
            (name, Some(port))
        }
        _ => (host, None),
    }
}

fn normal_name(name: &str) -> String {
    name.trim_end_matches('.').to_ascii_lowercase()
}

/// An origin as compared: lower case, no trailing slash, no default port.
pub fn normal_origin(origin: &str) -> String {
    let o = origin.trim().trim_end_matches('/').to_ascii_lowercase();
    for (scheme, port) in [("https://", ":443"), ("http://", ":80")] {
        if o.starts_with(scheme) {
            if let Some(bare) = o.strip_suffix(port) {
                return bare.to_string();
            }
        }
    }
    o
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hosts_with_ports_and_origins_with_default_ports_match() {
        let with_port = AllowedHost::parse("API.example:8080").unwrap();
        assert!(with_port.matches("api.example:8080") && with_port.matches("api.example.:8080"));
        assert!(!with_port.matches("api.example:9090") && !with_port.matches("api.example"));
        let any_port = AllowedHost::parse("api.example").unwrap();
        assert!(any_port.matches("api.example:1234") && any_port.matches("API.EXAMPLE"));
        assert!(!any_port.matches("evil.example"));
        let http = AllowedHost::parse("api.example:80").unwrap();
        assert!(http.matches("api.example"));
        let v6 = AllowedHost::parse("[::1]:8080").unwrap();
        assert!(v6.matches("[::1]:8080") && !v6.matches("[::1]:80"));
        for bad in [
            "",
            "a/b",
            "api.example:99999",
            "api.example:x",
            "user@api.example",
        ] {
            assert_eq!(AllowedHost::parse(bad), None, "{bad}");
        }
        assert_eq!(
            normal_origin("https://App.example:443/"),
            "https://app.example"
        );
        assert_eq!(normal_origin("http://app.example:80"), "http://app.example");
        assert_eq!(
            normal_origin("https://app.example:8443"),
            "https://app.example:8443"
        );
        assert_eq!(
            normal_origin("http://app.example:443"),
            "http://app.example:443"
        );
    }
}
