#!/usr/bin/env node
// upper.js - a T-worker with the etlstage Node.js SDK: uppercases a-z, every other byte
// unchanged (UTF-8 stays UTF-8). Works in every T mode: single, batch, worker-driven.
'use strict';
const { runTransformer } = require('..');

runTransformer((messages) =>
  messages.map((m) => {
    const out = Buffer.from(m); // a copy: `m` is a view into the input chunk
    for (let i = 0; i < out.length; i++) if (out[i] >= 0x61 && out[i] <= 0x7a) out[i] -= 0x20;
    return out;
  }),
);
