//! What a worker author implements: one of three traits, plus the common hooks.

use crate::error::Error;
use crate::output::Output;
use crate::report::Report;
use crate::scenario::Scenario;

/// Hooks every worker has; all optional.
pub trait Worker {
    /// Once, before the first request (open connections, files).
    fn setup(&mut self, _scenario: &Scenario) -> Result<(), Error> {
        Ok(())
    }
    /// Once, when stdin closes (the supervisor has no more work) or the worker fails.
    fn teardown(&mut self) -> Result<(), Error> {
        Ok(())
    }
    /// Counters for the end-of-run summary, asked after each batch or cycle, before its EOP.
    fn report(&mut self) -> Option<Report> {
        None
    }
}

/// One cycle request to a cyclic extractor (`None` is passed in plain mode).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Request {
    /// The request message: empty with worker-managed offsets, else `{"start": S, "end": E}`.
    pub raw: Vec<u8>,
    /// 0 for the first request of this process.
    pub cycle: u64,
    /// `start` and `end` of a supervisor-managed window: the integer's digits, or the
    /// ISO-8601 string without its quotes.
    pub start: Option<String>,
    pub end: Option<String>,
}

impl Request {
    pub fn parse(raw: &[u8], cycle: u64) -> Request {
        let text = std::str::from_utf8(raw).unwrap_or("");
        Request { raw: raw.to_vec(), cycle, start: json_field(text, "start"), end: json_field(text, "end") }
    }
}

/// The value of `"key": ...` in a flat JSON object: a string's text or a number's digits.
fn json_field(text: &str, key: &str) -> Option<String> {
    let at = text.find(&format!("\"{key}\""))? + key.len() + 2;
    let rest = text[at..].trim_start().strip_prefix(':')?.trim_start();
    if let Some(s) = rest.strip_prefix('"') {
        return s.find('"').map(|end| s[..end].to_string());
    }
    let end = rest.find(|c: char| c == ',' || c == '}' || c.is_whitespace()).unwrap_or(rest.len());
    (end > 0).then(|| rest[..end].to_string())
}

/// An E-worker: plain (one call for the whole run) or cyclic (one call per request).
pub trait Extractor: Worker {
    /// Emit the messages of one cycle (or, in plain mode, of the whole run) to `out`.
    fn extract(&mut self, request: Option<&Request>, out: &mut Output<'_>) -> Result<(), Error>;

    /// Worker-managed offsets: a new request arrived, so the previous cycle's window was
    /// fully loaded downstream — commit its offsets now.  Never commit on end of input:
    /// that may mean the supervisor died.
    fn on_window_done(&mut self, _request: &Request) -> Result<(), Error> {
        Ok(())
    }
}

/// A T-worker: results for a batch (a batch of one in single mode); zero, one or many each.
pub trait Transformer: Worker {
    fn process(&mut self, messages: &[&[u8]], out: &mut Output<'_>) -> Result<(), Error>;
}

/// An L-worker: returning `Ok` means the batch is durably loaded; only then is EOP written.
pub trait Loader: Worker {
    fn load(&mut self, messages: &[&[u8]]) -> Result<(), Error>;

    /// A batch with its id (a stage with `batch_id: true`): the same whenever the same
    /// messages are sent again, never the same for other messages. Commit it with the data
    /// ([`crate::FileSink`]) to load idempotently. By default the id is dropped: `load`.
    fn load_batch(&mut self, _batch_id: &str, messages: &[&[u8]]) -> Result<(), Error> {
        self.load(messages)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_request_names_its_window() {
        let r = Request::parse(br#"{"start": 10, "end":20}"#, 3);
        assert_eq!((r.start.as_deref(), r.end.as_deref(), r.cycle), (Some("10"), Some("20"), 3));
        let r = Request::parse(br#"{"start":"2026-01-01T00:00:00Z","end":"2026-01-01T00:01:00Z"}"#, 0);
        assert_eq!(r.start.as_deref(), Some("2026-01-01T00:00:00Z"));
        assert_eq!(Request::parse(b"", 0).start, None);
    }
}
