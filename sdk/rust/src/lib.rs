//! The etlstage worker SDK for Rust: extractors, transformers and loaders that speak the
//! marker protocol (docs/protocol.md) over any [`std::io::Read`] / [`std::io::Write`].
//!
//! ```no_run
//! use etlstage_worker::{run_transformer, Error, Output, Transformer, Worker};
//!
//! struct Upper;
//! impl Worker for Upper {}
//! impl Transformer for Upper {
//!     fn process(&mut self, messages: &[&[u8]], out: &mut Output<'_>) -> Result<(), Error> {
//!         for m in messages {
//!             out.emit(&m.to_ascii_uppercase())?;
//!         }
//!         Ok(())
//!     }
//! }
//!
//! fn main() {
//!     run_transformer(Upper)
//! }
//! ```
//!
//! Markers, mode and batch size come from the `ETLSTAGE_*` environment; the same code
//! serves single, supervisor-driven batch and worker-driven batch (BNC) modes.

mod error;
mod idempotent;
mod output;
mod report;
mod run;
mod scan;
mod scenario;
mod serve;
mod sqlsink;
mod worker;

pub use error::Error;
pub use idempotent::FileSink;
pub use output::Output;
pub use report::{Number, Report};
pub use run::{run_extractor, run_loader, run_transformer};
pub use scenario::{Markers, Mode, Scenario, StageType};
pub use serve::{serve_extractor, serve_loader, serve_transformer};
pub use sqlsink::{SqlConnection, SqlSink};
pub use worker::{Extractor, Loader, Request, Transformer, Worker};
