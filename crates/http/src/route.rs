//! Routing: which route a request belongs to. Two rules, both plain functions with no
//! runtime in them, shared by the front ends (the edge worker, the tower layer):
//!
//! 1. **Normalise the path** ([`normalize`]) the way origins commonly do before they route,
//!    so a spelling of a path cannot reach a resource without reaching its route:
//!    percent-escapes of unreserved characters are decoded (`/%61pi` is `/api`, RFC 3986
//!    section 6.2.2.2), other escapes get upper-case hex (`%2f` stays an escape, see below),
//!    runs of `/` become one (`//api///x` is `/api/x`), and dot segments are resolved
//!    (`/a/./b/../c` is `/a/c`, RFC 3986 section 5.2.4; `/..` stays at `/`). An escaped `/`
//!    or `\` (`%2F`, `%5C`), an escaped NUL (`%00`), or a `%` not followed by two hex digits
//!    is refused ([`PathError`]): origins disagree on what those mean, so no spelling of
//!    them can be matched safely. The normalised path is what the origin receives.
//! 2. **Match** the normalised path against each route's [`PathMatch`], ignoring ASCII case
//!    (`/API/x` matches `/api/`): on an origin that ignores case that is the same resource;
//!    on one that does not, limiting a distinct path too is the safe error. A prefix
//!    matches whole segments only: `/health` matches `/health` and `/health/...`, not
//!    `/healthz`; a segment ending in `*` (`/health*`) says otherwise and matches any
//!    segment starting with `health`, and everything below it.

use std::borrow::Cow;
use std::fmt;

/// How a route matches a (normalised) path. Built by [`PathMatch::parse`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PathMatch {
    /// Whole leading segments: `/api` (or `/api/`) matches `/api` and `/api/...`; `/`
    /// matches every path. Stored lower-case, without a trailing `/`.
    Prefix(String),
    /// Segment pattern: `*` matches one non-empty segment, a final `**` the rest (also
    /// nothing), a final `name*` any segment starting with `name` and the rest. Literal
    /// segments are stored lower-case.
    Pattern(Vec<Segment>),
}

/// One segment of a [`PathMatch::Pattern`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Segment {
    /// This segment, ignoring ASCII case (stored lower-case).
    Literal(String),
    /// `*`: any one non-empty segment.
    Any,
    /// `**` (last only): the rest of the path, possibly empty.
    Rest,
    /// `name*` (last only): a segment starting with `name`, then anything.
    StartsWith(String),
}

/// A refused request path: why it cannot be routed safely.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PathError {
    /// `%2F`, `%5C` or `%00`: an escaped separator or NUL.
    EscapedSeparator(String),
    /// A `%` not followed by two hex digits.
    BadEscape,
    /// The path does not start with `/`.
    NotAbsolute,
}

impl fmt::Display for PathError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PathError::EscapedSeparator(e) => write!(
                f,
                "the path holds {e}, an escaped separator or NUL that origins read differently"
            ),
            PathError::BadEscape => {
                f.write_str("the path holds a '%' not followed by two hex digits")
            }
            PathError::NotAbsolute => f.write_str("the path does not start with '/'"),
        }
    }
}

impl std::error::Error for PathError {}

fn hex(b: u8) -> Option<u8> {
    match b {
        b'0'..=b'9' => Some(b - b'0'),
        b'a'..=b'f' => Some(b - b'a' + 10),
        b'A'..=b'F' => Some(b - b'A' + 10),
        _ => None,
    }
}

fn unreserved(b: u8) -> bool {
    b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~')
}

/// The path as origins route it (see the module docs): unreserved escapes decoded, other
/// escapes in upper-case hex, `/` runs merged, dot segments resolved. `path` is the
/// request target's path (without query), as the URL parser gives it.
pub fn normalize(path: &str) -> Result<String, PathError> {
    let bytes = path.as_bytes();
    if bytes.first() != Some(&b'/') {
        return Err(PathError::NotAbsolute);
    }
    // 1. Escapes: decode unreserved ones, refuse separators, upper-case the rest.
    let mut decoded = String::with_capacity(path.len());
    let mut i = 0;
    while i < bytes.len() {
        let b = bytes[i];
        if b == b'%' {
            let (Some(h), Some(l)) = (
                bytes.get(i + 1).copied().and_then(hex),
                bytes.get(i + 2).copied().and_then(hex),
            ) else {
                return Err(PathError::BadEscape);
            };
            let v = h * 16 + l;
            if matches!(v, b'/' | b'\\' | 0) {
                return Err(PathError::EscapedSeparator(path[i..i + 3].to_string()));
            }
            if unreserved(v) {
                decoded.push(v as char);
            } else {
                decoded.push('%');
                decoded.push_str(&path[i + 1..i + 3].to_ascii_uppercase());
            }
            i += 3;
        } else {
            // Multi-byte characters are copied whole (the URL parser escapes them anyway).
            let ch = path[i..].chars().next().unwrap_or('\u{fffd}');
            decoded.push(ch);
            i += ch.len_utf8();
        }
    }
    // 2. Segments: empty ones (runs of '/') dropped, dot segments resolved.
    let mut out: Vec<&str> = Vec::new();
    let trailing = decoded.ends_with('/') || decoded.ends_with("/.") || decoded.ends_with("/..");
    for seg in decoded.split('/') {
        match seg {
            "" | "." => {}
            ".." => {
                out.pop();
            }
            s => out.push(s),
        }
    }
    let mut norm = String::with_capacity(decoded.len());
    for s in &out {
        norm.push('/');
        norm.push_str(s);
    }
    if norm.is_empty() || trailing {
        norm.push('/');
    }
    Ok(norm)
}

