//! The idempotent SQL sink: each batch's rows and its id in one transaction.
//!
//! Rust has no standard database interface, so the sink speaks through [`SqlConnection`],
//! two verbs a driver's connection implements in a few lines (rusqlite, postgres, mysql...);
//! the SDK itself depends on none.

use std::fmt::Display;

use crate::error::Error;
use crate::idempotent::NO_ID;

/// What [`SqlSink`] needs of a connection: run a statement, and ask whether a query
/// returns a row. The parameters are the batch id (text).
pub trait SqlConnection {
    type Error: Display;
    fn execute(&mut self, sql: &str, params: &[&str]) -> Result<(), Self::Error>;
    fn exists(&mut self, sql: &str, params: &[&str]) -> Result<bool, Self::Error>;
}

/// Commits each batch's rows and its id in one transaction: a batch whose id is recorded
/// is not loaded again.
///
/// The ids go into a table (default `etlstage_batches (id VARCHAR(64) PRIMARY KEY)`,
/// created before the first commit and outside its transaction: MySQL commits a
/// transaction at any CREATE TABLE). `begin` opens the transaction (`BEGIN IMMEDIATE` on
/// SQLite takes the write lock at once).
///
/// Two loaders committing the same id at once do not both load it: the id's primary key
/// (or the database's locks) fails the second one's transaction, which rolls back; the id
/// then being recorded, `commit` reports that batch skipped (`Ok(false)`), as it would have
/// had the second loader come after the first.
pub struct SqlSink {
    pub begin: String,
    /// `None`: create nothing.
    pub create: Option<String>,
    pub lookup: String,
    pub record: String,
    created: bool,
}

impl Default for SqlSink {
    fn default() -> Self {
        SqlSink::new("etlstage_batches", "?")
    }
}

impl SqlSink {
    /// The ids in `table`, the id's parameter written `placeholder` (`?` for SQLite and
    /// MySQL, `$1` for PostgreSQL).
    pub fn new(table: &str, placeholder: &str) -> SqlSink {
        SqlSink {
            begin: "BEGIN".into(),
            // VARCHAR, not TEXT: MySQL takes no TEXT column as a key
            create: Some(format!("CREATE TABLE IF NOT EXISTS {table} (id VARCHAR(64) PRIMARY KEY)")),
            lookup: format!("SELECT 1 FROM {table} WHERE id = {placeholder}"),
            record: format!("INSERT INTO {table} (id) VALUES ({placeholder})"),
            created: false,
        }
    }

    fn ensure_table<C: SqlConnection>(&mut self, conn: &mut C) -> Result<(), Error> {
        if let (Some(create), false) = (&self.create, self.created) {
            conn.execute(create, &[]).map_err(|e| failed("creating the batch ids table", e))?;
        }
        self.created = true;
        Ok(())
    }

    /// Whether the id is recorded.
    pub fn committed<C: SqlConnection>(&mut self, conn: &mut C, batch_id: &str) -> Result<bool, Error> {
        self.ensure_table(conn)?;
        conn.exists(&self.lookup, &[batch_id]).map_err(|e| failed("looking the batch id up", e))
    }

    /// Runs `insert` (the batch's rows, through the same connection) and records the id in
    /// one transaction, then commits: `Ok(true)`. When the id is recorded already, nothing
    /// runs and nothing changes: `Ok(false)`. An error from `insert`, from recording the id
    /// or from the commit rolls everything back and is returned (unless the id turns out
    /// recorded by another loader meanwhile: `Ok(false)`).
    pub fn commit<C, F>(&mut self, conn: &mut C, batch_id: &str, insert: F) -> Result<bool, Error>
    where
        C: SqlConnection,
        F: FnOnce(&mut C) -> Result<(), C::Error>,
    {
        if batch_id.is_empty() {
            return Err(Error::Worker(NO_ID.into()));
        }
        self.ensure_table(conn)?;
        conn.execute(&self.begin, &[]).map_err(|e| failed("beginning the batch's transaction", e))?;
        let outcome = (|| -> Result<bool, C::Error> {
            if conn.exists(&self.lookup, &[batch_id])? {
                conn.execute("ROLLBACK", &[])?;
                return Ok(false);
            }
            insert(conn)?;
            conn.execute(&self.record, &[batch_id])?;
            conn.execute("COMMIT", &[])?;
            Ok(true)
        })();
        match outcome {
            Ok(loaded) => Ok(loaded),
            Err(e) => {
                let _ = conn.execute("ROLLBACK", &[]); // none left after a failed COMMIT
                // A concurrent loader of the same batch committed first: its id's primary
                // key (or a lock) failed ours. The batch is loaded once, as if ours had come second.
                if let Ok(true) = conn.exists(&self.lookup, &[batch_id]) {
                    return Ok(false);
                }
                Err(failed(&format!("loading batch {batch_id}"), e))
            }
        }
    }
}

fn failed(what: &str, e: impl Display) -> Error {
    Error::Worker(format!("{what}: {e}"))
}
