//! An extractor: `N` numbered messages per cycle (`N` from the first argument, 3 by
//! default); plain mode emits one cycle's worth.  With worker-managed offsets the next
//! number is committed to `offset` in the stage's state folder once a cycle's window is
//! done (a new request came), never on end of input.
use std::fs;
use std::path::PathBuf;

use etlstage_worker::{run_extractor, Error, Extractor, Output, Request, Scenario, Worker};

struct Counter {
    per_cycle: u64,
    next: u64,
    committed_file: Option<PathBuf>,
}

impl Worker for Counter {
    fn setup(&mut self, sc: &Scenario) -> Result<(), Error> {
        if !sc.state_dir.is_empty() {
            let file = PathBuf::from(&sc.state_dir).join(format!("offset-{}", sc.instance));
            self.next = fs::read_to_string(&file).ok().and_then(|s| s.trim().parse().ok()).unwrap_or(0);
            self.committed_file = Some(file);
        }
        Ok(())
    }
}

impl Extractor for Counter {
    fn extract(&mut self, _request: Option<&Request>, out: &mut Output<'_>) -> Result<(), Error> {
        for _ in 0..self.per_cycle {
            out.emit(format!("record {}", self.next).as_bytes())?;
            self.next += 1;
        }
        Ok(())
    }

    fn on_window_done(&mut self, _request: &Request) -> Result<(), Error> {
        if let Some(file) = &self.committed_file {
            let tmp = file.with_extension("tmp");
            fs::write(&tmp, self.next.to_string())?;
            fs::rename(&tmp, file)?;
        }
        Ok(())
    }
}

fn main() {
    let per_cycle = std::env::args().nth(1).and_then(|a| a.parse().ok()).unwrap_or(3);
    run_extractor(Counter { per_cycle, next: 0, committed_file: None })
}
