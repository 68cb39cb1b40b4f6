//! The same pass-through written by hand, without the SDK: the benchmark's baseline
//! (bench/sdk_throughput.py).  Default markers; single mode, or batches closed by EOB
//! when ETLSTAGE_MODE=batch.  No checks: it trusts its input.
use std::io::{Read, Write};

fn main() -> std::io::Result<()> {
    let batch = std::env::var("ETLSTAGE_MODE").is_ok_and(|m| m == "batch");
    let (eom, eop, eob) = (b'\n', 0u8, 0x17u8);
    let mut stdin = std::io::stdin().lock();
    let mut stdout = std::io::stdout().lock();
    let mut buf = vec![0u8; 1 << 16];
    let mut filled = 0;
    let mut out = Vec::with_capacity(1 << 17);
    loop {
        let n = stdin.read(&mut buf[filled..])?;
        if n == 0 {
            return Ok(());
        }
        filled += n;
        let mut start = 0;
        while let Some(i) = buf[start..filled].iter().position(|&b| b == eom || b == eob) {
            let at = start + i;
            if buf[at] == eob {
                out.push(eop);
            } else {
                out.extend_from_slice(&buf[start..=at]);
                if !batch {
                    out.push(eop);
                }
            }
            start = at + 1;
        }
        buf.copy_within(start..filled, 0);
        filled -= start;
        if filled == buf.len() {
            buf.resize(buf.len() * 2, 0);
        }
        stdout.write_all(&out)?;
        stdout.flush()?;
        out.clear();
    }
}
