// In place of wf-client for IMGAPI: no workflow API for it (remote imports and
// images from VMs are not used), so its ping fails and IMGAPI says so.
function WfClient() {}
WfClient.prototype.ping = function (cb) { setImmediate(cb, new Error('no workflow API for IMGAPI in the harness')); };
WfClient.prototype.initWorkflows = function (cb) { setImmediate(cb); };
module.exports = WfClient;
