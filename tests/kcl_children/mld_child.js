// A minimal KCL MultiLangDaemon record processor in Node.js (no npm packages).
// Usage: node mld_child.js v1|v2
// Test instrumentation: records and events are appended to $KCL_TEST_OUT; checkpoint
// every $KCL_TEST_CHECKPOINT_EVERY records; $KCL_FAULT picks a misbehaviour:
//   exit-mid-batch  exit(3) while processing the 2nd processRecords
//   hang            never answer the 2nd processRecords
//   wrong-action    answer the 2nd processRecords with a status for "initialize"
//   bad-checkpoint  also ask for a checkpoint beyond the records delivered
//   checkpoint-at-init  ask for a checkpoint while handling initialize (no checkpointer yet)
'use strict';
const fs = require('fs');
const readline = require('readline');

const version = process.argv[2] === 'v1' ? 1 : 2;
const outPath = process.env.KCL_TEST_OUT;
const every = parseInt(process.env.KCL_TEST_CHECKPOINT_EVERY || '500', 10);
const fault = process.env.KCL_FAULT || '';
const out = outPath ? fs.openSync(outPath, 'a') : null;
let shard = null;
let sinceCheckpoint = 0;
let batches = 0;

function note(line) { if (out !== null) fs.writeSync(out, line + '\n'); }
function send(doc) { process.stdout.write(JSON.stringify(doc) + '\n'); }

const rl = readline.createInterface({ input: process.stdin, terminal: false });
const lines = rl[Symbol.asyncIterator]();

async function nextMessage() {
  for (;;) {
    const { value, done } = await lines.next();
    if (done) return null;
    if (value.trim() !== '') return JSON.parse(value);
  }
}

async function checkpoint(seq, sub) {
  send(version === 1 ? { action: 'checkpoint', checkpoint: seq }
                     : { action: 'checkpoint', sequenceNumber: seq, subSequenceNumber: sub });
  const answer = await nextMessage();
  if (answer === null || answer.action !== 'checkpoint') throw new Error('expected a checkpoint answer');
  note(`EVENT ${answer.error ? 'checkpoint-error' : 'checkpoint-ok'} ${shard} ${seq} ${sub} ${answer.error || ''}`.trim());
}

async function processRecords(msg) {
  batches += 1;
  if (batches === 2 && fault === 'exit-mid-batch') process.exit(3);
  if (batches === 2 && fault === 'hang') await new Promise(() => {});
  let last = null;
  for (const r of msg.records) {
    const data = Buffer.from(r.data, 'base64').toString('utf8');
    if (version === 2 && r.action !== 'record') throw new Error('V2 record without action "record"');
    if (version === 1 && 'subSequenceNumber' in r) throw new Error('V1 record with a V2 field');
    note(`RECORD ${shard} ${r.sequenceNumber} ${r.subSequenceNumber} ${r.partitionKey} ${r.approximateArrivalTimestamp} ${data}`);
    last = r;
  }
  sinceCheckpoint += msg.records.length;
  console.log(`not JSON: processed ${msg.records.length} records`);  // the MLD skips such lines
  if (last !== null && sinceCheckpoint >= every) {
    sinceCheckpoint = 0;
    await checkpoint(last.sequenceNumber, version === 1 ? undefined : last.subSequenceNumber);
  }
  if (fault === 'bad-checkpoint') await checkpoint('99999999999999999999999', 0);
  if (batches === 2 && fault === 'wrong-action') return 'initialize';
  return 'processRecords';
}

async function main() {
  for (;;) {
    const msg = await nextMessage();
    if (msg === null) break;
    let answerFor = msg.action;
    switch (msg.action) {
      case 'initialize':
        shard = msg.shardId;
        note(`EVENT initialize ${shard} ${msg.sequenceNumber} ${msg.subSequenceNumber}`);
        if (fault === 'checkpoint-at-init') await checkpoint(null, null);
        break;
      case 'processRecords':
        answerFor = await processRecords(msg);
        break;
      case 'shardEnded':
        note(`EVENT shard_ended ${shard}`);
        await checkpoint(null, null);
        break;
      case 'shutdownRequested':
        note(`EVENT shutdown_requested ${shard}`);
        await checkpoint(null, null);
        break;
      case 'leaseLost':
        note(`EVENT lease_lost ${shard}`);
        break;
      case 'shutdown':
        note(`EVENT shutdown ${shard} ${msg.reason}`);
        if (msg.reason === 'TERMINATE') await checkpoint(null, null);
        break;
      default:
        throw new Error('unknown action ' + msg.action);
    }
    send({ action: 'status', responseFor: answerFor });
  }
  note(`EVENT exit ${shard}`);
}

main().catch((err) => { process.stderr.write(String(err.stack || err) + '\n'); process.exit(1); });
