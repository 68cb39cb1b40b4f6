//! Every protocol test vector in `sdk/vectors/*.json` (sdk/vectors/README.md), run
//! through this SDK: the same bytes in, the same bytes out, read by read.

#[path = "support/json.rs"]
mod json;

use std::cell::RefCell;
use std::collections::BTreeMap;
use std::io::{self, Read, Write};
use std::path::{Path, PathBuf};
use std::rc::Rc;

use etlstage_worker::*;
use json::Json;

/// Hands the SDK one chunk per read, noting how much output had arrived at each read.
struct Chunks {
    chunks: Vec<Vec<u8>>,
    next: usize,
    out: Rc<RefCell<Vec<u8>>>,
    marks: Rc<RefCell<Vec<usize>>>,
}

impl Read for Chunks {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        self.marks.borrow_mut().push(self.out.borrow().len());
        let Some(chunk) = self.chunks.get(self.next) else { return Ok(0) };
        assert!(chunk.len() <= buf.len(), "a test chunk larger than the SDK's read");
        buf[..chunk.len()].copy_from_slice(chunk);
        self.next += 1;
        Ok(chunk.len())
    }
}

struct Sink(Rc<RefCell<Vec<u8>>>);

impl Write for Sink {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.0.borrow_mut().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

#[derive(Default)]
struct Handler {
    name: String,
    cycles: Vec<Vec<Vec<u8>>>,
    batches: u64,
    messages: u64,
    loaded: Vec<Vec<Vec<u8>>>,
    commits: Vec<u64>,
}

impl Worker for Handler {
    fn report(&mut self) -> Option<Report> {
        matches!(self.name.as_str(), "count-batch" | "collect")
            .then(|| Report::new().count("batches", self.batches).count("messages", self.messages))
    }
}

impl Transformer for Handler {
    fn process(&mut self, messages: &[&[u8]], out: &mut Output<'_>) -> Result<(), Error> {
        self.batches += 1;
        self.messages += messages.len() as u64;
        match self.name.as_str() {
            "echo" => messages.iter().try_for_each(|m| out.emit(m)),
            "upper-ascii" => messages.iter().try_for_each(|m| out.emit(&m.to_ascii_uppercase())),
            "split-comma" => messages.iter().flat_map(|m| m.split(|b| *b == b',')).try_for_each(|p| out.emit(p)),
            "drop" => Ok(()),
            "count-batch" => out.emit(messages.len().to_string().as_bytes()),
            other => panic!("no T handler {other}"),
        }
    }
}

impl Loader for Handler {
    fn load(&mut self, messages: &[&[u8]]) -> Result<(), Error> {
        self.batches += 1;
        self.messages += messages.len() as u64;
        self.loaded.push(messages.iter().map(|m| m.to_vec()).collect());
        Ok(())
    }
}

impl Extractor for Handler {
    fn extract(&mut self, request: Option<&Request>, out: &mut Output<'_>) -> Result<(), Error> {
        let cycle = request.map_or(0, |r| r.cycle) as usize;
        if self.name == "emit-range" {
            let r = request.expect("emit-range runs cyclic");
            let bound = |v: &Option<String>| v.as_deref().unwrap().parse::<u64>().unwrap();
            return (bound(&r.start)..bound(&r.end)).try_for_each(|n| out.emit(n.to_string().as_bytes()));
        }
        match self.cycles.get(cycle) {
            Some(messages) => messages.iter().try_for_each(|m| out.emit(m)),
            None => Ok(()),
        }
    }
    fn on_window_done(&mut self, request: &Request) -> Result<(), Error> {
        self.commits.push(request.cycle - 1);
        Ok(())
    }
}

fn vector_files() -> Vec<PathBuf> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../vectors");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "json"))
        .collect();
    files.sort();
    files
}

fn b64s(v: &Json) -> Vec<Vec<u8>> {
    v.array().iter().map(|s| json::base64(s.str())).collect()
}

