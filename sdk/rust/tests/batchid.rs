//! Batch ids (`ETLSTAGE_BATCH_ID=1`): the header is stripped and its id given to
//! `load_batch`; the file sink commits a batch once.

use etlstage_worker::{serve_loader, Error, FileSink, Loader, Scenario, Worker};

const ID: &str = "0123456789abcdef0123456789abcdef";

#[derive(Default)]
struct Seen(Vec<(String, Vec<String>)>);
impl Worker for Seen {}
impl Loader for Seen {
    fn load(&mut self, messages: &[&[u8]]) -> Result<(), Error> {
        self.load_batch("", messages)
    }
    fn load_batch(&mut self, id: &str, messages: &[&[u8]]) -> Result<(), Error> {
        self.0.push((id.into(), messages.iter().map(|m| String::from_utf8_lossy(m).into_owned()).collect()));
        Ok(())
    }
}

fn scenario(batch_id: &str) -> Scenario {
    Scenario::from_vars([
        ("ETLSTAGE_TYPE", "L"),
        ("ETLSTAGE_MODE", "batch"),
        ("ETLSTAGE_BATCH_SIZE", "2"),
        ("ETLSTAGE_BATCH_ID", batch_id),
    ])
    .unwrap()
}

#[test]
fn the_header_is_stripped_and_its_id_given_to_load_batch() {
    let mut w = Seen::default();
    let mut out = Vec::new();
    let input = format!("etlstage-batch-id {ID}\na\nb\n\x17etlstage-batch-id {}\nc\n\x17", "f".repeat(32));
    serve_loader(&mut w, &scenario("1"), &mut input.as_bytes(), &mut out).unwrap();
    assert_eq!(out, b"\x00\x00");
    assert_eq!(w.0, vec![(ID.into(), vec!["a".into(), "b".into()]), ("f".repeat(32), vec!["c".into()])]);
}

#[test]
fn without_batch_ids_the_first_message_is_a_message() {
    let mut w = Seen::default();
    let input = format!("etlstage-batch-id {ID}\na\n\x17");
    serve_loader(&mut w, &scenario(""), &mut input.as_bytes(), &mut Vec::new()).unwrap();
    assert_eq!(w.0, vec![(String::new(), vec![format!("etlstage-batch-id {ID}"), "a".into()])]);
}

#[test]
fn a_batch_without_its_header_is_a_violation() {
    let mut w = Seen::default();
    let err = serve_loader(&mut w, &scenario("1"), &mut &b"a\nb\n\x17"[..], &mut Vec::new()).unwrap_err();
    assert_eq!(err.exit_code(), 3);
    assert!(w.0.is_empty());
}

#[test]
fn the_file_sink_commits_a_batch_once() {
    let dir = std::env::temp_dir().join(format!("etlstage-sink-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let sink = FileSink::new(&dir);
    assert!(sink.commit(ID, &[b"a", b"b"]).unwrap());
    assert!(!sink.commit(ID, &[b"a", b"b"]).unwrap());
    assert_eq!(std::fs::read(sink.path(ID)).unwrap(), b"a\nb\n");
    assert_eq!(std::fs::read_dir(&dir).unwrap().count(), 1);
    assert!(sink.commit("", &[b"x"]).is_err());
    std::fs::remove_dir_all(&dir).unwrap();
}
