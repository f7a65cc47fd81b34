// One node-workflow in-memory backend per process: the API and the runner
// each construct "their" backend from this module and get the same one, so
// the runner runs the jobs CNAPI creates through the API.
'use strict';
var path = require('path');
var memory = require(path.join(process.env.RT_SRC, 'wf', 'node_modules', 'wf', 'lib',
    'workflow-in-memory-backend'));
var shared = null;
module.exports = function (opts) {
    if (!shared) { shared = memory(opts); }
    return shared;
};
