// proxy.js PORT TARGET LOG: forwards 127.0.0.1:PORT to TARGET and appends one JSON
// line per exchange to LOG (method, url, request body, status, ms), so a check can
// count what agentsadm sent CNAPI (e.g. CommandExecutes with a `timeout`).
'use strict';
var fs = require('fs');
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
