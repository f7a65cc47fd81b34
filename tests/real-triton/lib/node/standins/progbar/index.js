// In place of progbar (a git dependency; only imgapiadm draws one).
function ProgressBar() {}
ProgressBar.prototype.advance = function () {};
ProgressBar.prototype.end = function () {};
exports.ProgressBar = ProgressBar;
