#!/usr/bin/env python3
"""Rewrite one Triton repository's package.json for `npm install --ignore-scripts`
on Linux and Node 20, without GitHub: native addons -> the stand-ins in
node/standins, git dependencies -> the local clones beside it, SmartOS-only
dependencies dropped. Usage: pkg.py REPO_DIR ROLE STANDINS_DIR
(ROLE: moray | cnapi | cn-agent | designation | wf | sapi | imgapi | sdcadm). Idempotent."""
import json
import os
import sys

repo, role, standins = sys.argv[1], sys.argv[2], os.path.abspath(sys.argv[3])
path = os.path.join(repo, "package.json")
pkg = json.load(open(path)) if os.path.exists(path) else {}


def stand_in(name):
    return "file:" + os.path.join(standins, name)


def sibling(name):
    return "file:" + os.path.join(os.path.dirname(os.path.abspath(repo)), name)


# Every role: the same stand-ins wherever a dependency pulls them in.
NATIVE = ["libuuid", "microtime", "gc-stats", "event-loop-stats", "bunyan-syslog"]
overrides = {n: stand_in(n) for n in NATIVE}
overrides["oldcrc"] = sibling("node-crc")  # fast's git dependency
deps = pkg.setdefault("dependencies", {})
pkg.pop("devDependencies", None)
pkg.pop("scripts", None)  # lifecycle scripts are SmartOS installers

if role == "moray":
    for gone in ["dtrace-provider"]:
        deps.pop(gone, None)
    deps["node-manatee"] = stand_in("node-manatee")
elif role == "cnapi":
    deps["dapi"] = sibling("sdc-designation")
    deps.pop("wf-shared", None)  # needs cnapi's own modules: placed by prepare.sh
    overrides["joyent-schemas"] = sibling("schemas")
elif role == "cn-agent":
    # the SmartOS backend's modules; the mock (dummy) backend needs none of them
    for gone in ["pty.js", "kstat", "zfs", "sdc-docker-build", "digest-stream",
                 "forkexec", "imgmanifest", "qlocker", "stream-throttle", "lstream",
                 "ctype", "bindings", "nodeunit"]:
        deps.pop(gone, None)
elif role == "designation":
    deps["joyent-schemas"] = sibling("schemas")
elif role == "wf":
    # the node-workflow API and runner from npm, plus its moray backend
    pkg = {"name": "rt-workflow", "version": "0.0.0", "private": True,
           "dependencies": {"wf": "1.2.2", "wf-moray-backend": "1.3.2"}}
    # the moray backend asks for wf 1.2.0, which npm no longer has
    overrides["wf"] = "1.2.2"
elif role == "sapi":
    # its own moray client: SAPI starts in proto mode (its local store) and
    # the harness then switches it to full mode on moray, as a new headnode's
    # setup does
    deps["triton-metrics"] = stand_in("triton-metrics")
elif role == "imgapi":
    # dc mode on the local database and storage: no moray, UFDS, Manta,
    # workflow or Docker registry; git-only modules become stand-ins
    for name in ["triton-metrics", "ufds", "wf-client", "effluent-logger", "progbar",
                 "manta", "manta-dir-watcher", "docker-registry-client"]:
        deps[name] = stand_in(name)
    deps["moray"] = stand_in("moray-none")
    pkg.pop("optionalDependencies", None)
elif role == "sdcadm":
    # the schemas clone; cueball (binder's DNS) and fs-ext (qlocker's native
    # flock, from a git host) become stand-ins
    deps["joyent-schemas"] = sibling("schemas")
    deps["cueball"] = stand_in("cueball")
    overrides["fs-ext"] = stand_in("fs-ext")
else:
    sys.exit("pkg.py: unknown role " + role)

for name in NATIVE:
    if name in deps:
        deps[name] = stand_in(name)
pkg["overrides"] = overrides
json.dump(pkg, open(path, "w"), indent=2)
