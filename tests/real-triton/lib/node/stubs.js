// The NAPI and VMAPI answers the mock servers and CNAPI need, on
// 127.0.0.1:$STUB_PORT: every admin NIC is 127.0.0.1 (so CNAPI reaches each mock
// cn-agent on loopback), no server has VMs, NIC tags exist. Anything else is 404.
'use strict';
var http = require('http');
var routes = [
    ['GET', /^\/nics(\?|$)/, function () { return [200, []]; }],
    ['GET', /^\/nics\//, function () { return [404, { code: 'ResourceNotFound', message: 'no such nic' }]; }],
    ['POST', /^\/networks\/[^/]+\/nics$/, function (b) {
        return [200, Object.assign({}, b, { ip: '127.0.0.1', netmask: '255.0.0.0',
            nic_tag: 'admin', vlan_id: 0, primary: false, state: 'running' })];
    }],
    ['POST', /^\/nic_tags$/, function (b) { return [200, { name: b.name, mtu: 1500, uuid: '5e1f0000-0000-4000-8000-0000000000aa' }]; }],
    ['GET', /^\/vms(\?|$)/, function () { return [200, []]; }],
    ['DELETE', /^\/nics\//, function () { return [204, null]; }]
];
http.createServer(function (req, res) {
    var chunks = [];
    req.on('data', function (c) { chunks.push(c); });
    req.on('end', function () {
        var body = {};
        try { body = JSON.parse(Buffer.concat(chunks).toString() || '{}'); } catch (e) { body = {}; }
        var out = [404, { code: 'ResourceNotFound', message: 'the harness does not answer ' + req.url }];
        routes.some(function (r) {
            if (r[0] === req.method && r[1].test(req.url)) { out = r[2](body); return true; }
            return false;
        });
        res.writeHead(out[0], { 'Content-Type': 'application/json' });
        res.end(out[1] === null ? '' : JSON.stringify(out[1]));
    });
}).listen(Number(process.env.STUB_PORT), '127.0.0.1');
