'use strict';
// The run instruction: markers, type, mode and settings from the ETLSTAGE_* environment
// (docs/protocol.md, "Run instructions").

class EtlstageError extends Error {
  constructor(message, exitCode = 1) {
    super(message);
    this.name = this.constructor.name;
    this.exitCode = exitCode;
  }
}

/** A bad run instruction (an ETLSTAGE_* value): exit status 2. */
class ConfigError extends EtlstageError {
  constructor(message) {
    super(message, 2);
  }
}

/** Bytes that break the protocol (in the input, or a result holding a marker): exit status 3. */
class ProtocolViolation extends EtlstageError {
  constructor(message) {
    super(message, 3);
  }
}

const MODES = { E: ['plain', 'cyclic'], T: ['single', 'batch'], L: ['single', 'batch'] };
const DEFAULT_MARKERS = { eom: 0x0a, eop: 0x00, eob: 0x17, bnc: 0x11 };

function readEnv(env) {
  const get = (name, dflt) => {
    const v = env[`ETLSTAGE_${name}`];
    return v === undefined || v === '' ? dflt : v;
  };
  const int = (name, dflt) => {
    const raw = get(name, dflt).trim();
    if (!/^[+-]?\d+$/.test(raw)) throw new ConfigError(`ETLSTAGE_${name}=${JSON.stringify(raw)}: expected an integer`);
    return Number(raw);
  };
  const word = (name, dflt, allowed) => {
    const v = get(name, dflt);
    if (!allowed.includes(v)) {
      throw new ConfigError(`ETLSTAGE_${name}=${JSON.stringify(v)}: expected one of ${allowed.join(', ')}`);
    }
    return v;
  };

  const markers = {};
  for (const name of Object.keys(DEFAULT_MARKERS)) {
    const raw = get(name.toUpperCase(), '');
    if (raw === '') {
      markers[name] = DEFAULT_MARKERS[name];
    } else if (/^[0-9a-fA-F]{1,2}$/.test(raw)) {
      markers[name] = parseInt(raw, 16);
    } else {
      throw new ConfigError(`ETLSTAGE_${name.toUpperCase()}=${JSON.stringify(raw)}: expected two hex digits such as 0a`);
    }
  }
  const names = Object.keys(markers);
  for (let i = 0; i < names.length; i++) {
    for (let j = i + 1; j < names.length; j++) {
      if (markers[names[i]] === markers[names[j]]) {
        const hex = markers[names[i]].toString(16).padStart(2, '0');
        throw new ConfigError(`markers ${names[i]} and ${names[j]} are both 0x${hex}; the four markers must be distinct bytes`);
      }
    }
  }

  const type = word('TYPE', 'T', ['E', 'T', 'L']);
  const mode = word('MODE', type === 'E' ? 'plain' : 'single', MODES[type]);
  const batchSize = int('BATCH_SIZE', '1');
  if (batchSize < 1) throw new ConfigError(`ETLSTAGE_BATCH_SIZE=${batchSize}: expected an integer >= 1`);
  return Object.freeze({
    type,
    mode,
    batchSize,
    batchDriver: word('BATCH_DRIVER', 'supervisor', ['supervisor', 'worker']),
    offsets: word('OFFSETS', 'worker', ['worker', 'supervisor']),
    markers: Object.freeze(markers),
    stage: get('STAGE', 'stage'),
    instance: int('INSTANCE', '0'),
    instances: int('INSTANCES', '1'),
    stateDir: get('STATE_DIR', ''),
    batchId: get('BATCH_ID', '0') === '1', // L batches open with their id (docs/protocol.md: batch ids)
    get isBatch() {
      return mode === 'batch';
    },
    get workerDriven() {
      return mode === 'batch' && this.batchDriver === 'worker';
    },
  });
}

/** The scenario a worker was started in, from `env` (default: process.env). */
function scenarioFromEnv(env = process.env) {
  return readEnv(env);
}

module.exports = { scenarioFromEnv, EtlstageError, ConfigError, ProtocolViolation, DEFAULT_MARKERS };
