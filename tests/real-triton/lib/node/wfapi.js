// The real node-workflow (npm "wf"): its API on 127.0.0.1:$WF_PORT and its
// runner. wfapi.js ROLE: `api`, `runner`, or `both` (one process: needed by
// the in-memory backend). The backend is wf-backend.js's: moray by default,
// as in a Triton workflow zone, where the API and the runner are two
// services and the runner takes CNAPI's jobs from moray. CNAPI registers its
// workflows (server-setup, server-factory-reset, ...) through the API at
// start and refuses server updates, sysinfo registration and deletion
// without it; the runner runs the jobs. Job tasks get the modules CNAPI's
// workflows use from CNAPI's node_modules, as a Triton workflow zone
// configures its sandbox.
'use strict';
var path = require('path');
var wf = path.join(process.env.RT_SRC, 'wf', 'node_modules', 'wf', 'lib');
var modules = path.join(process.env.RT_SRC, 'sdc-cnapi', 'node_modules');
var backend = require('./wf-backend.js')();
var role = process.argv[2] || 'both';
if (role === 'api' || role === 'both') {
    var API = require(path.join(wf, 'api'));
    var api = new API({
        api: { port: Number(process.env.WF_PORT) },
        backend: backend,
        logger: { level: 'info' }
    });
    api.init(function () { api.log.info('workflow API ready'); });
}
if (role === 'runner' || role === 'both') {
    var Runner = require(path.join(wf, 'index')).Runner;  // adds a DTrace stand-in where none builds
    var mod = function (m) { return path.join(modules, m); };
    var runner = Runner({
        backend: backend,
        logger: { level: 'info' },
        runner: {
            identifier: 'rt-runner-' + process.env.RT_PORT,
            forks: 4,
            run_interval: 250,
            // the API URLs a workflow zone's runner config gives job tasks
            sandbox: { napiUrl: 'http://127.0.0.1:' + process.env.STUB_PORT,
                cnapiUrl: 'http://127.0.0.1:' + process.env.CNAPI_PORT,
                vmapiUrl: 'http://127.0.0.1:' + process.env.STUB_PORT,
                modules: {
                restify: mod('restify'), sdcClients: mod('sdc-clients'), async: mod('async'),
                vasync: mod('vasync'), verror: mod('verror'), wfShared: mod('wf-shared')
            } }
        }
    });
    runner.init(function (err) {
        if (err) { runner.log.error(err, 'runner init failed'); process.exit(1); }
        runner.run();
        runner.log.info('workflow runner up (backend: %s)', backend.opts.moray ? 'moray' : 'memory');
    });
}
