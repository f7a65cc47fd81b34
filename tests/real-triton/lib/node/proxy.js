// proxy.js PORT TARGET LOG: forwards 127.0.0.1:PORT to TARGET and appends one JSON
// line per exchange to LOG (method, url, request body, status, ms), so a check can
// count what agentsadm sent CNAPI (e.g. CommandExecutes with a `timeout`).
// A server whose stand-in mode ($RT_UR/<uuid>/mode) is `readopt` gets, before an
// install-agent task goes to CNAPI, the bare re-adoption of its vm-agent
// instance that vm-agent's postinstall does inside that task on a real CN
// (ur/readopt.py): agentsadm reads SAPI before the task and writes after it, so
// the adoption falls between the two as it does on Triton.
'use strict';
var childProcess = require('child_process');
var fs = require('fs');
var path = require('path');
function readopt(method, url) {
    var m = /^\/servers\/([0-9a-f-]{36})\/install-agent/.exec(url);
    if (method !== 'POST' || !m) { return; }
    var dir = path.join(process.env.RT_UR, m[1]);
    var mode = '';
    try { mode = fs.readFileSync(path.join(dir, 'mode'), 'utf8').trim(); } catch (e) { return; }
    if (mode !== 'readopt') { return; }
    var r = childProcess.spawnSync('python3', [path.join(process.env.RT_LIB, 'ur', 'readopt.py'),
        process.env.SAPI_URL, 'http://127.0.0.1:' + process.env.CNAPI_PORT, m[1], 'vm-agent'],
    { encoding: 'utf8', timeout: 30000 });
    fs.appendFileSync(path.join(dir, 'readopts.log'), (r.stdout || '') + (r.stderr || ''));
}
var http = require('http');
var port = Number(process.argv[2]);
var target = new URL(process.argv[3]);
var log = fs.createWriteStream(process.argv[4], { flags: 'a' });
function text(buf) {
    var s = buf.slice(0, 8192).toString();
    try { return JSON.parse(s); } catch (e) { return s; }
}
http.createServer(function (req, res) {
    var started = Date.now();
    var chunks = [];
    req.on('data', function (c) { chunks.push(c); });
    req.on('end', function () {
        var body = Buffer.concat(chunks);
        readopt(req.method, req.url);
        var entry = { at: new Date(started).toISOString(), method: req.method, url: req.url,
            body: body.length ? text(body) : undefined };
        var up = http.request({ hostname: target.hostname, port: target.port, path: req.url,
            method: req.method, headers: Object.assign({}, req.headers, { host: target.host }) },
        function (ures) {
            res.writeHead(ures.statusCode, ures.headers);
            ures.pipe(res);
            ures.on('end', function () {
                entry.status = ures.statusCode; entry.ms = Date.now() - started;
                log.write(JSON.stringify(entry) + '\n');
            });
        });
        up.on('error', function (err) {
            entry.error = err.message; log.write(JSON.stringify(entry) + '\n');
            res.writeHead(502); res.end();
        });
        up.end(body);
    });
}).listen(port, '127.0.0.1');
