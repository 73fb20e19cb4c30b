//! Access logs in the nginx/Apache combined format (the common format, without referer and
//! user agent, parses too):
//!
//! ```text
//! 203.0.113.7 - alice [02/Dec/2026:10:00:01 +0000] "GET /api/items?page=2 HTTP/1.1" 200 512 "-" "curl/8.5.0"
//! ```
//!
//! Times have one-second resolution in this format, so every request of one second arrives
//! at the same instant for the limiter.

/// The fields of one access-log line (borrowed from it).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LogLine<'a> {
    /// `$remote_addr`: the client address.
    pub remote_addr: &'a str,
    /// `$remote_user` (`-` when none).
    pub remote_user: &'a str,
    /// `$time_local` as Unix milliseconds.
    pub time_ms: u64,
    /// `$request`: the request line, as logged (escapes kept).
    pub request: &'a str,
    /// `$status`.
    pub status: &'a str,
    /// `$body_bytes_sent`.
    pub body_bytes_sent: &'a str,
    /// `$http_referer` (empty in the common format).
    pub referer: &'a str,
    /// `$http_user_agent` (empty in the common format).
    pub user_agent: &'a str,
}

impl<'a> LogLine<'a> {
    /// The request method (`GET`), or the empty string for a malformed request line.
    pub fn method(&self) -> &'a str {
        self.request.split(' ').next().unwrap_or("")
    }

    /// The request target (`/api/items?page=2`).
    pub fn path(&self) -> &'a str {
        self.request.split(' ').nth(1).unwrap_or("")
    }

    /// A field by its nginx name (with or without `http_`), for `--key field:NAME`.
    pub fn field(&self, name: &str) -> Option<&'a str> {
        Some(match name {
            "remote_addr" | "ip" => self.remote_addr,
            "remote_user" | "user" => self.remote_user,
            "request" => self.request,
            "method" | "request_method" => self.method(),
            "path" | "uri" | "request_uri" => self.path(),
            "status" => self.status,
            "body_bytes_sent" | "bytes" => self.body_bytes_sent,
            "referer" | "http_referer" => self.referer,
            "user_agent" | "http_user_agent" => self.user_agent,
            _ => return None,
        })
    }
}

/// The field names [`LogLine::field`] knows.
pub const FIELDS: &str = "remote_addr, remote_user, request, method, path, status, \
                          body_bytes_sent, referer, user_agent";

/// Splits off the next space-separated token.
fn token(s: &str) -> Option<(&str, &str)> {
    let s = s.trim_start_matches(' ');
    if s.is_empty() {
        return None;
    }
    Some(match s.find(' ') {
        Some(i) => (&s[..i], &s[i..]),
        None => (s, ""),
    })
}

/// Splits off a `"quoted"` field; a backslash escapes the next character.
fn quoted(s: &str) -> Option<(&str, &str)> {
    let s = s.trim_start_matches(' ');
    let body = s.strip_prefix('"')?;
    let bytes = body.as_bytes();
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'\\' => i += 2,
            b'"' => return Some((&body[..i], &body[i + 1..])),
            _ => i += 1,
        }
    }
    None
}

/// Parses one line, or says what is wrong with it.
pub fn parse(line: &str) -> Result<LogLine<'_>, String> {
    let (remote_addr, rest) = token(line).ok_or("an empty line")?;
    let (_ident, rest) = token(rest).ok_or("no ident field after the address")?;
    let (remote_user, rest) = token(rest).ok_or("no user field after the ident")?;
    let rest = rest.trim_start_matches(' ');
    let rest = rest
        .strip_prefix('[')
        .ok_or("no [time] after the user field")?;
    let end = rest.find(']').ok_or("the [time] field is not closed")?;
    let time_ms = parse_time(&rest[..end])?;
    let (request, rest) = quoted(&rest[end + 1..]).ok_or("no quoted \"request\" after the time")?;
    let (status, rest) = token(rest).ok_or("no status after the request")?;
    if status.len() != 3 || !status.bytes().all(|b| b.is_ascii_digit()) {
        return Err(format!("status \"{status}\" is not a 3-digit HTTP status"));
    }
    let (body_bytes_sent, rest) = token(rest).ok_or("no byte count after the status")?;
    let (referer, user_agent) = match quoted(rest) {
        Some((referer, rest)) => {
            let (ua, _) = quoted(rest).ok_or("a referer without a quoted user agent")?;
            (referer, ua)
        }
        None if rest.trim().is_empty() => ("", ""),
        None => return Err("the referer is not quoted".into()),
    };
    Ok(LogLine {
        remote_addr,
        remote_user,
        time_ms,
        request,
        status,
        body_bytes_sent,
        referer,
        user_agent,
    })
}

const MONTHS: [&str; 12] = [
    "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec",
];

fn digits(s: &str, what: &str) -> Result<i64, String> {
    if s.is_empty() || !s.bytes().all(|b| b.is_ascii_digit()) || s.len() > 4 {
        return Err(format!("the time's {what} \"{s}\" is not a number"));
    }
    s.parse()
        .map_err(|_| format!("the time's {what} \"{s}\" is not a number"))
}

