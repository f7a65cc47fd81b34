// sapi-main.js: the real SAPI (sdc-sapi's lib/server/sapi.js, unedited) on
// 127.0.0.1:$REAL_SAPI_PORT without the SmartOS metadata its lib/config.js reads
// (mdata-get): the config it would build, in proto mode (TEST_SAPI_PROTO_MODE,
// SAPI's own switch; a headnode's SAPI starts in proto mode too). Its objects
// live in its local store, $SAPI_LOCAL_ROOT. The VMAPI/CNAPI/IMGAPI/NAPI/PAPI
// URLs point at the harness's stubs and services; proto mode calls none of them.
'use strict';
var path = require('path');
var src = path.join(process.env.RT_SRC, 'sdc-sapi');
process.env.TEST_SAPI_PROTO_MODE = 'true';
var bunyan = require(path.join(src, 'node_modules', 'bunyan'));
var SAPI = require(path.join(src, 'lib', 'server', 'sapi'));
var log = bunyan.createLogger({ name: 'sapi', level: 'info', serializers: bunyan.stdSerializers });
function url(port) { return { url: 'http://127.0.0.1:' + port }; }
var config = {
    log: log, port: Number(process.env.REAL_SAPI_PORT), address: '127.0.0.1',
    datacenter_name: process.env.RT_DC,
    instanceUuid: process.env.RT_ZONE.slice(0, -1) + '5', serverUuid: process.env.RT_ZONE.slice(0, -1) + '2',
    server_uuid: process.env.RT_ZONE.slice(0, -1) + '2', adminIp: '127.0.0.1',
    moray: { host: '127.0.0.1', port: Number(process.env.MORAY_PORT) },
    cnapi: url(process.env.CNAPI_PORT), vmapi: url(process.env.STUB_PORT),
    imgapi: url(process.env.REAL_IMGAPI_PORT), napi: url(process.env.STUB_PORT),
    papi: url(process.env.STUB_PORT)
};
var sapi = new SAPI(config);
sapi.start(function (err) {
    if (err) { log.fatal(err, 'SAPI did not start'); process.exit(1); }
    log.info('real-triton: SAPI listening on 127.0.0.1:%d (proto mode)', config.port);
});
