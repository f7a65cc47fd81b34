// In place of the native microtime addon: wall-clock microseconds.
var origin = BigInt(Date.now()) * 1000n - process.hrtime.bigint() / 1000n;
function now() { return Number(origin + process.hrtime.bigint() / 1000n); }
exports.now = now;
exports.nowDouble = function () { return now() / 1e6; };
exports.nowStruct = function () { var n = now(); return [Math.floor(n / 1e6), n % 1e6]; };
