//! The worker side of the conversation: read big chunks, split them at the markers,
//! call the worker, write results as blocks, flush after each chunk and each EOP.

use std::io::{ErrorKind, Read, Write};

use crate::error::Error;
use crate::output::{escape, Output};
use crate::scan::ByteSet;
use crate::scenario::{Mode, Scenario, StageType};
use crate::worker::{Extractor, Loader, Request, Transformer, Worker};

const CHUNK: usize = 1 << 16;

enum Role<'w> {
    E(&'w mut dyn Extractor),
    T(&'w mut dyn Transformer),
    L(&'w mut dyn Loader),
}

impl Role<'_> {
    fn worker(&mut self) -> &mut dyn Worker {
        match self {
            Role::E(w) => upcast_e(&mut **w),
            Role::T(w) => upcast_t(&mut **w),
            Role::L(w) => upcast_l(&mut **w),
        }
    }
    fn kind(&self) -> StageType {
        match self {
            Role::E(_) => StageType::E,
            Role::T(_) => StageType::T,
            Role::L(_) => StageType::L,
        }
    }
}

fn upcast_e(w: &mut dyn Extractor) -> &mut dyn Worker {
    w
}
fn upcast_t(w: &mut dyn Transformer) -> &mut dyn Worker {
    w
}
fn upcast_l(w: &mut dyn Loader) -> &mut dyn Worker {
    w
}

/// Run an extractor until its input closes (cyclic) or it has emitted everything (plain).
pub fn serve_extractor(w: &mut dyn Extractor, sc: &Scenario, input: &mut dyn Read, output: &mut dyn Write) -> Result<(), Error> {
    serve(Role::E(w), sc, input, output)
}

/// Run a transformer until its input closes.
pub fn serve_transformer(w: &mut dyn Transformer, sc: &Scenario, input: &mut dyn Read, output: &mut dyn Write) -> Result<(), Error> {
    serve(Role::T(w), sc, input, output)
}

/// Run a loader until its input closes.
pub fn serve_loader(w: &mut dyn Loader, sc: &Scenario, input: &mut dyn Read, output: &mut dyn Write) -> Result<(), Error> {
    serve(Role::L(w), sc, input, output)
}

fn serve(mut role: Role<'_>, sc: &Scenario, input: &mut dyn Read, output: &mut dyn Write) -> Result<(), Error> {
    if role.kind() != sc.stage_type {
        return Err(Error::Config(format!(
            "stage {:?} is an {:?}-stage (ETLSTAGE_TYPE) but this worker is an {:?}-worker",
            sc.stage, sc.stage_type, role.kind()
        )));
    }
    let mut out = Output::new(output, sc.markers, &sc.stage);
    role.worker().setup(sc)?;
    let result = conversation(&mut role, sc, input, &mut out);
    if result.is_err() {
        out.flush_answered();
    }
    let down = role.worker().teardown();
    result.and(down)
}

fn conversation(role: &mut Role<'_>, sc: &Scenario, input: &mut dyn Read, out: &mut Output<'_>) -> Result<(), Error> {
    let m = sc.markers;
    if let (Role::E(e), Mode::Plain) = (&mut *role, sc.mode) {
        e.extract(None, out)?;
        report(role.worker(), sc)?;
        return out.flush();
    }
    let set = ByteSet::new([m.eom, m.eob, m.eop, m.bnc]);
    let mut buf: Vec<u8> = vec![0; CHUNK];
    let mut filled = 0; // bytes of buf read so far
    let mut pos = 0; // bytes of buf already scanned for markers
    let mut msg_start = 0; // where the message being read starts
    let mut batch: Vec<(usize, usize)> = Vec::new(); // the open batch's messages
    let mut cycle = 0u64;
    loop {
        // keep only the open batch and the message being read
        let keep = batch.first().map_or(msg_start, |r| r.0);
        if keep > 0 {
            buf.copy_within(keep..filled, 0);
            filled -= keep;
            pos -= keep;
            msg_start -= keep;
            for r in batch.iter_mut() {
                r.0 -= keep;
                r.1 -= keep;
            }
        }
        if buf.len() - filled < CHUNK / 2 {
            let size = (buf.len() * 2).max(filled + CHUNK);
            buf.resize(size, 0);
        }
        let n = loop {
            match input.read(&mut buf[filled..]) {
                Ok(n) => break n,
                Err(e) if e.kind() == ErrorKind::Interrupted => continue,
                Err(e) => return Err(e.into()),
            }
        };
        if n == 0 {
            if !batch.is_empty() || msg_start < filled {
                eprintln!(
                    "stage {:?}: stdin closed with an unfinished batch ({} messages, {} bytes): not processed; \
                     the supervisor will send it again",
                    sc.stage,
                    batch.len(),
                    filled - msg_start
                );
            }
            return Ok(());
        }
        filled += n;
        while let Some(i) = set.find(&buf[pos..filled]) {
            let at = pos + i;
            let b = buf[at];
            pos = at + 1;
            if b == m.eom {
                let message = &buf[msg_start..at];
                let range = (msg_start, at);
                msg_start = pos;
                match role {
                    Role::E(e) => {
                        let request = Request::parse(message, cycle);
                        if cycle > 0 {
                            e.on_window_done(&request)?;
                        }
                        e.extract(Some(&request), out)?;
                        report(role.worker(), sc)?;
                        out.signal(m.eop);
                        out.flush()?;
                        cycle += 1;
                    }
                    _ if sc.mode == Mode::Single => handle(role, &[message], out, sc)?,
                    _ if sc.worker_driven => {
                        batch.push(range);
                        if batch.len() >= sc.batch_size {
                            run_batch(role, &buf, &batch, out, sc)?;
                            batch.clear();
                            out.flush()?;
                        } else {
                            out.signal(m.bnc);
                        }
                    }
                    _ => batch.push(range),
                }
            } else if b == m.eob {
                if sc.mode != Mode::Batch {
                    return Err(Error::Protocol(format!(
                        "EOB (0x{:02x}) received by a {:?}-worker in {} mode",
                        m.eob,
                        sc.stage_type,
                        if sc.mode == Mode::Cyclic { "cyclic" } else { "single" }
                    )));
                }
                if msg_start < at {
                    return Err(Error::Protocol(format!(
                        "EOB arrived in the middle of a message (its bytes were not ended by EOM): {}",
                        escape(&buf[msg_start.max(at.saturating_sub(40))..=at])
                    )));
                }
                msg_start = pos;
                run_batch(role, &buf, &batch, out, sc)?;
                batch.clear();
                out.flush()?; // acknowledge now, not after the next batch
            } else {
                let name = if b == m.eop { "EOP" } else { "BNC" };
                return Err(Error::Protocol(format!(
                    "the supervisor's input holds {name} (0x{b:02x}), which only a worker may write: {}",
                    escape(&buf[at.saturating_sub(24)..(at + 24).min(filled)])
                )));
            }
        }
        pos = filled;
        out.flush()?;
    }
}

fn run_batch(role: &mut Role<'_>, buf: &[u8], batch: &[(usize, usize)], out: &mut Output<'_>, sc: &Scenario) -> Result<(), Error> {
    if batch.is_empty() {
        out.signal(sc.markers.eop);
        return Ok(());
    }
    let messages: Vec<&[u8]> = batch.iter().map(|&(a, b)| &buf[a..b]).collect();
    if let (Role::L(l), true) = (&mut *role, sc.batch_id && !sc.worker_driven) {
        let id = crate::idempotent::batch_id_of(messages[0])?;
        if messages.len() == 1 {
            out.signal(sc.markers.eop); // an empty batch: its header alone, acknowledged without a load
            return Ok(());
        }
        l.load_batch(id, &messages[1..])?;
        report(role.worker(), sc)?;
        out.signal(sc.markers.eop);
        return Ok(());
    }
    handle(role, &messages, out, sc)
}

/// One request of a T- or L-worker: results (or the load), the report, then EOP.
fn handle(role: &mut Role<'_>, messages: &[&[u8]], out: &mut Output<'_>, sc: &Scenario) -> Result<(), Error> {
    match role {
        Role::T(t) => t.process(messages, out)?,
        Role::L(l) => l.load(messages)?,
        Role::E(_) => unreachable!("an extractor's requests are handled apart"),
    }
    report(role.worker(), sc)?;
    out.signal(sc.markers.eop);
    Ok(())
}

/// The worker's counters, written before the EOP of the request they include.
fn report(w: &mut dyn Worker, sc: &Scenario) -> Result<(), Error> {
    if let Some(r) = w.report() {
        if !sc.state_dir.is_empty() {
            r.write_to(&sc.state_dir, sc.instance)?;
        }
    }
    Ok(())
}
