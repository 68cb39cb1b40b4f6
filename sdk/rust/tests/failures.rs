//! What the vectors do not show: a failing worker never acknowledges the request it failed
//! on, and its teardown still runs.

use etlstage_worker::*;

#[derive(Default)]
struct Flaky {
    calls: usize,
    torn_down: bool,
}

impl Worker for Flaky {
    fn teardown(&mut self) -> Result<(), Error> {
        self.torn_down = true;
        Ok(())
    }
}

impl Loader for Flaky {
    fn load(&mut self, _messages: &[&[u8]]) -> Result<(), Error> {
        self.calls += 1;
        if self.calls == 2 {
            return Err("the database went away".into());
        }
        Ok(())
    }
}

impl Transformer for Flaky {
    fn process(&mut self, messages: &[&[u8]], out: &mut Output<'_>) -> Result<(), Error> {
        self.calls += 1;
        out.emit(messages[0])?;
        if self.calls == 2 {
            return Err(format!("cannot transform {:?}", messages[0]).into());
        }
        Ok(())
    }
}

fn scenario(kind: &str) -> Scenario {
    Scenario::from_vars([("ETLSTAGE_TYPE", kind), ("ETLSTAGE_MODE", "single")]).unwrap()
}

#[test]
fn a_failed_load_is_not_acknowledged() {
    let mut w = Flaky::default();
    let mut out = Vec::new();
    let err = serve_loader(&mut w, &scenario("L"), &mut &b"a\nb\nc\n"[..], &mut out).unwrap_err();
    assert_eq!(err.exit_code(), 1);
    assert_eq!(err.to_string(), "the database went away");
    assert_eq!(out, b"\x00", "one EOP, for the first batch only");
    assert!(w.torn_down);
}

#[test]
fn a_failed_transform_writes_neither_its_results_nor_eop() {
    let mut w = Flaky::default();
    let mut out = Vec::new();
    let err = serve_transformer(&mut w, &scenario("T"), &mut &b"a\nb\nc\n"[..], &mut out).unwrap_err();
    assert_eq!(err.exit_code(), 1);
    assert_eq!(out, b"a\n\x00", "the failed request's partial results stay unwritten");
    assert!(w.torn_down);
}

#[test]
fn a_worker_of_the_wrong_type_is_refused() {
    let mut w = Flaky::default();
    let err = serve_loader(&mut w, &scenario("T"), &mut &b"a\n"[..], &mut Vec::new()).unwrap_err();
    assert_eq!(err.exit_code(), 2);
    assert!(err.to_string().contains("T-stage"), "{err}");
}
