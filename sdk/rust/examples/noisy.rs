//! A pass-through transformer that prints to stdout as careless code does: the SDK
//! sends such writes to stderr, so the protocol stream stays intact.
use etlstage_worker::{run_transformer, Error, Output, Transformer, Worker};

struct Noisy;

impl Worker for Noisy {}

impl Transformer for Noisy {
    fn process(&mut self, messages: &[&[u8]], out: &mut Output<'_>) -> Result<(), Error> {
        println!("processing a batch of {}", messages.len());
        messages.iter().try_for_each(|m| out.emit(m))
    }
}

fn main() {
    run_transformer(Noisy)
}
