//! A progress line on stderr for long reads, shown only when stderr is a terminal.

use std::io::{IsTerminal, Write};
use std::time::{Duration, Instant};

/// Redraws `\r<percent> <lines>` at most every 200 ms.
pub struct Progress {
    enabled: bool,
    total: Option<u64>,
    last: Instant,
    drawn: bool,
}

impl Progress {
    /// A progress line for an input of `total` bytes (unknown for a pipe), drawn only when
    /// stderr is a terminal.
    pub fn new(total: Option<u64>) -> Progress {
        Progress {
            enabled: std::io::stderr().is_terminal(),
            total,
            last: Instant::now(),
            drawn: false,
        }
    }

    /// Reports that `bytes` of the input and `lines` lines have been read. Cheap: it looks
    /// at the clock once every 4096 lines.
    pub fn tick(&mut self, bytes: u64, lines: u64) {
        if !self.enabled
            || !lines.is_multiple_of(4096)
            || self.last.elapsed() < Duration::from_millis(200)
        {
            return;
        }
        self.last = Instant::now();
        self.drawn = true;
        let mut err = std::io::stderr().lock();
        let _ = match self.total {
            Some(total) if total > 0 => {
                let pct = (bytes as f64 / total as f64 * 100.0).min(100.0);
                let width = 30;
                let filled = (pct / 100.0 * width as f64) as usize;
                write!(
                    err,
                    "\r[{}{}] {pct:5.1}%  {lines} lines",
                    "#".repeat(filled),
                    " ".repeat(width - filled)
                )
            }
            _ => write!(err, "\r{lines} lines"),
        };
        let _ = err.flush();
    }

    /// Clears the progress line.
    pub fn finish(&mut self) {
        if self.drawn {
            let _ = write!(std::io::stderr(), "\r\x1b[2K");
            self.drawn = false;
        }
    }
}
