'use strict';
/**
 * etlstage worker SDK for Node.js.
 *
 *   const { runTransformer } = require('etlstage-worker');
 *   runTransformer((messages) => messages.map((m) => m.toString('utf8').toUpperCase()));
 *
 * Markers, mode and batch size come from the ETLSTAGE_* environment the supervisor
 * sets; the same code works in single, batch, worker-driven and supervisor-driven modes.
 */
const { serve, main, exitStatus, Request, runExtractor, runTransformer, runLoader } = require('./lib/serve');
const { scenarioFromEnv, EtlstageError, ConfigError, ProtocolViolation } = require('./lib/scenario');
const { RequestParser, EOB } = require('./lib/framing');
const { FileSink, SqlSink } = require('./lib/idempotent');

module.exports = {
  serve,
  main,
  exitStatus,
  runExtractor,
  runTransformer,
  runLoader,
  Request,
  scenarioFromEnv,
  EtlstageError,
  ConfigError,
  ProtocolViolation,
  RequestParser,
  EOB,
  FileSink,
  SqlSink,
};
