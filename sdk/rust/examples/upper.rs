//! A transformer: each message in upper case (ASCII letters; other bytes kept as they
//! are, so UTF-8 stays UTF-8), with a count of messages for the run's summary.
use etlstage_worker::{run_transformer, Error, Output, Report, Transformer, Worker};

#[derive(Default)]
struct Upper {
    seen: u64,
}

impl Worker for Upper {
    fn report(&mut self) -> Option<Report> {
        Some(Report::new().count("upper", self.seen))
    }
}

impl Transformer for Upper {
    fn process(&mut self, messages: &[&[u8]], out: &mut Output<'_>) -> Result<(), Error> {
        for m in messages {
            out.emit(&m.to_ascii_uppercase())?;
        }
        self.seen += messages.len() as u64;
        Ok(())
    }
}

fn main() {
    run_transformer(Upper::default())
}
