//! Each message is its own result: the SDK's cost alone (bench/sdk_throughput.py).
use etlstage_worker::{run_transformer, Error, Output, Transformer, Worker};

struct Passthrough;

impl Worker for Passthrough {}

impl Transformer for Passthrough {
    fn process(&mut self, messages: &[&[u8]], out: &mut Output<'_>) -> Result<(), Error> {
        messages.iter().try_for_each(|m| out.emit(m))
    }
}

fn main() {
    run_transformer(Passthrough)
}