/// Parses `$time_local` (`10/Oct/2000:13:55:36 -0700`) into Unix milliseconds.
pub fn parse_time(text: &str) -> Result<u64, String> {
    let bad = || format!("time \"{text}\" is not like 10/Oct/2000:13:55:36 -0700");
    let (stamp, zone) = text.split_once(' ').ok_or_else(bad)?;
    let mut parts = stamp.split(['/', ':']);
    let mut next = || parts.next().ok_or_else(bad);
    let day = digits(next()?, "day")?;
    let month_name = next()?;
    let month = MONTHS
        .iter()
        .position(|m| *m == month_name)
        .ok_or_else(|| format!("the time's month \"{month_name}\" is not Jan..Dec"))?
        as i64
        + 1;
    let year = digits(next()?, "year")?;
    let hour = digits(next()?, "hour")?;
    let minute = digits(next()?, "minute")?;
    let second = digits(next()?, "second")?;
    if parts.next().is_some() {
        return Err(bad());
    }
    if !(1..=days_in_month(year, month)).contains(&day) || hour > 23 || minute > 59 || second > 60 {
        return Err(format!("time \"{text}\" is not a valid date and time"));
    }
    let sign = match zone.as_bytes().first() {
        Some(b'+') => 1,
        Some(b'-') => -1,
        _ => return Err(bad()),
    };
    let zone = &zone[1..];
    if zone.len() != 4 {
        return Err(bad());
    }
    let offset = sign * (digits(&zone[..2], "zone")? * 3600 + digits(&zone[2..], "zone")? * 60);
    let secs = tollgate::backoff::days_from_civil(year, month, day) * 86_400
        + hour * 3600
        + minute * 60
        + second
        - offset;
    u64::try_from(secs)
        .map(|s| s * 1000)
        .map_err(|_| format!("time \"{text}\" is before 1970"))
}

fn days_in_month(year: i64, month: i64) -> i64 {
    match month {
        2 if (year % 4 == 0 && year % 100 != 0) || year % 400 == 0 => 29,
        2 => 28,
        4 | 6 | 9 | 11 => 30,
        _ => 31,
    }
}

/// Formats Unix milliseconds as RFC 3339 UTC (`2026-12-02T10:00:01Z`, with `.123` when the
/// milliseconds are not zero).
pub fn format_time(ms: u64) -> String {
    let secs = (ms / 1000) as i64;
    let (days, rem) = (secs.div_euclid(86_400), secs.rem_euclid(86_400));
    // civil_from_days (Howard Hinnant)
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    let (h, mi, s) = (rem / 3600, rem % 3600 / 60, rem % 60);
    let frac = ms % 1000;
    if frac == 0 {
        format!("{y:04}-{m:02}-{d:02}T{h:02}:{mi:02}:{s:02}Z")
    } else {
        format!("{y:04}-{m:02}-{d:02}T{h:02}:{mi:02}:{s:02}.{frac:03}Z")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_the_combined_format() {
        let line = r#"203.0.113.7 - alice [02/Dec/2026:10:00:01 +0000] "GET /api/items?page=2 HTTP/1.1" 200 512 "https://example.org/" "curl/8.5.0 \"x\"""#;
        let l = parse(line).unwrap();
        assert_eq!(l.remote_addr, "203.0.113.7");
        assert_eq!(l.remote_user, "alice");
        assert_eq!(l.time_ms, 1_796_205_601_000);
        assert_eq!(l.method(), "GET");
        assert_eq!(l.path(), "/api/items?page=2");
        assert_eq!(l.status, "200");
        assert_eq!(l.referer, "https://example.org/");
        assert_eq!(l.user_agent, r#"curl/8.5.0 \"x\""#);
        assert_eq!(l.field("user_agent"), Some(l.user_agent));
        assert_eq!(l.field("nope"), None);
    }

    #[test]
    fn parses_the_common_format() {
        let l = parse(r#"::1 - - [10/Oct/2000:13:55:36 -0700] "GET / HTTP/1.0" 200 2326"#).unwrap();
        assert_eq!(l.time_ms, 971_211_336_000);
        assert_eq!(l.referer, "");
    }

    #[test]
    fn names_what_is_wrong() {
        assert!(parse("garbage").unwrap_err().contains("ident"));
        assert!(
            parse(r#"1.2.3.4 - - [02/Dex/2026:10:00:01 +0000] "GET / HTTP/1.1" 200 1"#)
                .unwrap_err()
                .contains("month")
        );
        assert!(
            parse(r#"1.2.3.4 - - [31/Feb/2026:10:00:01 +0000] "GET / HTTP/1.1" 200 1"#)
                .unwrap_err()
                .contains("valid date")
        );
        assert!(
            parse(r#"1.2.3.4 - - [02/Dec/2026:10:00:01 +0000] "GET / HTTP/1.1" OK 1"#)
                .unwrap_err()
                .contains("status")
        );
    }

    #[test]
    fn time_round_trips() {
        assert_eq!(format_time(0), "1970-01-01T00:00:00Z");
        assert_eq!(format_time(951_782_400_000), "2000-02-29T00:00:00Z");
        assert_eq!(format_time(1_796_205_601_250), "2026-12-02T10:00:01.250Z");
        assert_eq!(
            parse_time("29/Feb/2000:00:00:00 +0000").unwrap(),
            951_782_400_000
        );
        assert_eq!(
            parse_time("29/Feb/2000:01:30:00 +0130").unwrap(),
            951_782_400_000
        );
        assert!(parse_time("29/Feb/2001:00:00:00 +0000").is_err());
    }
}
