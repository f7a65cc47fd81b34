#!/usr/bin/env python3
"""The SmartOS commands an apm package's hooks and agentsadm's SmartOS platform
call, for tests/real-triton/apm/run.sh: svccfg, svcadm, svcs (a small SMF kept
as files), sysinfo, bootparams, uuid, json (the npm `json` tool's few uses in
the agents' hooks) and uname (SmartOS's answers to -s and -v).

Usage: standin.py STATE_DIR COMMAND [ARG...]. run.sh writes one wrapper per
command into the overlay it mounts on /usr, so hooks find them at the paths
they use (/usr/sbin/svccfg, /usr/bin/sysinfo, ...). Every call is appended to
STATE_DIR/calls.log as one JSON line: the command, its arguments and who
called it (the hook script, else the calling program)."""
import json
import os
import re
import sys
import time
import uuid as uuidlib
import xml.etree.ElementTree as ET

STATE, CMD, ARGS = sys.argv[1], sys.argv[2], sys.argv[3:]
SMF = os.path.join(STATE, "smf")
SERVER_UUID = "564d0000-0000-4000-8000-00000000a9a1"


def caller():
    """The hook script above this call (`vm-agent/npm/postinstall.sh`), else
    the first named program above it (`agentsadm`, `node` for apm)."""
    pid, seen = os.getppid(), []
    for _ in range(8):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                argv = [a.decode(errors="replace") for a in f.read().split(b"\0") if a]
            with open(f"/proc/{pid}/stat") as f:
                ppid = int(f.read().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            break
        for a in argv:
            # apm spawns a hook by its package.json path (`npm/x.sh`,
            # `./npm/x.sh`) from the package directory: resolve it there
            if re.search(r"(^|/)npm/[^/]+\.sh$", a):
                try:
                    full = os.path.normpath(os.path.join(os.readlink(f"/proc/{pid}/cwd"), a))
                except OSError:
                    full = a
                parts = full.split("/")
                return "/".join(parts[-3:])
        if argv:
            seen.append(os.path.basename(argv[0]))
        pid = ppid
    named = [s for s in seen if s not in ("bash", "sh", "python3")]
    return named[0] if named else (seen[0] if seen else "?")


def log(status):
    with open(os.path.join(STATE, "calls.log"), "a") as f:
        f.write(json.dumps({"by": caller(), "cmd": CMD, "args": ARGS,
                            "status": status}) + "\n")


def finish(status=0, out=""):
    log(status)
    if out:
        sys.stdout.write(out)
    sys.exit(status)


# ---- SMF: one directory per service, named by its service name with / as %
def services():
    os.makedirs(SMF, exist_ok=True)
    return {n.replace("%", "/"): os.path.join(SMF, n) for n in os.listdir(SMF)}


def find(pattern):
    """The service a pattern names: an FMRI, a service name, or its last part."""
    name = re.sub(r"^svc:/", "", pattern)
    name = re.sub(r":default$", "", name)
    for full, d in services().items():
        if full == name or full.split("/")[-1] == name:
            return full, d
    return None, None


def read_state(d):
    with open(os.path.join(d, "state")) as f:
        return json.load(f)


def write_state(d, st):
    with open(os.path.join(d, "state"), "w") as f:
        json.dump(st, f)


def new_run(st, state):
    st["state"] = state
    st["ctid"] = (st.get("ctid") or 100) + 1 if state == "online" else None
    st["stime"] = time.strftime("%H:%M:%S")


def svccfg():
    if ARGS[:1] == ["import"] and len(ARGS) == 2:
        try:
            root = ET.parse(ARGS[1]).getroot()
        except (OSError, ET.ParseError) as e:
            sys.stderr.write(f"svccfg: {ARGS[1]}: {e}\n")
            finish(1)
        for svc in root.iter("service"):
            name = svc.get("name")
            enabled = None
            cdi = svc.find("create_default_instance")
            if cdi is not None:
                enabled = cdi.get("enabled") == "true"
            for inst in svc.findall("instance"):
                if inst.get("name") == "default":
                    enabled = inst.get("enabled") == "true"
            d = os.path.join(SMF, name.replace("/", "%"))
            fresh = not os.path.isdir(d)
            os.makedirs(d, exist_ok=True)
            with open(ARGS[1], "rb") as src, open(os.path.join(d, "manifest.xml"), "wb") as dst:
                dst.write(src.read())
            if fresh:
                st = {"fmri": f"svc:/{name}:default"}
                # a re-import keeps an instance's enabled state, as SMF does
                new_run(st, "online" if enabled else "disabled")
                write_state(d, st)
        finish(0)
    if ARGS[:1] == ["delete"] and len(ARGS) == 2:
        full, d = find(ARGS[1])
        if d is None:
            sys.stderr.write(f"svccfg: Pattern '{ARGS[1]}' doesn't match any entities\n")
            finish(1)
        for f in os.listdir(d):
            os.unlink(os.path.join(d, f))
        os.rmdir(d)
        finish(0)
    if ARGS[:1] == ["-s"]:
        finish(0)  # setprop on agentsadm's install service: recorded only
    sys.stderr.write(f"svccfg stand-in: unsupported {ARGS}\n")
    finish(2)


def svcadm():
    args = [a for a in ARGS if a != "-s"]
    if len(args) != 2:
        sys.stderr.write(f"svcadm stand-in: unsupported {ARGS}\n")
        finish(2)
    verb, pattern = args
    full, d = find(pattern)
    if d is None:
        sys.stderr.write(f"svcadm: Pattern '{pattern}' doesn't match any instances\n")
        finish(1)
    st = read_state(d)
    if verb == "enable":
        if st["state"] != "online":
            new_run(st, "online")
    elif verb == "disable":
        new_run(st, "disabled")
    elif verb in ("restart", "clear"):
        if st["state"] in ("online", "maintenance"):
            new_run(st, "online")
    elif verb != "refresh":
        sys.stderr.write(f"svcadm stand-in: unsupported {ARGS}\n")
        finish(2)
    write_state(d, st)
    finish(0)


def svcs():
    cols, header, pats, i = None, True, [], 0
    while i < len(ARGS):
        a = ARGS[i]
        if a == "-H":
            header = False
        elif a == "-o":
            i += 1
            cols = ARGS[i].split(",")
        elif a == "-x":
            pass
        else:
            pats.append(a)
        i += 1
    out = []
    for p in pats:
        full, d = find(p)
        if d is None:
            sys.stderr.write(f"svcs: Pattern '{p}' doesn't match any instances\n")
            finish(1)
        st = read_state(d)
        values = {"state": st["state"], "sta": {"online": "ON", "disabled": "DIS"}.get(st["state"], "MNT"),
                  "nstate": "-", "ctid": str(st["ctid"]) if st.get("ctid") else "-",
                  "stime": st["stime"], "fmri": st["fmri"]}
        out.append(" ".join(values[c] for c in (cols or ["state", "stime", "fmri"])))
    if header and cols is None:
        out.insert(0, "STATE          STIME    FMRI")
    finish(0, "".join(line + "\n" for line in out))


def sysinfo():
    if ARGS:
        finish(0)  # -u / -f: refresh the cache, nothing to refresh here
    finish(0, json.dumps({"UUID": SERVER_UUID, "Hostname": "apm-diff",
                          "System Type": "SunOS", "Live Image": "20250101T000000Z",
                          "Boot Parameters": {"headnode": "true"}}, indent=2) + "\n")


def lookup(obj, path):
    # `"Boot Parameters".headnode`, `params.image_uuid`, `uuid`
    for part in re.findall(r'"[^"]*"|[^.]+', path):
        part = part.strip('"')
        if isinstance(obj, dict) and part in obj:
            obj = obj[part]
        else:
            return None
    return obj


def json_tool():
    args, infile, array = list(ARGS), None, False
    if "-f" in args:
        k = args.index("-f")
        infile = args[k + 1]
        del args[k:k + 2]
    flags = [a for a in args if a.startswith("-")]
    keys = [a for a in args if not a.startswith("-")]
    array = any("a" in f for f in flags)
    text = open(infile).read() if infile else sys.stdin.read()
    try:
        data = json.loads(text)
    except ValueError:
        sys.stderr.write("json: input is not JSON\n")
        finish(1)
    if not keys:
        finish(0, json.dumps(data, indent=2) + "\n")
    items = data if array and isinstance(data, list) else [data]
    lines = []
    for item in items:
        vals = [lookup(item, k) for k in keys]
        if array:
            lines.append(" ".join("" if v is None else str(v) if not isinstance(v, (dict, list))
                                  else json.dumps(v) for v in vals))
        else:
            for v in vals:
                if v is None:
                    continue
                lines.append(v if isinstance(v, str) else json.dumps(v, indent=2))
    finish(0, "".join(f"{line}\n" for line in lines))


def uname():
    if ARGS == ["-v"]:
        finish(0, "joyent_20250101T000000Z\n")
    if ARGS in (["-s"], []):
        finish(0, "SunOS\n")
    u = os.uname()
    finish(0, {"-n": u.nodename, "-r": "5.11", "-m": "i86pc", "-p": "i386"}.get(
        ARGS[0] if ARGS else "", "SunOS") + "\n")


COMMANDS = {
    "svccfg": svccfg, "svcadm": svcadm, "svcs": svcs, "sysinfo": sysinfo,
    "bootparams": lambda: finish(0, "headnode=true\n"),
    "uuid": lambda: finish(0, f"{uuidlib.uuid4()}\n"),
    "json": json_tool, "uname": uname,
}
COMMANDS[CMD]()
