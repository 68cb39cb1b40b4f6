// Pass-through MLD record processor in Node.js: decodes every record, answers status.
'use strict';
const readline = require('readline');
const rl = readline.createInterface({ input: process.stdin, terminal: false });
let bytes = 0;
rl.on('line', (line) => {
  if (line.trim() === '') return;
  const msg = JSON.parse(line);
  if (msg.action === 'processRecords') {
    for (const r of msg.records) bytes += Buffer.from(r.data, 'base64').length;
  }
  process.stdout.write(JSON.stringify({ action: 'status', responseFor: msg.action }) + '\n');
});
