#!/usr/bin/env python3
"""edits.py RT_SRC: the few source edits the services need on this machine,
each a fixed SmartOS path or a Node >= 14 incompatibility (see README.md). Each
edit is checked: a source that no longer has the line stops the preparation."""
import os
import sys

src = sys.argv[1]
EDITS = [
    # moray's pg@6 decides whether to connect from the socket's readyState,
    # which Node >= 14 no longer reports as 'closed' for a fresh socket.
    ("moray/node_modules/pg/lib/connection.js",
     "if(this.stream.readyState === 'closed') {",
     "if(this.stream.readyState === 'closed' || !this.stream.remoteAddress) {"),
    # SAPI's local store lives in /sapi and /opt/smartdc/sapi/storage.
    ("sdc-sapi/lib/server/stor/local.js", "var ROOT = '/sapi';",
     "var ROOT = process.env.SAPI_LOCAL_ROOT;"),
    ("sdc-sapi/lib/server/stor/local.js", "var BACKUP_ROOT = '/opt/smartdc/sapi/storage';",
     "var BACKUP_ROOT = process.env.SAPI_LOCAL_ROOT + '/backup';"),
    # IMGAPI's local database ignores IMGAPITEST_LOCAL_BASE_DIR, which the rest
    # of its constants follow; its downloads go to /var/tmp.
    ("sdc-imgapi/lib/database.js", "this.dir = '/data/imgapi/manifests';",
     "this.dir = require('./constants').DATABASE_LOCAL_DIR;"),
    ("sdc-imgapi/lib/images.js", "var TMPDIR = '/var/tmp';",
     "var TMPDIR = process.env.IMGAPI_TMPDIR;"),
]
for rel, old, new in EDITS:
    path = os.path.join(src, rel)
    text = open(path).read()
    if new in text:
        continue
    if old not in text:
        sys.exit("edits.py: %s no longer has %r: the harness needs updating" % (rel, old))
    open(path, "w").write(text.replace(old, new, 1))
