//! Opening an input: a file named on the command line, or standard input.

use std::fs::File;
use std::io::{self, BufRead, BufReader};
use std::path::Path;

use crate::error::{CliError, Source};

/// An opened input, read as a stream.
pub struct Input {
    /// What to call it in messages.
    pub source: Source,
    /// The bytes, buffered.
    pub reader: Box<dyn BufRead>,
    /// The size in bytes when known (a regular file), for progress reports.
    pub len: Option<u64>,
}

/// Opens `path`, or standard input when `path` is `None` or `-`.
pub fn open(path: Option<&Path>) -> Result<Input, CliError> {
    match path {
        None => Ok(stdin()),
        Some(p) if p.as_os_str() == "-" => Ok(stdin()),
        Some(p) => {
            let source = Source::File(p.to_path_buf());
            let file = File::open(p).map_err(|error| CliError::Read {
                source: source.clone(),
                error,
            })?;
            let meta = file.metadata().map_err(|error| CliError::Read {
                source: source.clone(),
                error,
            })?;
            if meta.is_dir() {
                return Err(CliError::Read {
                    source,
                    error: io::Error::other("is a directory"),
                });
            }
            Ok(Input {
                source,
                reader: Box::new(BufReader::with_capacity(64 * 1024, file)),
                len: meta.is_file().then_some(meta.len()),
            })
        }
    }
}

fn stdin() -> Input {
    Input {
        source: Source::Stdin,
        reader: Box::new(BufReader::with_capacity(64 * 1024, io::stdin())),
        len: None,
    }
}
