// The same pass-through as a native marker-protocol T-worker in Node.js (batch mode,
// supervisor-driven, default markers): echo each batch's messages, then EOP.
'use strict';
const EOB = 0x17;
let pending = [];
process.stdin.on('data', (chunk) => {
  let start = 0;
  for (;;) {
    const i = chunk.indexOf(EOB, start);
    if (i < 0) { pending.push(chunk.subarray(start)); break; }
    pending.push(chunk.subarray(start, i));
    process.stdout.write(Buffer.concat([...pending, Buffer.from([0x00])]));
    pending = [];
    start = i + 1;
  }
});
