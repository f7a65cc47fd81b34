// In place of the native syslog stream: the harness never configures syslog.
exports.createBunyanStream = function () { throw new Error('no syslog in the harness'); };
