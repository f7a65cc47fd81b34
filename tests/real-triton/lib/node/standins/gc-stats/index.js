// In place of the native gc-stats addon: an emitter that never fires.
module.exports = function () { return new (require('events').EventEmitter)(); };
