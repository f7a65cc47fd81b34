// In place of docker-registry-client: IMGAPI keeps its files on local storage and imports no
// Docker images here; any call into it is a harness bug, so it throws.
module.exports = new Proxy({}, { get: function (t, k) {
    if (k === '__esModule' || typeof k === 'symbol') { return undefined; }
    return function () { throw new Error('docker-registry-client is not available in the real-triton harness'); };
} });
