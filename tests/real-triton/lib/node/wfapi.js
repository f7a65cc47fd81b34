// The real node-workflow API (npm "wf") on 127.0.0.1:$WF_PORT with its in-memory
// backend: CNAPI refuses server updates, sysinfo registration and server
// deletion unless it is connected to a workflow API. No runner here: the jobs
// CNAPI creates are recorded, never run.
'use strict';
var path = require('path');
var wf = path.join(process.env.RT_SRC, 'wf', 'node_modules', 'wf', 'lib');
var API = require(path.join(wf, 'api'));
var api = new API({
    api: { port: Number(process.env.WF_PORT) },
    backend: { module: path.join(wf, 'workflow-in-memory-backend'), opts: {} },
    logger: { level: 'info' }
});
api.init(function () { api.log.info('workflow API ready'); });
