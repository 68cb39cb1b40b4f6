//! SqlSink against a real SQLite database (rusqlite, a development dependency only: the
//! SDK depends on no driver).

use std::path::Path;
use std::sync::mpsc;
use std::thread;

use etlstage_worker::{SqlConnection, SqlSink};
use rusqlite::Connection;

const FIRST: &str = "0123456789abcdef0123456789abcdef";
const OTHER: &str = "fedcba9876543210fedcba9876543210";

/// The two verbs for rusqlite, as a user of the SDK writes them.
struct Sqlite(Connection);

impl SqlConnection for Sqlite {
    type Error = rusqlite::Error;
    fn execute(&mut self, sql: &str, params: &[&str]) -> Result<(), rusqlite::Error> {
        self.0.execute(sql, rusqlite::params_from_iter(params)).map(|_| ())
    }
    fn exists(&mut self, sql: &str, params: &[&str]) -> Result<bool, rusqlite::Error> {
        self.0.prepare(sql)?.exists(rusqlite::params_from_iter(params))
    }
}

fn open(path: &Path) -> Sqlite {
    let c = Connection::open(path).unwrap();
    c.busy_timeout(std::time::Duration::from_secs(10)).unwrap();
    c.pragma_update(None, "journal_mode", "WAL").unwrap();
    c.execute("CREATE TABLE IF NOT EXISTS lines (line TEXT NOT NULL)", []).unwrap();
    Sqlite(c)
}

fn insert(lines: &'static [&'static str]) -> impl FnOnce(&mut Sqlite) -> Result<(), rusqlite::Error> {
    move |c| {
        for l in lines {
            c.0.execute("INSERT INTO lines (line) VALUES (?)", [l])?;
        }
        Ok(())
    }
}

fn column(c: &Sqlite, query: &str) -> Vec<String> {
    let mut st = c.0.prepare(query).unwrap();
    let rows = st.query_map([], |r| r.get::<_, String>(0)).unwrap();
    rows.map(Result::unwrap).collect()
}

fn expect(c: &Sqlite, lines: &[&str], ids: &[&str]) {
    assert_eq!(column(c, "SELECT line FROM lines ORDER BY rowid"), lines);
    assert_eq!(column(c, "SELECT id FROM etlstage_batches ORDER BY id"), ids);
}

#[test]
fn a_batch_is_loaded_once_a_failed_one_not_at_all() {
    let dir = tempdir();
    let mut c = open(&dir.join("rows.db"));
    let mut sink = SqlSink::default();
    assert!(sink.commit(&mut c, FIRST, insert(&["a", "b"])).unwrap());
    let mut ran = false;
    let again = sink.commit(&mut c, FIRST, |_| {
        ran = true;
        Ok(())
    });
    assert!(!again.unwrap(), "sent again: skipped");
    assert!(!ran, "the insert of a batch whose id is recorded ran");
    expect(&c, &["a", "b"], &[FIRST]);

    let failing = sink.commit(&mut c, OTHER, |c| {
        insert(&["c"])(c)?;
        Err(rusqlite::Error::InvalidQuery) // the loader's own failure, after a row
    });
    let err = failing.unwrap_err();
    assert!(err.to_string().contains(OTHER), "{err}");
    assert_eq!(err.exit_code(), 1);
    expect(&c, &["a", "b"], &[FIRST]); // neither its row nor its id

    assert!(sink.commit(&mut c, OTHER, insert(&["c", "d"])).unwrap()); // after the failure, loaded whole
    expect(&c, &["a", "b", "c", "d"], &[FIRST, OTHER]);
    assert!(sink.committed(&mut c, OTHER).unwrap());
    assert!(!sink.committed(&mut c, "00000000000000000000000000000000").unwrap());
}

#[test]
fn without_an_id_nothing_is_loaded() {
    let dir = tempdir();
    let mut c = open(&dir.join("rows.db"));
    let err = SqlSink::default().commit(&mut c, "", insert(&["a"])).unwrap_err();
    assert!(err.to_string().contains("batch_id: true"), "{err}");
    assert!(column(&c, "SELECT line FROM lines").is_empty());
}

#[test]
fn the_table_and_placeholder_are_the_users_to_name() {
    let dir = tempdir();
    let mut c = open(&dir.join("rows.db"));
    let mut sink = SqlSink::new("loaded_batches", "$1"); // SQLite takes $1 too
    assert!(sink.commit(&mut c, FIRST, insert(&["a"])).unwrap());
    assert!(!sink.commit(&mut c, FIRST, insert(&["a"])).unwrap());
    assert_eq!(column(&c, "SELECT id FROM loaded_batches"), [FIRST]);
}

// Under PostgreSQL's READ COMMITTED two loaders of one batch may both find its id absent:
// the id's primary key still refuses the second. A lookup that never finds the id stands
// for that race here: the second commit fails, its rows rolled back.
#[test]
fn the_primary_key_refuses_a_second_load_the_lookup_missed() {
    let dir = tempdir();
    let mut c = open(&dir.join("rows.db"));
    let mut blind = SqlSink::default();
    blind.lookup = "SELECT 1 FROM etlstage_batches WHERE id = ? AND 0".into();
    assert!(blind.commit(&mut c, FIRST, insert(&["a"])).unwrap());
    let err = blind.commit(&mut c, FIRST, insert(&["a"])).unwrap_err();
    assert!(err.to_string().contains("UNIQUE"), "{err}");
    expect(&c, &["a"], &[FIRST]);
}

// Two loaders (two connections) commit the same batch at once: both find its id absent,
// the first commits, the second's transaction fails (SQLite: its snapshot is stale) and
// rolls back, and it reports the batch skipped, since the id is recorded now.
#[test]
fn two_loaders_of_one_batch_at_once_load_it_once() {
    let dir = tempdir();
    let path = dir.join("rows.db");
    let mut first = open(&path);
    let mut second = open(&path);
    let mut b = SqlSink::default();
    b.committed(&mut second, FIRST).unwrap(); // the table is there before the race

    let (a_inserted, a_has_inserted) = mpsc::channel();
    let (b_looked_up, b_has_looked_up) = mpsc::channel::<()>();
    let (a_done, a_is_done) = mpsc::channel();
    let winner = thread::spawn(move || {
        let loaded = SqlSink::default().commit(&mut first, FIRST, |c| {
            insert(&["a"])(c)?;
            a_inserted.send(()).unwrap();
            b_has_looked_up.recv().unwrap(); // b has found the id absent too
            Ok(())
        });
        a_done.send(()).unwrap();
        (loaded.unwrap(), first)
    });
    a_has_inserted.recv().unwrap();
    let loaded = b.commit(&mut second, FIRST, |c| {
        b_looked_up.send(()).unwrap();
        a_is_done.recv().unwrap();
        insert(&["a"])(c)
    });
    let (a_loaded, first) = winner.join().unwrap();
    assert!(a_loaded, "the first loader");
    assert!(!loaded.unwrap(), "the second loader: want skipped");
    expect(&first, &["a"], &[FIRST]);
}

fn tempdir() -> std::path::PathBuf {
    use std::sync::atomic::{AtomicUsize, Ordering};
    static N: AtomicUsize = AtomicUsize::new(0);
    let dir = std::env::temp_dir().join(format!(
        "etlstage-sqlsink-{}-{}",
        std::process::id(),
        N.fetch_add(1, Ordering::SeqCst)
    ));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}
