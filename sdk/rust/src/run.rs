//! Entry points for a worker program: scenario from the environment, the process's
//! stdin and stdout, errors on stderr, the exit status.

use std::fs::File;
use std::io::{self, Read, Write};

use crate::error::Error;
use crate::scenario::Scenario;
use crate::serve::{serve_extractor, serve_loader, serve_transformer};
use crate::worker::{Extractor, Loader, Transformer};

/// Serve an extractor on stdin/stdout, then exit (0 on a clean end).
pub fn run_extractor(mut w: impl Extractor) -> ! {
    run(|sc, i, o| serve_extractor(&mut w, sc, i, o))
}

/// Serve a transformer on stdin/stdout, then exit (0 on a clean end).
pub fn run_transformer(mut w: impl Transformer) -> ! {
    run(|sc, i, o| serve_transformer(&mut w, sc, i, o))
}

/// Serve a loader on stdin/stdout, then exit (0 on a clean end).
pub fn run_loader(mut w: impl Loader) -> ! {
    run(|sc, i, o| serve_loader(&mut w, sc, i, o))
}

fn run(body: impl FnOnce(&Scenario, &mut dyn Read, &mut dyn Write) -> Result<(), Error>) -> ! {
    let name = std::env::args()
        .next()
        .and_then(|a| a.rsplit('/').next().map(str::to_string))
        .unwrap_or_else(|| "worker".to_string());
    let result = Scenario::from_env().and_then(|sc| {
        let mut output = protected_stdout()?;
        let stdin = io::stdin();
        let mut input = stdin.lock();
        body(&sc, &mut input, &mut output)
    });
    match result {
        Ok(()) => std::process::exit(0),
        Err(e) => {
            eprintln!("{name}: {e}");
            std::process::exit(e.exit_code())
        }
    }
}

/// A private copy of stdout for the protocol; file descriptor 1 then points at stderr,
/// so a stray `println!` (the worker's or a library's) cannot break the stream.
#[cfg(unix)]
fn protected_stdout() -> io::Result<File> {
    use std::os::fd::FromRawFd;
    extern "C" {
        fn dup(fd: i32) -> i32;
        fn dup2(fd: i32, to: i32) -> i32;
    }
    io::stdout().flush()?;
    // SAFETY: plain descriptor calls; the new descriptor is owned by the File alone.
    unsafe {
        let fd = dup(1);
        if fd < 0 || dup2(2, 1) < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(File::from_raw_fd(fd))
    }
}

#[cfg(not(unix))]
fn protected_stdout() -> io::Result<io::Stdout> {
    Ok(io::stdout())
}
