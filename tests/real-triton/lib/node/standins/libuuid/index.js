// In place of the native libuuid addon (no build on Node 20): v4 UUIDs.
exports.create = function () { return require('crypto').randomUUID(); };
