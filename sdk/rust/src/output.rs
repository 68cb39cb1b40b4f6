//! Results as whole blocks: each checked for marker bytes, then framed with EOM.

use std::io::Write;

use crate::error::Error;
use crate::scan::ByteSet;
use crate::scenario::Markers;

const BLOCK: usize = 1 << 18; // written once this much is buffered

/// Where a worker's results go.  Nothing reaches the supervisor but whole messages and
/// the markers the SDK writes.
pub struct Output<'a> {
    sink: &'a mut dyn Write,
    buf: Vec<u8>,
    answered: usize, // bytes of buf up to the last EOP or BNC
    markers: Markers,
    all: ByteSet,
    stage: String,
}

impl<'a> Output<'a> {
    pub(crate) fn new(sink: &'a mut dyn Write, markers: Markers, stage: &str) -> Self {
        let all = ByteSet::new([markers.eom, markers.eop, markers.eob, markers.bnc]);
        Output { sink, buf: Vec::with_capacity(BLOCK + 4096), answered: 0, markers, all, stage: stage.to_string() }
    }

    /// One result.  A result holding a marker byte is refused (the stream is never
    /// desynchronised): the worker stops with exit 3.
    pub fn emit(&mut self, message: &[u8]) -> Result<(), Error> {
        if let Some(at) = self.all.find(message) {
            return Err(self.marker_in(message, at));
        }
        self.buf.extend_from_slice(message);
        self.buf.push(self.markers.eom);
        if self.buf.len() >= BLOCK {
            self.sink.write_all(&self.buf)?;
            self.buf.clear();
            self.answered = 0;
        }
        Ok(())
    }

    fn marker_in(&self, message: &[u8], at: usize) -> Error {
        let b = message[at];
        let m = self.markers;
        let name = [(m.eom, "EOM"), (m.eop, "EOP"), (m.eob, "EOB"), (m.bnc, "BNC")]
            .iter()
            .find(|(x, _)| *x == b)
            .map(|(_, n)| *n)
            .unwrap_or("?");
        Error::Protocol(format!(
            "a result for stage {:?} contains its {name} marker 0x{b:02x} at byte {at}: {}; \
             messages must not contain marker bytes (choose other markers, or encode the data)",
            self.stage,
            escape(&message[at.saturating_sub(24)..(at + 24).min(message.len())])
        ))
    }

    pub(crate) fn signal(&mut self, byte: u8) {
        self.buf.push(byte);
        self.answered = self.buf.len();
    }

    pub(crate) fn flush(&mut self) -> Result<(), Error> {
        if !self.buf.is_empty() {
            self.sink.write_all(&self.buf)?;
            self.buf.clear();
            self.answered = 0;
        }
        self.sink.flush()?;
        Ok(())
    }

    /// When the worker fails: send the answers it completed, not the failed request's
    /// results (the supervisor sends that request again).
    pub(crate) fn flush_answered(&mut self) {
        self.buf.truncate(self.answered);
        let _ = self.flush(); // the worker is failing already; its own error is the one to report
    }
}

/// Bytes as printable text: `\n`, `\x00`, … escaped.
pub(crate) fn escape(bytes: &[u8]) -> String {
    bytes.iter().flat_map(|b| std::ascii::escape_default(*b)).map(char::from).collect()
}