/// Run one vector; `Err` says what differs.
fn run(v: &Json, state_dir: &Path) -> Result<(), String> {
    let mut env: BTreeMap<String, String> =
        v.get("env").object().iter().map(|(k, x)| (k.clone(), x.str().to_string())).collect();
    if !v.get("report").is_null() {
        env.insert("ETLSTAGE_STATE_DIR".into(), state_dir.to_str().unwrap().into());
    }
    let mut h = Handler { name: v.get("handler").str().to_string(), ..Default::default() };
    if let Some(cycles) = v.get_opt("args").and_then(|a| a.get_opt("cycles")) {
        h.cycles = cycles.array().iter().map(b64s).collect();
    }
    let out = Rc::new(RefCell::new(Vec::new()));
    let marks = Rc::new(RefCell::new(Vec::new()));
    let mut input = Chunks { chunks: b64s(v.get("stdin")), next: 0, out: out.clone(), marks: marks.clone() };
    let mut sink = Sink(out.clone());
    let result = Scenario::from_vars(&env).and_then(|sc| match sc.stage_type {
        StageType::E => serve_extractor(&mut h, &sc, &mut input, &mut sink),
        StageType::T => serve_transformer(&mut h, &sc, &mut input, &mut sink),
        StageType::L => serve_loader(&mut h, &sc, &mut input, &mut sink),
    });
    let exit = result.as_ref().map_or_else(|e| e.exit_code(), |_| 0) as i64;
    let want_exit = v.get("exit").int();
    if exit != want_exit {
        return Err(format!("exit {exit} (want {want_exit}): {result:?}"));
    }
    if exit != 0 {
        return Ok(());
    }
    let out = out.borrow();
    let mut marks = marks.borrow().clone();
    marks.push(out.len());
    let replies = b64s(v.get("replies"));
    let mut from = 0;
    for (i, want) in replies.iter().enumerate() {
        let to = marks.get(i).copied().unwrap_or(out.len());
        let got = &out[from..to];
        if got != want.as_slice() {
            return Err(format!("reply {i}: got {:?}, want {:?}", esc(got), esc(want)));
        }
        from = to;
    }
    if from != out.len() {
        return Err(format!("written after the last expected reply: {:?}", esc(&out[from..])));
    }
    if let Some(loaded) = v.get_opt("loaded").filter(|x| !x.is_null()) {
        let want: Vec<Vec<Vec<u8>>> = loaded.array().iter().map(b64s).collect();
        if h.loaded != want {
            return Err(format!("loaded {:?}, want {want:?}", h.loaded));
        }
    }
    if let Some(commits) = v.get_opt("commits").filter(|x| !x.is_null()) {
        let want: Vec<u64> = commits.array().iter().map(|c| c.int() as u64).collect();
        if h.commits != want {
            return Err(format!("commits {:?}, want {want:?}", h.commits));
        }
    }
    let reports: Vec<PathBuf> = std::fs::read_dir(state_dir).unwrap().map(|e| e.unwrap().path()).collect();
    match v.get("report") {
        Json::Null if !reports.is_empty() => return Err(format!("a report was written: {reports:?}")),
        Json::Null => {}
        want => {
            let [file] = reports.as_slice() else { return Err(format!("report files: {reports:?}")) };
            let name = file.file_name().unwrap().to_str().unwrap();
            if name != format!("report-{}-{}.json", env["ETLSTAGE_INSTANCE"], std::process::id()) {
                return Err(format!("report file named {name}"));
            }
            let got = json::parse(&std::fs::read_to_string(file).unwrap());
            if &got != want {
                return Err(format!("report {got:?}, want {want:?}"));
            }
        }
    }
    Ok(())
}

fn esc(b: &[u8]) -> String {
    b.iter().flat_map(|c| std::ascii::escape_default(*c)).map(char::from).collect()
}

#[test]
fn every_vector_gives_the_same_bytes_out() {
    let mut failures = Vec::new();
    let mut count = 0;
    let files = vector_files();
    assert!(!files.is_empty(), "no vector files in sdk/vectors");
    for file in files {
        let doc = json::parse(&std::fs::read_to_string(&file).unwrap());
        for v in doc.array() {
            count += 1;
            let dir = std::env::temp_dir().join(format!("etlstage-rust-vectors-{}-{count}", std::process::id()));
            std::fs::create_dir_all(&dir).unwrap();
            if let Err(why) = run(v, &dir) {
                failures.push(format!("{}: {}", v.get("name").str(), why));
            }
            std::fs::remove_dir_all(&dir).unwrap();
        }
    }
    assert!(failures.is_empty(), "{} of {count} vectors failed:\n{}", failures.len(), failures.join("\n"));
    assert!(count >= 40, "only {count} vectors read");
}
