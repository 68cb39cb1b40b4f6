//! Errors and the exit status each one ends a worker with (as the Python SDK does).

use std::fmt;
use std::io;

/// Why a worker stopped.  `exit_code`: 1 the worker's own code or its pipes failed,
/// 2 a bad run instruction (the `ETLSTAGE_*` environment), 3 a protocol violation
/// (by the supervisor's input, or a result holding a marker byte).
#[derive(Debug)]
pub enum Error {
    Config(String),
    Protocol(String),
    Io(io::Error),
    Worker(String),
}

impl Error {
    pub fn exit_code(&self) -> i32 {
        match self {
            Error::Config(_) => 2,
            Error::Protocol(_) => 3,
            Error::Io(_) | Error::Worker(_) => 1,
        }
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::Config(m) => write!(f, "bad run instruction: {m}"),
            Error::Protocol(m) => write!(f, "protocol violation: {m}"),
            Error::Io(e) if e.kind() == io::ErrorKind::BrokenPipe => {
                write!(f, "the supervisor closed our stdout; stopping")
            }
            Error::Io(e) => write!(f, "i/o error: {e}"),
            Error::Worker(m) => write!(f, "{m}"),
        }
    }
}

impl std::error::Error for Error {}

impl From<io::Error> for Error {
    fn from(e: io::Error) -> Self {
        Error::Io(e)
    }
}

impl From<String> for Error {
    fn from(m: String) -> Self {
        Error::Worker(m)
    }
}

impl From<&str> for Error {
    fn from(m: &str) -> Self {
        Error::Worker(m.to_string())
    }
}
