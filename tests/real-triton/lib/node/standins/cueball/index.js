// In place of cueball for sdcadm: its HttpAgent finds each API through
// binder's DNS (binder.<dc>.<dns_domain>), which the harness has not. A plain
// keep-alive agent instead; preload.js sends the API names to their loopback
// ports, as binder would. sdcadm stops the agent and, when binder is down,
// its DNS resolver: both are here and do nothing.
var http = require('http');
function HttpAgent() {
    http.Agent.call(this, { keepAlive: false });
}
HttpAgent.prototype = Object.create(http.Agent.prototype);
HttpAgent.prototype.constructor = HttpAgent;
HttpAgent.prototype.stop = function () { this.destroy(); };
exports.HttpAgent = HttpAgent;
exports.DNSResolver = { bootstrapResolvers: {} };
