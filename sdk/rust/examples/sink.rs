//! An idempotent loader, for a stage with `mode: batch` and `batch_id: true`: each batch
//! becomes one file named after its id in a folder (the first argument, or `sink-<instance>`
//! in the stage's state folder), written, synced and renamed by `FileSink` before the
//! batch is acknowledged. A batch sent again after a crash keeps its id, finds its file
//! there and is not written twice. Reports `{"loaded": N, "output": DIR}`.
use std::path::Path;

use etlstage_worker::{run_loader, Error, FileSink, Loader, Report, Scenario, Worker};

struct Sink {
    dir: Option<String>,
    files: Option<FileSink>,
    loaded: u64,
}

impl Worker for Sink {
    fn setup(&mut self, sc: &Scenario) -> Result<(), Error> {
        let default = || Path::new(&sc.state_dir).join(format!("sink-{}", sc.instance)).display().to_string();
        let dir = self.dir.get_or_insert_with(default);
        self.files = Some(FileSink::new(dir));
        Ok(())
    }

    fn report(&mut self) -> Option<Report> {
        Some(Report::new().count("loaded", self.loaded).output(self.dir.as_deref().unwrap_or("")))
    }
}

impl Loader for Sink {
    fn load(&mut self, messages: &[&[u8]]) -> Result<(), Error> {
        self.load_batch("", messages) // no id: FileSink refuses the batch, naming the stage key
    }

    fn load_batch(&mut self, id: &str, messages: &[&[u8]]) -> Result<(), Error> {
        let files = self.files.as_ref().ok_or("the loader was not set up")?;
        if files.commit(id, messages)? {
            self.loaded += messages.len() as u64; // false: committed before, skipped
        }
        Ok(())
    }
}

fn main() {
    run_loader(Sink { dir: std::env::args().nth(1), files: None, loaded: 0 })
}
