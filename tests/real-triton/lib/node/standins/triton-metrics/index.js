// In place of triton-metrics (a native addon underneath): no metrics server;
// every hook SAPI and IMGAPI call is a no-op.
function Manager() {}
Manager.prototype.createRestifyMetrics = function () {};
Manager.prototype.collectRestifyMetrics = function () {};
Manager.prototype.listen = function (cb) { setImmediate(cb); };
Manager.prototype.close = function (cb) { if (cb) { setImmediate(cb); } };
Manager.prototype.addPreCollectFunc = function () {};
var inert = { set: function () {}, add: function () {}, increment: function () {}, observe: function () {} };
Manager.prototype.collector = {
    gauge: function () { return inert; }, counter: function () { return inert; },
    histogram: function () { return inert; }
};
exports.createMetricsManager = function () { return new Manager(); };
