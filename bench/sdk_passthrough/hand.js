// A pass-through T-worker written by hand in Node.js, the baseline of bench/sdk_throughput.py.
// It does what the SDK does for it, the way workers/examples/upper.js does it: markers and
// mode from ETLSTAGE_*, messages split with indexOf, each message (single mode) or batch
// (supervisor-driven) handed to transform(), the results framed, the replies of a chunk in
// one write.
'use strict';
const hex = (name, dflt) => parseInt(process.env[`ETLSTAGE_${name}`] || dflt, 16);
const EOM = hex('EOM', '0a');
const EOP = hex('EOP', '00');
const EOB = hex('EOB', '17');
const batchMode = process.env.ETLSTAGE_MODE === 'batch';
const EOM_BUF = Buffer.from([EOM]);
const EOP_BUF = Buffer.from([EOP]);

const transform = (messages) => messages;

let tail = null;
let batch = [];

function answer(messages, out) {
  for (const r of transform(messages)) out.push(r, EOM_BUF);
  out.push(EOP_BUF);
}

process.stdin.on('data', (chunk) => {
  const data = tail ? Buffer.concat([tail, chunk]) : chunk;
  const out = [];
  let pos = 0;
  let b = batchMode ? data.indexOf(EOB) : -1; // the next EOB, found again once passed
  for (;;) {
    const m = data.indexOf(EOM, pos);
    if (b >= 0 && b < pos) b = data.indexOf(EOB, pos);
    if (m < 0 && b < 0) break;
    if (b >= 0 && (m < 0 || b < m)) {
      answer(batch, out);
      batch = [];
      pos = b + 1;
    } else {
      if (batchMode) batch.push(data.subarray(pos, m));
      else answer([data.subarray(pos, m)], out);
      pos = m + 1;
    }
  }
  tail = pos < data.length ? Buffer.from(data.subarray(pos)) : null;
  if (out.length) process.stdout.write(Buffer.concat(out));
});
