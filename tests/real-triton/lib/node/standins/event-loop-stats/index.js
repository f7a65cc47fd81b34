// In place of the native event-loop-stats addon: an idle loop.
exports.sense = function () { return { min: 0, max: 0, num: 0, sum: 0 }; };
