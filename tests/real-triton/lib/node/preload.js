// Loaded with `node -r` into every Triton service the harness runs, so that the
// services' own sources stay unedited. Three host seams of a SmartOS zone, mapped
// onto this Linux machine:
//  - tools: SmartOS-only binaries (mdata-get, mdata-delete, zonename, uname -v) become the
//    stand-ins in ../bin (RT_BIN), whatever absolute path the service spawns;
//  - names: an API's DNS name (e.g. cnapi.<dc>.<dns_domain>, which cn-agent
//    builds itself) goes to the loopback port given in RT_HOSTS
//    ("name=127.0.0.1:port,..."), the way binder would answer on a headnode;
//  - sockets: a listen() without an address binds 127.0.0.1, not every
//    interface, and fixed ports in RT_PORTS ("8881=27409,...") move, so two
//    stacks can share the machine.
'use strict';
var child_process = require('child_process');
var http = require('http');
var net = require('net');
var path = require('path');

var BIN = process.env.RT_BIN || path.join(__dirname, '..', 'bin');
var TOOLS = { 'mdata-get': 1, 'mdata-delete': 1, 'zonename': 1, 'uname': 1 };

function tool(file) {
    if (typeof (file) !== 'string') { return file; }
    var base = path.basename(file);
    if (file.charAt(0) === '/' && TOOLS[base] && !file.startsWith(BIN)) {
        return path.join(BIN, base);
    }
    return file;
}
function table(spec, sep) {
    var out = {};
    (spec || '').split(',').filter(Boolean).forEach(function (kv) {
        var i = kv.indexOf('=');
        out[kv.slice(0, i)] = kv.slice(i + 1).split(sep);
    });
    return out;
}
var HOSTS = table(process.env.RT_HOSTS, ':');
var PORTS = table(process.env.RT_PORTS, ':');

// Commands the services spawn (cn-agent downloads images with curl) name the
// same APIs: rewrite those URLs too.
function urls(arg) {
    if (typeof (arg) !== 'string') { return arg; }
    return arg.replace(/http:\/\/([a-z0-9.-]+)(?=[/\s'"]|$)/g, function (all, name) {
        return HOSTS[name] ? 'http://' + HOSTS[name].join(':') : all;
    });
}
var execFile = child_process.execFile;
child_process.execFile = function (file) {
    var args = Array.prototype.slice.call(arguments);
    args[0] = tool(file);
    if (Array.isArray(args[1])) { args[1] = args[1].map(urls); }
    return execFile.apply(this, args);
};
['exec', 'execSync'].forEach(function (name) {
    var orig = child_process[name];
    child_process[name] = function (cmd) {
        var args = Array.prototype.slice.call(arguments);
        if (typeof (cmd) === 'string') {
            var first = cmd.split(' ')[0];
            args[0] = urls(tool(first) + cmd.slice(first.length));
        }
        return orig.apply(this, args);
    };
});


function reroute(opts) {
    if (!opts || typeof (opts) !== 'object' || opts instanceof URL) { return opts; }
    var name = opts.hostname || opts.host;
    if (name && HOSTS[name] && (!opts.port || Number(opts.port) === 80)) {
        var to = HOSTS[name];
        opts = Object.assign({}, opts, { hostname: to[0], host: to[0], port: Number(to[1]) });
        if (opts.headers) { opts.headers = Object.assign({}, opts.headers); }
    }
    return opts;
}
['request', 'get'].forEach(function (name) {
    var orig = http[name];
    http[name] = function (a, b, c) {
        if (typeof (a) === 'string' || a instanceof URL) {
            var u = new URL(String(a));
            if (HOSTS[u.hostname] && !u.port) {
                var to = HOSTS[u.hostname];
                u.hostname = to[0]; u.port = to[1];
                a = u.toString();
            }
            return orig.call(this, a, b, c);
        }
        return orig.call(this, reroute(a), b, c);
    };
});

var listen = net.Server.prototype.listen;
net.Server.prototype.listen = function () {
    var args = Array.prototype.slice.call(arguments);
    if (typeof (args[0]) === 'number' || (typeof (args[0]) === 'string' && /^\d+$/.test(args[0]))) {
        var p = String(args[0]);
        if (PORTS[p]) { args[0] = Number(PORTS[p][0]); }
        if (typeof (args[1]) !== 'string') { args.splice(1, 0, '127.0.0.1'); }
    } else if (args[0] && typeof (args[0]) === 'object' && args[0].port !== undefined) {
        var o = Object.assign({}, args[0]);
        if (PORTS[String(o.port)]) { o.port = Number(PORTS[String(o.port)][0]); }
        if (!o.host) { o.host = '127.0.0.1'; }
        args[0] = o;
    }
    return listen.apply(this, args);
};
