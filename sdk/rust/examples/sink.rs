//! A loader: appends each batch to a file (the first argument, or `loaded.txt` in the
//! stage's state folder), one message a line, and syncs it before acknowledging.
use std::fs::{File, OpenOptions};
use std::io::Write;

use etlstage_worker::{run_loader, Error, Loader, Report, Scenario, Worker};

#[derive(Default)]
struct Append {
    path: Option<String>,
    file: Option<File>,
    loaded: u64,
}

impl Worker for Append {
    fn setup(&mut self, sc: &Scenario) -> Result<(), Error> {
        let path = self.path.clone().unwrap_or_else(|| {
            let dir = if sc.state_dir.is_empty() { "." } else { sc.state_dir.as_str() };
            format!("{dir}/loaded.txt")
        });
        self.file = Some(OpenOptions::new().create(true).append(true).open(&path)?);
        Ok(())
    }

    fn report(&mut self) -> Option<Report> {
        Some(Report::new().count("loaded", self.loaded))
    }
}

impl Loader for Append {
    fn load(&mut self, messages: &[&[u8]]) -> Result<(), Error> {
        let file = self.file.as_mut().ok_or("the loader was not set up")?;
        let mut block = Vec::new();
        for m in messages {
            block.extend_from_slice(m);
            block.push(b'\n');
        }
        file.write_all(&block)?;
        file.sync_data()?;
        self.loaded += messages.len() as u64;
        Ok(())
    }
}

fn main() {
    run_loader(Append { path: std::env::args().nth(1), ..Default::default() })
}
