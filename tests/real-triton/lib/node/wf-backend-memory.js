// node-workflow's in-memory backend, one per process (wf-backend.js): the
// API and the runner each construct "their" backend from this module and get
// the same one.
'use strict';
module.exports = require('./wf-backend.js').memory;
