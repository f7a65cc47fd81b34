// The node-workflow backend the API and the runner use. By default
// (RT_WF_BACKEND=moray) the moray backend a Triton workflow zone runs
// (npm wf-moray-backend, on the harness's moray): the API and the runner are
// two processes, as a workflow zone's two services, and the runner finds
// CNAPI's jobs in moray. RT_WF_BACKEND=memory: node-workflow's in-memory
// backend, one per process, so the API and the runner must share a process.
'use strict';
var path = require('path');
var modules = path.join(process.env.RT_SRC, 'wf', 'node_modules');
var shared = null;

function memory(opts) {
    if (!shared) {
        shared = require(path.join(modules, 'wf', 'lib', 'workflow-in-memory-backend'))(opts);
    }
    return shared;
}
memory.kind = 'memory';

// The wf_jobs fields job queries filter on (a workflow zone's config indexes
// the params its callers search by: CNAPI's server and VM jobs, the checks'
// server_uuid).
var MORAY_OPTS = {
    moray: { host: '127.0.0.1', port: Number(process.env.MORAY_PORT) },
    extra_fields: {
        wf_workflows: {},
        wf_jobs: {
            server_uuid: { type: 'string', unique: false },
            vm_uuid: { type: 'string', unique: false },
            image_uuid: { type: 'string', unique: false },
            creator_uuid: { type: 'string', unique: false },
            origin: { type: 'string', unique: false },
            task: { type: 'string', unique: false }
        },
        wf_jobs_info: {}
    }
};

module.exports = function backend() {
    if ((process.env.RT_WF_BACKEND || 'moray') === 'memory') {
        return { module: __filename.replace(/\.js$/, '-memory.js'), opts: {} };
    }
    return { module: path.join(modules, 'wf-moray-backend'), opts: MORAY_OPTS };
};
module.exports.memory = memory;
