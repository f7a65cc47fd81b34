// ur-run.js SERVER_UUID: the real sdc-ur-agent, unmodified, acting as one mock
// server. Its SmartOS file locations (sysinfo, setup state, startup marker) are
// moved under $RT_UR/<uuid> through UrAgent's own options.
// Ur's periodic sysinfo message replaces the server's sysinfo in CNAPI, and the
// mock cn-agent serves each server on a port of its own that it reports as
// "CN Agent Port"; so the sysinfo Ur sends is the mock server's plus that port,
// read from cn-agent's own "listening at" log line (CNAPI's copy may be stale
// after a cn-agent restart, and Ur would then keep sending it back).
'use strict';
var fs = require('fs');
var path = require('path');
var uuid = process.argv[2];
var dir = path.join(process.env.RT_UR, uuid);
var sysinfo = path.join(dir, 'sysinfo.json');
fs.mkdirSync(dir, { recursive: true });
fs.rmSync(path.join(dir, 'ur-startup'), { force: true });

function agentPort() {
    var port = null;
    var lines;
    try { lines = fs.readFileSync(path.join(process.env.RT_LOGS, 'cn-agent.log'), 'utf8').split('\n'); } catch (e) { return null; }
    lines.forEach(function (l) {
        if (l.indexOf('"instance":"' + uuid.slice(0, 8) + '"') < 0) { return; }
        var m = /listening at http:\/\/[^:]+:(\d+)/.exec(l);
        if (m) { port = Number(m[1]); }
    });
    return port;
}
function refresh() {
    var s = JSON.parse(fs.readFileSync(path.join(process.env.MOCKCLOUD_ROOT, 'servers', uuid, 'sysinfo.json'), 'utf8'));
    var p = agentPort();
    if (p && !s['CN Agent Port']) { s['CN Agent Port'] = p; }
    fs.writeFileSync(sysinfo + '.new', JSON.stringify(s, null, 2));
    fs.renameSync(sysinfo + '.new', sysinfo);
}
refresh();
setInterval(refresh, 5000).unref();
// Under a burst of executes on Linux, ur-agent can run a script it has just
// written while another spawn (forked, not yet exec'd) still holds that file
// open for writing: exec fails with ETXTBSY (SmartOS does not do this), Node
// throws it from spawn, and ur-agent dies mid-request. The file is complete,
// so spawning again a moment later succeeds: execFile, which ur-agent takes
// from child_process when it loads, retries that one error.
var childProcess = require('child_process');
var execFile = childProcess.execFile;
var pause = new Int32Array(new SharedArrayBuffer(4));
childProcess.execFile = function () {
    for (var attempt = 1; ; attempt++) {
        try {
            return execFile.apply(this, arguments);
        } catch (err) {
            if (err.code !== 'ETXTBSY' || attempt >= 50) { throw err; }
            fs.appendFileSync(path.join(dir, 'etxtbsy.log'), new Date().toISOString() + ' spawn again\n');
            Atomics.wait(pause, 0, 0, 20);
        }
    }
};
var UrAgent = require(path.join(process.env.RT_SRC, 'sdc-ur-agent', 'ur-agent')).UrAgent;
new UrAgent({ sysinfoFile: sysinfo, setupStateFile: path.join(dir, 'setup.json'),
    urStartupFilePath: path.join(dir, 'ur-startup') });
