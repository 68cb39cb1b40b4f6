// A pass-through T-worker on the Node.js SDK (bench/sdk_throughput.py).
'use strict';
require('../../sdk/node').runTransformer((messages) => messages);
