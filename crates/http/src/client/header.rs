//! Header values checked before they name anything.

use std::fmt;

/// A request header the limiter could not use: answer 400 (`invalid-header`), naming the
/// header.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum HeaderError {
    /// Longer than the configured maximum.
    TooLong {
        /// The header's name.
        header: String,
        /// Its length in bytes.
        len: usize,
    },
    /// Not visible ASCII (0x20-0x7e), e.g. non-UTF-8 or control bytes.
    NotVisibleAscii {
        /// The header's name.
        header: String,
    },
    /// The header (or the hop of a forwarding header being read) is not an IP address.
    NotAnIp {
        /// The header's name.
        header: String,
    },
}

impl HeaderError {
    /// The header at fault.
    pub fn header(&self) -> &str {
        match self {
            HeaderError::TooLong { header, .. }
            | HeaderError::NotVisibleAscii { header }
            | HeaderError::NotAnIp { header } => header,
        }
    }
}

impl fmt::Display for HeaderError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            HeaderError::TooLong { header, len } => {
                write!(f, "header {header} is too long ({len} bytes)")
            }
            HeaderError::NotVisibleAscii { header } => {
                write!(f, "header {header} must be visible ASCII")
            }
            HeaderError::NotAnIp { header } => write!(f, "header {header} is not an IP address"),
        }
    }
}

impl std::error::Error for HeaderError {}

/// Checks a header value before it is used as (part of) a key: at most `max_len` bytes,
/// visible ASCII and spaces only.
pub fn check_value(header: &str, value: &[u8], max_len: usize) -> Result<(), HeaderError> {
    if value.len() > max_len {
        return Err(HeaderError::TooLong {
            header: header.to_string(),
            len: value.len(),
        });
    }
    if !value.iter().all(|b| (0x20..=0x7e).contains(b)) {
        return Err(HeaderError::NotVisibleAscii {
            header: header.to_string(),
        });
    }
    Ok(())
}
