//! How the layer identifies clients and what it does when it cannot decide: the choices a
//! [`crate::Builder`] sets for every route ([`ProxyHeader`], [`MissingKey`], [`OnError`]),
//! gathered in the layer's [`Settings`].

use tollgate_http::client::Cidr;

/// What a request without a key gets (no API key header, a custom extractor answering
/// `None`). Never a 500.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum MissingKey {
    /// Count it by the client's address, in the same policy (the default).
    #[default]
    UseIp,
    /// Answer 400 (`missing-key`).
    Reject,
    /// Let it through unlimited, without rate-limit fields.
    Skip,
}

/// What a request gets when the store cannot decide (an error, not a denial).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OnError {
    /// Let it through (fail open), marked with a `Tollgate-Degraded` request header for
    /// the handler, and the decision-less [`crate::RateLimitInfo`].
    Open,
    /// Answer 503 with `Retry-After` (seconds) and a problem document (fail closed).
    Closed {
        /// The `Retry-After` of the 503, in seconds.
        retry_after_secs: u64,
    },
}

/// Which header the trusted proxies write.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum ProxyHeader {
    /// `X-Forwarded-For: client, proxy1, proxy2` (the default).
    #[default]
    XForwardedFor,
    /// RFC 7239 `Forwarded: for=client, for=proxy1`.
    Forwarded,
}

/// The layer's settings, as [`crate::Builder`] checked them.
#[derive(Clone, Debug)]
pub(crate) struct Settings {
    pub(crate) trusted: Vec<Cidr>,
    pub(crate) proxy_header: ProxyHeader,
    pub(crate) ipv4_prefix: u8,
    pub(crate) ipv6_prefix: u8,
    pub(crate) api_key_header: String,
    pub(crate) tenant_header: String,
    pub(crate) max_header_bytes: usize,
    pub(crate) missing_key: MissingKey,
    pub(crate) on_error: OnError,
    pub(crate) shadow: bool,
    pub(crate) legacy: bool,
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            trusted: Vec::new(),
            proxy_header: ProxyHeader::XForwardedFor,
            ipv4_prefix: 32,
            ipv6_prefix: tollgate::ip::DEFAULT_V6_PREFIX,
            api_key_header: "x-api-key".into(),
            tenant_header: "x-tenant".into(),
            max_header_bytes: 256,
            missing_key: MissingKey::UseIp,
            on_error: OnError::Open,
            shadow: false,
            legacy: false,
        }
    }
}
