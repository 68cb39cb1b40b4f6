//! An extractor of numbered records: `counter [PER_CYCLE] [TOTAL]` (3 and no limit by
//! default).  Plain mode emits records 0..TOTAL (PER_CYCLE of them without a TOTAL).
//! Cyclic with worker-managed offsets: the next PER_CYCLE records each cycle, up to
//! TOTAL; the next number is committed to `offset-<instance>` in the stage's state folder
//! once a cycle's window is done (a new request came), never on end of input.  Cyclic
//! with supervisor-managed offsets: records S..E-1 of the request's window.
use std::fs;
use std::path::PathBuf;

use etlstage_worker::{run_extractor, Error, Extractor, Output, Request, Scenario, Worker};

struct Counter {
    per_cycle: u64,
    total: Option<u64>,
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
    fn extract(&mut self, request: Option<&Request>, out: &mut Output<'_>) -> Result<(), Error> {
        let limit = self.total.unwrap_or(u64::MAX);
        let window = request.and_then(|r| Some((r.start.as_ref()?.parse().ok()?, r.end.as_ref()?.parse().ok()?)));
        let (from, to) = match (request, window) {
            (_, Some((start, end))) => (start, end),
            (None, None) => (0, self.total.unwrap_or(self.per_cycle)),
            (Some(_), None) => (self.next, self.next.saturating_add(self.per_cycle)),
        };
        for n in from..to.min(limit) {
            out.emit(format!("record {n}").as_bytes())?;
        }
        if window.is_none() {
            self.next = to.min(limit).max(self.next);
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
    let arg = |i: usize| std::env::args().nth(i).and_then(|a| a.parse().ok());
    run_extractor(Counter { per_cycle: arg(1).unwrap_or(3), total: arg(2), next: 0, committed_file: None })
}
