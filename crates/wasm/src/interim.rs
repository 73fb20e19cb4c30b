//! TEMPORARY stand-ins for the core's announced `tollgate::headers` and `tollgate::backoff`
//! (same names and signatures), until they land in `src/`. Delete this file then.

/// Stand-in for `tollgate::headers`.
pub mod headers {
    use tollgate::{Decision, Policy, NANOS_PER_SEC};

    /// A decision under a named policy.
    pub struct Named<'a> {
        /// The policy's name in the header (`"per-ip"`).
        pub name: &'a str,
        /// The policy.
        pub policy: &'a Policy,
        /// The decision.
        pub decision: &'a Decision,
    }

    fn secs_ceil(ns: u64) -> u64 {
        ns.div_ceil(NANOS_PER_SEC)
    }

    /// An sf-string.
    fn sf_string(s: &str) -> String {
        let mut out = String::with_capacity(s.len() + 2);
        out.push('"');
        for c in s.chars().filter(|c| (' '..='~').contains(c)) {
            if c == '"' || c == '\\' {
                out.push('\\');
            }
            out.push(c);
        }
        out.push('"');
        out
    }

    /// `RateLimit-Policy`: `"name";q=<quota>;w=<window seconds>`.
    pub fn rate_limit_policy(named: &[Named]) -> String {
        named
            .iter()
            .map(|n| {
                let w = n
                    .policy
                    .quota()
                    .map(|q| secs_ceil(q.window()).max(1))
                    .unwrap_or(1);
                format!("{};q={};w={}", sf_string(n.name), n.policy.limit(), w)
            })
            .collect::<Vec<_>>()
            .join(", ")
    }

    /// `RateLimit`: `"name";r=<remaining>;t=<seconds to reset>`.
    pub fn rate_limit(named: &[Named]) -> String {
        named
            .iter()
            .map(|n| {
                format!(
                    "{};r={};t={}",
                    sf_string(n.name),
                    n.decision.remaining,
                    secs_ceil(n.decision.reset_after)
                )
            })
            .collect::<Vec<_>>()
            .join(", ")
    }

    /// `Retry-After` in whole seconds rounded up, at least 1; `None` when allowed.
    pub fn retry_after(d: &Decision) -> Option<u64> {
        (!d.allowed).then(|| secs_ceil(d.retry_after).max(1))
    }

    /// `X-RateLimit-Limit`, `-Remaining`, `-Reset` (seconds from now).
    pub fn legacy(d: &Decision) -> [(&'static str, String); 3] {
        [
            ("X-RateLimit-Limit", d.limit.to_string()),
            ("X-RateLimit-Remaining", d.remaining.to_string()),
            ("X-RateLimit-Reset", secs_ceil(d.reset_after).to_string()),
        ]
    }

    /// Every header for a response.
    pub fn response_headers(named: &[Named], legacy: bool) -> Vec<(&'static str, String)> {
        let mut out = vec![
            ("RateLimit-Policy", rate_limit_policy(named)),
            ("RateLimit", rate_limit(named)),
        ];
        let denied = named
            .iter()
            .filter_map(|n| retry_after(n.decision))
            .max();
        if let Some(secs) = denied {
            out.push(("Retry-After", secs.to_string()));
        }
        if legacy {
            if let Some(first) = named.first() {
                out.extend(self::legacy(first.decision));
            }
        }
        out
    }
}

/// Stand-in for `tollgate::backoff`.
pub mod backoff {
    use tollgate::{Nanos, NANOS_PER_SEC};

    /// Full-jitter exponential backoff.
    pub struct Backoff {
        base: Nanos,
        cap: Nanos,
        max_attempts: u32,
    }

    impl Backoff {
        /// `base`, `cap` in ns; `max_attempts` counts every attempt.
        pub fn new(base: Nanos, cap: Nanos, max_attempts: u32) -> Backoff {
            Backoff {
                base,
                cap,
                max_attempts,
            }
        }

        /// `min(cap, base * 2^(attempt-1))`.
        pub fn ceiling(&self, attempt: u32) -> Nanos {
            let shift = attempt.saturating_sub(1).min(63);
            self.base
                .checked_mul(1u64 << shift)
                .unwrap_or(u64::MAX)
                .min(self.cap)
        }

        /// The wait after attempt `attempt` failed; `None`: give up.
        pub fn delay(
            &self,
            attempt: u32,
            retry_after: Option<Nanos>,
            rng: &mut impl FnMut() -> u64,
        ) -> Option<Nanos> {
            if attempt >= self.max_attempts {
                return None;
            }
            if let Some(ra) = retry_after {
                return Some(ra);
            }
            let ceiling = self.ceiling(attempt);
            Some(if ceiling == u64::MAX {
                rng()
            } else {
                rng() % (ceiling + 1)
            })
        }
    }

    /// Delta-seconds or an IMF-fixdate, as a wait from `now_unix_secs`.
    pub fn parse_retry_after(value: &str, now_unix_secs: u64) -> Option<Nanos> {
        let v = value.trim();
        if !v.is_empty() && v.bytes().all(|b| b.is_ascii_digit()) {
            return Some(v.parse::<u64>().ok()?.saturating_mul(NANOS_PER_SEC));
        }
        let at = imf_fixdate(v)?;
        Some(at.saturating_sub(now_unix_secs).saturating_mul(NANOS_PER_SEC))
    }

    /// `Sun, 06 Nov 1994 08:49:37 GMT` as Unix seconds.
    fn imf_fixdate(v: &str) -> Option<u64> {
        let parts: Vec<&str> = v.split(' ').collect();
        if parts.len() != 6 || parts[5] != "GMT" || !parts[0].ends_with(',') {
            return None;
        }
        let day: u64 = parts[1].parse().ok()?;
        const MONTHS: [&str; 12] = [
            "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec",
        ];
        let month = MONTHS.iter().position(|m| *m == parts[2])? as u64 + 1;
        let year: u64 = parts[3].parse().ok()?;
        let hms: Vec<u64> = parts[4]
            .split(':')
            .map(|p| p.parse().ok())
            .collect::<Option<_>>()?;
        if hms.len() != 3 || day == 0 || day > 31 || year < 1970 || hms[0] > 23 || hms[1] > 59 || hms[2] > 60 {
            return None;
        }
        // Days from civil (Howard Hinnant), for years >= 1970.
        let (y, m) = if month <= 2 { (year - 1, month + 9) } else { (year, month - 3) };
        let era = y / 400;
        let yoe = y - era * 400;
        let doy = (153 * m + 2) / 5 + day - 1;
        let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
        let days = era * 146_097 + doe - 719_468;
        Some(days * 86_400 + hms[0] * 3600 + hms[1] * 60 + hms[2])
    }

    /// 429/503 and an idempotent method or an idempotency key.
    pub fn is_retryable(method: &str, has_idempotency_key: bool, status: u16) -> bool {
        let idempotent = ["GET", "HEAD", "OPTIONS", "TRACE", "PUT", "DELETE"]
            .iter()
            .any(|m| m.eq_ignore_ascii_case(method));
        matches!(status, 429 | 503) && (idempotent || has_idempotency_key)
    }
}
