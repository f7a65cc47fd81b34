#!/usr/bin/env python3
"""What one step left on a server, and how two servers differ, for
tests/real-triton/apm/run.sh.

  compare.py snapshot ROOT STATE OUT   the tree under ROOT/opt/smartdc/agents,
                                       the stand-in SMF in STATE/smf and the
                                       stand-in calls of the step, as JSON
  compare.py diff APM AGENTSADM REMOVED  the differences, one per line, the
                                       expected ones (known()) marked `known:`;
                                       REMOVED: the packages removed so far,
                                       comma-separated; exit 1 when any other
                                       difference is found

Masked before comparing: UUIDs (instance UUIDs are random on each side),
times, and what each installer keeps for itself (agentsadm's .agentsadm
state directory, apm's scratch directory tmp/). File contents are compared
by digest, modes exactly, symlinks by target."""
import hashlib
import json
import os
import re
import stat
import sys

UUID = re.compile(rb"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")
OWN = {".agentsadm", "tmp"}  # each installer's own bookkeeping


def masked_digest(path):
    with open(path, "rb") as f:
        return hashlib.sha256(UUID.sub(b"<uuid>", f.read())).hexdigest()[:16]


def tree(root):
    base = os.path.join(root, "opt/smartdc/agents")
    out = {}
    for dirpath, dirnames, filenames in os.walk(base):
        rel_dir = os.path.relpath(dirpath, base)
        if rel_dir == ".":
            dirnames[:] = [d for d in dirnames if d not in OWN]
        for name in sorted(dirnames + filenames):
            p = os.path.join(dirpath, name)
            rel = os.path.normpath(os.path.join(rel_dir, name))
            st = os.lstat(p)
            mode = oct(stat.S_IMODE(st.st_mode))
            if stat.S_ISLNK(st.st_mode):
                out[rel] = f"link -> {os.readlink(p)}"
            elif stat.S_ISDIR(st.st_mode):
                out[rel] = f"dir {mode}"
            else:
                out[rel] = f"file {mode} {st.st_size} {masked_digest(p)}"
    return out


def smf(state):
    out = {}
    d = os.path.join(state, "smf")
    for name in sorted(os.listdir(d)) if os.path.isdir(d) else []:
        with open(os.path.join(d, name, "state")) as f:
            st = json.load(f)
        out[name.replace("%", "/")] = f"{st['state']} manifest {masked_digest(os.path.join(d, name, 'manifest.xml'))}"
    return out


def calls(state):
    path = os.path.join(state, "calls.log")
    hooks, own = [], []
    if os.path.exists(path):
        for line in open(path):
            c = json.loads(line)
            text = UUID.sub(b"<uuid>", " ".join([c["cmd"]] + c["args"]).encode()).decode()
            text = re.sub(r"/agent\.\d+\.xml", "/agent.<pid>.xml", text)
            if "/npm/" in c["by"]:
                hooks.append(f"{c['by']}: {text} -> {c['status']}")
            else:
                own.append(f"{c['by']}: {text} -> {c['status']}")
    return {"hooks": hooks, "installer": own}


def package(call):
    """The package whose hook made `call` (a line of calls()), from the
    hook's path; the whole caller when the path names none."""
    by = call.split(": ", 1)[0]
    m = re.search(r"node_modules/([^/]+)/npm/", by) or re.search(r"/([^/]+)/npm/", by)
    return m.group(1) if m else by


def known(line, removed):
    """Why a difference is expected, or None; `removed` names the packages
    removed so far. Each is a choice agentsadm made on purpose."""
    if line.startswith("hook calls interleave:"):
        return ("agentsadm runs the parallel-safe packages of one command at once (apm one "
                "after the other), so their hooks interleave")
    if line.endswith("uuid -v4 -> 0"):
        return "agentsadm writes the instance UUID file before the hooks run, so the postinstall finds it"
    for name in removed:
        if line.startswith(f"file etc/{name}: apm file"):
            return ("agentsadm's removal deletes the instance UUID file, as cn-agent's apm "
                    "(CNAPI's agents_uninstall) does; agents_core's apm keeps it")
        if re.match(rf"(file smf/{name}-[a-z]+\.xml|service smartdc/agent/{name}-[a-z]+): apm ", line):
            return ("agentsadm's removal deletes every SMF service and manifest the install's hooks "
                    "wrote (here the -setup/-update one); apm leaves them")
    return None


def diff(a, b, removed):
    """(unexpected, expected) differences."""
    lines = []
    for key, what in (("tree", "file"), ("smf", "service")):
        for rel in sorted(set(a[key]) | set(b[key])):
            x, y = a[key].get(rel), b[key].get(rel)
            if x != y:
                lines.append(f"{what} {rel}: apm {x or 'absent'}; agentsadm {y or 'absent'}")
    ha, hb = a["calls"]["hooks"], b["calls"]["hooks"]
    lines += [f"hook call only with apm: {c}" for c in ha if c not in hb]
    lines += [f"hook call only with agentsadm: {c}" for c in hb if c not in ha]
    both = [c for c in ha if c in hb]
    other = [c for c in hb if c in ha]
    if both != other and all(
        [c for c in both if package(c) == p] == [c for c in other if package(c) == p]
        for p in {package(c) for c in both}
    ):
        lines.append("hook calls interleave: each package's in the same order")
    elif both != other:
        lines.append("hook calls in another order:")
        lines += [f"  apm       {c}" for c in ha]
        lines += [f"  agentsadm {c}" for c in hb]
    unexpected = [x for x in lines if known(x, removed) is None]
    expected = [f"{x} ({known(x, removed)})" for x in lines if known(x, removed) is not None]
    return unexpected, expected


if sys.argv[1] == "snapshot":
    root, state, out = sys.argv[2:5]
    json.dump({"tree": tree(root), "smf": smf(state), "calls": calls(state)},
              open(out, "w"), indent=1, sort_keys=True)
elif sys.argv[1] == "diff":
    a, b = (json.load(open(p)) for p in sys.argv[2:4])
    unexpected, expected = diff(a, b, [n for n in sys.argv[4].split(",") if n])
    print("".join(f"{x}\n" for x in unexpected), end="")
    print("".join(f"known: {x}\n" for x in expected), end="")
    sys.exit(1 if unexpected else 0)
else:
    sys.exit(__doc__)
