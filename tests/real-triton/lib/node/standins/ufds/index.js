// In place of the UFDS client (IMGAPI's dc mode checks image owners): it
// connects at once and every account exists.
var EventEmitter = require('events').EventEmitter;
var util = require('util');
function UFDS() {
    EventEmitter.call(this);
    var self = this;
    setImmediate(function () { self.emit('connect'); });
}
util.inherits(UFDS, EventEmitter);
UFDS.prototype.getUserEx = function (opts, cb) { setImmediate(cb, null, { uuid: opts.value, login: 'admin' }); };
UFDS.prototype.close = function (cb) { if (cb) { setImmediate(cb); } };
module.exports = UFDS;
