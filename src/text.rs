use core::fmt;

const CAP: usize = 40;

/// A short copy of the offending input, kept inside an error without allocating. Longer
/// input is cut on a character boundary and shown with a trailing `…`.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct Snippet {
    buf: [u8; CAP],
    len: u8,
    cut: bool,
}

impl Snippet {
    /// An empty snippet.
    pub const EMPTY: Snippet = Snippet {
        buf: [0; CAP],
        len: 0,
        cut: false,
    };

    /// Copies (up to 40 bytes of) `s`.
    pub fn new(s: &str) -> Snippet {
        let mut end = s.len().min(CAP);
        while !s.is_char_boundary(end) {
            end -= 1;
        }
        let mut buf = [0; CAP];
        buf[..end].copy_from_slice(&s.as_bytes()[..end]);
        Snippet {
            buf,
            len: end as u8,
            cut: end < s.len(),
        }
    }

    /// The number `n`, written in decimal.
    pub fn number(n: u64) -> Snippet {
        let mut digits = [0u8; 20];
        let mut i = digits.len();
        let mut v = n;
        loop {
            i -= 1;
            digits[i] = b'0' + (v % 10) as u8;
            v /= 10;
            if v == 0 {
                break;
            }
        }
        // Digits are ASCII, so this cannot fail; fall back to empty rather than panic.
        Snippet::new(core::str::from_utf8(&digits[i..]).unwrap_or(""))
    }

    /// The copied text (without the `…` marker).
    pub fn as_str(&self) -> &str {
        core::str::from_utf8(&self.buf[..self.len as usize]).unwrap_or("")
    }

    /// Whether the input was longer than what was kept.
    pub fn is_cut(&self) -> bool {
        self.cut
    }
}

impl fmt::Display for Snippet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())?;
        if self.cut {
            f.write_str("…")?;
        }
        Ok(())
    }
}

impl fmt::Debug for Snippet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:?}", self.as_str())?;
        if self.cut {
            f.write_str("…")?;
        }
        Ok(())
    }
}

/// Writes `value`'s `Display` into `buf` (cut at its end), without allocating.
#[cfg(feature = "alloc")]
pub(crate) fn display_into<'a>(buf: &'a mut [u8], value: &dyn fmt::Display) -> &'a str {
    struct W<'b> {
        buf: &'b mut [u8],
        len: usize,
    }
    impl fmt::Write for W<'_> {
        fn write_str(&mut self, s: &str) -> fmt::Result {
            for c in s.chars() {
                let mut tmp = [0u8; 4];
                let bytes = c.encode_utf8(&mut tmp).as_bytes();
                if self.len + bytes.len() > self.buf.len() {
                    return Err(fmt::Error);
                }
                self.buf[self.len..self.len + bytes.len()].copy_from_slice(bytes);
                self.len += bytes.len();
            }
            Ok(())
        }
    }
    let mut w = W { buf, len: 0 };
    let _ = fmt::write(&mut w, format_args!("{value}"));
    let len = w.len;
    core::str::from_utf8(&w.buf[..len]).unwrap_or("")
}
