// In place of the moray client for IMGAPI (local database) and SAPI in proto
// mode (local store): a client that never connects; neither calls it.
var EventEmitter = require('events').EventEmitter;
exports.createClient = function () {
    var c = new EventEmitter();
    c.close = function () {};
    c.toString = function () { return '[moray: not used]'; };
    return c;
};
