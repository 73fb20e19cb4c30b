//! The CLI's errors: each one becomes a single line on stderr and exit status 2.

use std::fmt;
use std::io;
use std::path::PathBuf;

use tollgate::{DecideError, PolicyError};

/// Where an input comes from, as named in error messages.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Source {
    /// Standard input.
    Stdin,
    /// A file given on the command line.
    File(PathBuf),
}

impl fmt::Display for Source {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Source::Stdin => f.write_str("<stdin>"),
            Source::File(p) => write!(f, "{}", p.display()),
        }
    }
}

/// Everything that stops a command. A denial is never an error: it is output.
#[derive(Debug)]
pub enum CliError {
    /// The policy (or the limit given to `compare`) does not parse; the core's message names
    /// the field, the value and the rule.
    Policy(PolicyError),
    /// An input could not be opened or read.
    Read {
        /// The input.
        source: Source,
        /// What the operating system said.
        error: io::Error,
    },
    /// A line that is not a valid record of the expected format.
    Malformed {
        /// The input.
        source: Source,
        /// 1-based line number.
        line: u64,
        /// What is wrong with it.
        reason: String,
    },
    /// A trace whose time goes backwards (and `--sort` was not given).
    OutOfOrder {
        /// The input.
        source: Source,
        /// 1-based line number of the earlier time.
        line: u64,
        /// Its time.
        time_ms: u64,
        /// The time of the line before it.
        previous_ms: u64,
    },
    /// The core refused a request outright (a cost no wait would ever admit).
    Decide {
        /// The input.
        source: Source,
        /// 1-based line number of the request.
        line: u64,
        /// The core's error.
        error: DecideError,
    },
    /// The core refused to settle a request's actual cost (one above its bound).
    Settle {
        /// The input.
        source: Source,
        /// 1-based line number of the request.
        line: u64,
        /// The core's error.
        error: tollgate::ReservationError,
    },
    /// Options that cannot work together (for example a concurrency policy without request
    /// durations).
    Usage(String),
    /// Writing the output failed (other than a closed pipe, which ends the command quietly).
    Write(io::Error),
    /// An edge worker config the worker would refuse (`check-config`): the worker's own
    /// error ([`tollgate_config`]), naming the field.
    Config(tollgate_config::ConfigError),
    /// `rls check` got no decision: a bad `--descriptor` or `--server`, an unreachable
    /// server, or a gRPC error instead of an answer.
    Rls(crate::rls::RlsError),
}

impl fmt::Display for CliError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CliError::Policy(e) => write!(f, "{e}"),
            CliError::Read { source, error } => write!(f, "cannot read {source}: {error}"),
            CliError::Malformed {
                source,
                line,
                reason,
            } => write!(f, "{source} line {line}: {reason}"),
            CliError::OutOfOrder {
                source,
                line,
                time_ms,
                previous_ms,
            } => write!(
                f,
                "{source} line {line}: time_ms {time_ms} is before the previous line's \
                 {previous_ms} (times must not go backwards; pass --sort to sort the trace)"
            ),
            CliError::Decide {
                source,
                line,
                error,
            } => write!(f, "{source} line {line}: {error}"),
            CliError::Settle {
                source,
                line,
                error,
            } => write!(f, "{source} line {line}: {error}"),
            CliError::Usage(message) => f.write_str(message),
            CliError::Write(e) => write!(f, "cannot write the output: {e}"),
            CliError::Config(e) => write!(f, "{e}"),
            CliError::Rls(e) => write!(f, "{e}"),
        }
    }
}

impl std::error::Error for CliError {}

impl From<PolicyError> for CliError {
    fn from(e: PolicyError) -> Self {
        CliError::Policy(e)
    }
}

impl From<crate::rls::RlsError> for CliError {
    fn from(e: crate::rls::RlsError) -> Self {
        CliError::Rls(e)
    }
}

impl From<io::Error> for CliError {
    /// Only output errors convert implicitly; input errors name their source.
    fn from(e: io::Error) -> Self {
        CliError::Write(e)
    }
}