/// [`normalize`], borrowing `path` when it is already normal: no escape (`%`), no empty
/// segment (`//`) and no dot segment (`.`, `..`), which is what nearly every request
/// carries. A server routes every request: `normalize`'s copies were a measured part of
/// the tower layer's own time (PERF.md, "Measured reasons in the code").
pub fn normalized(path: &str) -> Result<Cow<'_, str>, PathError> {
    // Without "//" the only empty segment is a trailing one, which `normalize` keeps.
    let plain = path.starts_with('/')
        && !path.contains('%')
        && !path.contains("//")
        && !path.split('/').any(|seg| seg == "." || seg == "..");
    if plain {
        return Ok(Cow::Borrowed(path));
    }
    normalize(path).map(Cow::Owned)
}

impl PathMatch {
    /// Parses a route's `path`: a prefix, or a pattern when it holds `*`. The error says
    /// what is wrong with it (the config names the field).
    pub fn parse(p: &str) -> Result<PathMatch, String> {
        if !p.starts_with('/') {
            return Err(format!("{p:?} must start with '/'"));
        }
        let norm = normalize(p).map_err(|e| format!("{p:?}: {e}"))?;
        let trimmed = norm.trim_end_matches('/');
        if !p.contains('*') {
            return Ok(PathMatch::Prefix(trimmed.to_ascii_lowercase()));
        }
        let parts: Vec<&str> = trimmed[1..].split('/').collect();
        let last = parts.len() - 1;
        let mut segs = Vec::with_capacity(parts.len());
        for (i, s) in parts.iter().enumerate() {
            let seg = match *s {
                "*" => Segment::Any,
                "**" if i == last => Segment::Rest,
                s if i == last && s.ends_with('*') && !s[..s.len() - 1].contains('*') => {
                    Segment::StartsWith(s[..s.len() - 1].to_ascii_lowercase())
                }
                s if !s.contains('*') => Segment::Literal(s.to_ascii_lowercase()),
                _ => {
                    return Err(format!(
                        "{p:?}: '*' must be a whole segment, '**' or 'name*' only the last one"
                    ))
                }
            };
            segs.push(seg);
        }
        Ok(PathMatch::Pattern(segs))
    }

    /// Whether a normalised path (see [`normalize`]) matches, ignoring ASCII case.
    pub fn matches(&self, path: &str) -> bool {
        match self {
            PathMatch::Prefix(p) => {
                path.len() >= p.len()
                    && path.as_bytes()[..p.len()].eq_ignore_ascii_case(p.as_bytes())
                    && matches!(path.as_bytes().get(p.len()), None | Some(b'/'))
            }
            PathMatch::Pattern(segs) => {
                let mut parts = path.strip_prefix('/').unwrap_or(path).split('/');
                for seg in segs {
                    match seg {
                        Segment::Rest => return true,
                        Segment::StartsWith(start) => {
                            return parts.next().is_some_and(|p| {
                                p.len() >= start.len()
                                    && p.as_bytes()[..start.len()]
                                        .eq_ignore_ascii_case(start.as_bytes())
                            })
                        }
                        Segment::Any => match parts.next() {
                            Some(p) if !p.is_empty() => {}
                            _ => return false,
                        },
                        Segment::Literal(l) => {
                            if !parts.next().is_some_and(|p| p.eq_ignore_ascii_case(l)) {
                                return false;
                            }
                        }
                    }
                }
                // A trailing '/' leaves one empty part: `/users/1/avatar/` is the pattern's path.
                match parts.next() {
                    None => true,
                    Some("") => parts.next().is_none(),
                    Some(_) => false,
                }
            }
        }
    }
}

/// Something routable: a method list (empty: any) and a path rule.
pub trait Routed {
    /// Upper-case method names; empty means any.
    fn methods(&self) -> &[String];
    /// The path rule.
    fn path(&self) -> &PathMatch;
}

/// Whether a route listing `methods` (empty: any) applies to a request's `method`, ignoring
/// ASCII case. A route for `GET` also applies to `HEAD`: HTTP defines HEAD as GET without
/// the body (RFC 9110, section 9.3.2), and origins (axum, Express, most frameworks) answer
/// it with their GET handler, so a GET route that let HEAD through would leave the same
/// handler unlimited. (A route for `HEAD` alone does not apply to `GET`.)
pub fn method_matches(methods: &[String], method: &str) -> bool {
    let listed = |name: &str| methods.iter().any(|m| m.eq_ignore_ascii_case(name));
    methods.is_empty() || listed(method) || (method.eq_ignore_ascii_case("HEAD") && listed("GET"))
}

/// Whether `route` applies to `method` ([`method_matches`]) and the normalised `path`.
pub fn matches<R: Routed + ?Sized>(route: &R, method: &str, path: &str) -> bool {
    method_matches(route.methods(), method) && route.path().matches(path)
}

/// The first of `routes` (in order) matching `method` and the normalised `path`. Requests
/// matching none are not limited (add a final `path = "/"` route to limit everything).
pub fn find<'r, R: Routed>(routes: &'r [R], method: &str, path: &str) -> Option<&'r R> {
    routes.iter().find(|r| matches(*r, method, path))
}

#[cfg(test)]
mod tests;
