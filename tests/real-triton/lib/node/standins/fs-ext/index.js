// In place of fs-ext (a native addon fetched from a git host) for sdcadm's
// lock (qlocker takes an fcntl write lock on /var/run/sdcadm.lock): the lock
// is always granted. Only one sdcadm runs at a time in the harness, and
// agentsadm's own lock is in SAPI, not this file.
exports.constants = { F_RDLCK: 0, F_WRLCK: 1, F_UNLCK: 2 };
function granted() {
    var cb = arguments[arguments.length - 1];
    if (typeof (cb) === 'function') { setImmediate(cb, null); }
}
exports.fcntl = granted;
exports.flock = granted;
