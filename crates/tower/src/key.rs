//! Keys: what a policy counts a request under. The client's address (the peer or, through
//! trusted proxies only, the forwarding header read from the right), a hashed API key, one
//! global counter, or the application's own extractor; the key names are
//! [`tollgate_http::key`]'s, the same as the edge worker's.

use std::fmt;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;

use http::header::HeaderName;
use http::request::Parts;
use tollgate_http::bounds::{self, FieldOverBound};
use tollgate_http::client::{self, HeaderError};
use tollgate_http::key as name;

use crate::settings::{MissingKey, ProxyHeader, Settings};

/// A custom key extractor: the request's head in, a key out (`None`: the request has no
/// key, and [`MissingKey`] decides).
pub type Extractor = Arc<dyn Fn(&Parts) -> Option<String> + Send + Sync>;

/// What a policy counts requests by.
#[derive(Clone)]
pub enum Key {
    /// The client's address ([`crate::Builder::trusted_proxies`] says when a forwarding
    /// header is read), IPv6 grouped by [`crate::Builder::ipv6_prefix`].
    Ip,
    /// The API key header ([`crate::Builder::api_key_header`]), hashed with SHA-256 before
    /// it names anything.
    ApiKey,
    /// One counter for every request.
    Global,
    /// A key of your own (prefixed `custom:`, so it never collides with the others). It is
    /// stored as given, so its name `custom:<key>` is held to the core's bound on a key's
    /// bytes ([`tollgate::store::bounds::MAX_KEY_BYTES`], the 7 bytes of `custom:`
    /// included): a longer one is refused with a 400 (`over-bound`, field `key`,
    /// [`tollgate_http::bounds`]). Hash a long identifier before returning it.
    Custom(Extractor),
}

impl Key {
    /// A custom key extractor.
    pub fn custom(f: impl Fn(&Parts) -> Option<String> + Send + Sync + 'static) -> Key {
        Key::Custom(Arc::new(f))
    }
}

impl fmt::Debug for Key {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Key::Ip => f.write_str("Ip"),
            Key::ApiKey => f.write_str("ApiKey"),
            Key::Global => f.write_str("Global"),
            Key::Custom(_) => f.write_str("Custom(..)"),
        }
    }
}

/// What a request is counted under, or why it is not.
pub(crate) enum Keyed {
    Key(String),
    Skip,
}

/// Why a request has no key it may be counted under (a 400).
pub(crate) enum KeyError {
    /// A header the key is read from is refused (too long, not visible ASCII, not an
    /// address).
    Header(HeaderError),
    /// No key, and [`MissingKey::Reject`].
    Missing,
    /// The custom extractor's key (as `custom:<key>`) or the tenant is over the core's
    /// bound on a key's bytes.
    OverBound(FieldOverBound),
    /// A bearer token refused on a route that answers refused tokens with 401.
    #[cfg_attr(not(feature = "jwt"), allow(dead_code))]
    Token(tollgate_http::jwt::JwtError),
}

/// The field a custom extractor's key is named by in its refusal.
const CUSTOM_FIELD: &str = "key";

/// The field a tenant is named by in its refusal.
pub(crate) const TENANT_FIELD: &str = "tenant";

/// The key `key` counts this request under.
pub(crate) fn key_of(settings: &Settings, key: &Key, parts: &Parts) -> Result<Keyed, KeyError> {
    let found = match key {
        Key::Ip => return ip_key(settings, parts).map(Keyed::Key),
        Key::Global => return Ok(Keyed::Key(name::GLOBAL.into())),
        Key::ApiKey => header_text(settings, parts, &settings.api_key_header)
            .map_err(KeyError::Header)?
            .filter(|k| !k.is_empty())
            .map(|k| name::api_key_name(k.as_bytes())),
        Key::Custom(f) => match f(parts) {
            Some(k) => {
                // The name is what the store is given (and a Redis store holds its key parts
                // to the same bound): checking it means no store refuses a key passed here.
                let named = name::custom(&k);
                bounds::check_key(CUSTOM_FIELD, &named).map_err(KeyError::OverBound)?;
                Some(named)
            }
            None => None,
        },
    };
    match (found, settings.missing_key) {
        (Some(k), _) => Ok(Keyed::Key(k)),
        (None, MissingKey::UseIp) => ip_key(settings, parts).map(Keyed::Key),
        (None, MissingKey::Skip) => Ok(Keyed::Skip),
        (None, MissingKey::Reject) => Err(KeyError::Missing),
    }
}

/// The peer's address: a `SocketAddr` extension, or axum's `ConnectInfo<SocketAddr>`.
fn peer(parts: &Parts) -> Option<IpAddr> {
    if let Some(a) = parts.extensions.get::<SocketAddr>() {
        return Some(a.ip());
    }
    #[cfg(feature = "axum")]
    if let Some(a) = parts
        .extensions
        .get::<axum::extract::ConnectInfo<SocketAddr>>()
    {
        return Some(a.0.ip());
    }
    None
}

/// Looked up by a `HeaderName`, not by its text, which `http` would parse per request.
const X_FORWARDED_FOR: HeaderName = HeaderName::from_static("x-forwarded-for");

/// The client's IP group: the peer, or through trusted proxies the forwarding header read
/// from the right. Without a peer address (the server did not record it) every such
/// request shares the key [`name::UNKNOWN_IP`].
fn ip_key(settings: &Settings, parts: &Parts) -> Result<String, KeyError> {
    let Some(peer) = peer(parts) else {
        return Ok(name::UNKNOWN_IP.into());
    };
    let mut ip = peer;
    if settings.trusted.iter().any(|c| c.contains(peer)) {
        let (header, all) = match settings.proxy_header {
            ProxyHeader::XForwardedFor => {
                ("x-forwarded-for", parts.headers.get_all(&X_FORWARDED_FOR))
            }
            ProxyHeader::Forwarded => ("forwarded", parts.headers.get_all(http::header::FORWARDED)),
        };
        // Every line is checked, including those left of the client that are never read.
        if all.iter().any(|v| v.to_str().is_err()) {
            return Err(KeyError::Header(HeaderError::NotVisibleAscii {
                header: header.to_string(),
            }));
        }
        let lines = all.iter().map(|v| v.to_str().unwrap_or_default());
        ip = match settings.proxy_header {
            // Read from the right as the hops come, nothing collected (see `client_ip_from_right`).
            ProxyHeader::XForwardedFor => client::client_ip_from_right(
                peer,
                &settings.trusted,
                client::forwarded_for_hops_from_right(lines),
                header,
            ),
            ProxyHeader::Forwarded => client::client_ip(
                peer,
                &settings.trusted,
                &client::forwarded_hops(lines),
                header,
            ),
        }
        .map_err(KeyError::Header)?;
    }
    Ok(client::ip_group(
        ip,
        settings.ipv4_prefix,
        settings.ipv6_prefix,
    ))
}

/// A header's value, checked (length, visible ASCII); `None` when absent.
pub(crate) fn header_text(
    settings: &Settings,
    parts: &Parts,
    name: &str,
) -> Result<Option<String>, HeaderError> {
    let Some(v) = parts.headers.get(name) else {
        return Ok(None);
    };
    client::check_value(name, v.as_bytes(), settings.max_header_bytes)?;
    // Visible ASCII is UTF-8.
    Ok(Some(String::from_utf8_lossy(v.as_bytes()).into_owned()))
}
