//! Batch ids and the idempotent file sink (docs/protocol.md: batch ids).

use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};

use crate::error::Error;

const HEADER: &[u8] = b"etlstage-batch-id ";

/// A loader that commits by batch id was given a batch without one.
pub(crate) const NO_ID: &str = "this loader commits each batch with its id, but the batch came without one: \
     give the stage `batch_id: true` (L-stage, mode: batch) in stages.yaml";

/// The id in a batch's header message (the first of each batch under `ETLSTAGE_BATCH_ID=1`).
pub(crate) fn batch_id_of(first: &[u8]) -> Result<&str, Error> {
    let id = first.strip_prefix(HEADER).unwrap_or(b"");
    if id.len() == 32 && id.iter().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(b)) {
        return Ok(std::str::from_utf8(id).expect("hex digits"));
    }
    let shown = String::from_utf8_lossy(&first[..first.len().min(60)]).into_owned();
    Err(Error::Protocol(format!(
        "ETLSTAGE_BATCH_ID=1: expected a batch id header (etlstage-batch-id <32 hex digits>) first, got {shown:?}"
    )))
}

/// Commits each batch as one file named after its id in `dir`: written to a temporary
/// name, synced, renamed, the folder synced. A file is there whole or not at all, and a
/// batch whose file is there is not written again.
pub struct FileSink {
    pub dir: PathBuf,
    pub prefix: String,
    pub suffix: String,
}

impl FileSink {
    pub fn new(dir: impl AsRef<Path>) -> FileSink {
        FileSink { dir: dir.as_ref().to_path_buf(), prefix: "batch-".into(), suffix: ".txt".into() }
    }

    pub fn path(&self, batch_id: &str) -> PathBuf {
        self.dir.join(format!("{}{batch_id}{}", self.prefix, self.suffix))
    }

    /// Writes the batch's file (each message then a newline); `false`, and nothing
    /// written, when the id was committed before.
    pub fn commit(&self, batch_id: &str, messages: &[&[u8]]) -> Result<bool, Error> {
        if batch_id.is_empty() {
            return Err(Error::Worker(NO_ID.into()));
        }
        let last = self.path(batch_id);
        if last.exists() {
            return Ok(false);
        }
        fs::create_dir_all(&self.dir)?;
        let tmp = self.dir.join(format!(".tmp-{}-{batch_id}", std::process::id()));
        let written = (|| -> std::io::Result<()> {
            let mut f = fs::File::create(&tmp)?;
            let mut data = Vec::new();
            for m in messages {
                data.extend_from_slice(m);
                data.push(b'\n');
            }
            f.write_all(&data)?;
            f.sync_all()?;
            fs::rename(&tmp, &last)?;
            fs::File::open(&self.dir)?.sync_all() // the rename itself is durable
        })();
        if let Err(e) = written {
            let _ = fs::remove_file(&tmp);
            return Err(e.into());
        }
        Ok(true)
    }
}
