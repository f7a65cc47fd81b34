#!/usr/bin/env python3
"""fill-real.py SIM_IMGAPI SIM_SAPI REAL_IMGAPI REAL_SAPI: the simulator's
datacenter copied into the real IMGAPI and SAPI through their public APIs,
every UUID kept, so that both sides start alike (the twin check compares them).

Copied: every image (manifest, file, activation, disabled state), every SAPI
application, every agent service and agent instance (an instance without params
stays without, as a postinstall's bare adoption leaves it), and the `cnapi` vm
service with its instances (agentsadm reads CNAPI's execute flag there; SAPI in
proto mode records a vm instance without provisioning it). Idempotent: what the
real side has already is left alone."""
import json
import sys
import time
import urllib.error
import urllib.request

VERSION = {"Accept-Version": "~2"}
IMPORT_DROP = ("state", "files", "channels", "disabled", "published_at", "error")


def call(method, url, body=None, raw=None):
    headers = dict(VERSION)
    data = None
    if body is not None:
        data = json.dumps(body).encode()
        headers["Content-Type"] = "application/json"
    elif raw is not None:
        data = raw
        headers["Content-Type"] = "application/octet-stream"
    req = urllib.request.Request(url, data=data, method=method, headers=headers)
    try:
        with urllib.request.urlopen(req, timeout=120) as resp:
            return resp.read()
    except urllib.error.HTTPError as e:
        sys.exit("fill-real: %s %s answered %d: %s" % (method, url, e.code, e.read()[:300]))


def get(url):
    return json.loads(call("GET", url))


def settled(url):
    """The simulator seeds its servers' agents as it starts: wait until the list stops growing."""
    last = -1
    for _ in range(100):
        n = len(get(url))
        if n and n == last:
            return
        last = n
        time.sleep(0.3)


def copy_images(si, ri):
    have = {i["uuid"] for i in get(ri + "/images?state=all&limit=1000")}
    n = 0
    for m in get(si + "/images?state=all&limit=1000"):
        if m["uuid"] in have:
            continue
        data = call("GET", "%s/images/%s/file" % (si, m["uuid"]))
        body = {k: v for k, v in m.items() if k not in IMPORT_DROP}
        if m.get("published_at"):
            body["published_at"] = m["published_at"]
        call("POST", "%s/images/%s?action=import" % (ri, m["uuid"]), body=body)
        f = m["files"][0]
        call("PUT", "%s/images/%s/file?compression=%s&sha1=%s&size=%d" % (
            ri, m["uuid"], f["compression"], f["sha1"], f["size"]), raw=data)
        if m.get("state") in ("active", "disabled"):
            call("POST", "%s/images/%s?action=activate" % (ri, m["uuid"]))
        if m.get("state") == "disabled" or m.get("disabled"):
            call("POST", "%s/images/%s?action=disable" % (ri, m["uuid"]))
        n += 1
    return n


def pick(obj, keys, drop_empty=False):
    return {k: obj[k] for k in keys if k in obj and (obj[k] or not drop_empty)}


def copy_sapi(ss, rs):
    apps = {a["uuid"] for a in get(rs + "/applications")}
    for a in get(ss + "/applications"):
        if a["uuid"] not in apps:
            call("POST", rs + "/applications",
                 body=pick(a, ("uuid", "name", "owner_uuid", "params", "metadata", "metadata_schema")))
    have_svcs = {s["uuid"] for s in get(rs + "/services")}
    have_insts = {i["uuid"] for i in get(rs + "/instances")}
    svcs = get(ss + "/services?type=agent") + get(ss + "/services?name=cnapi")
    n = 0
    for s in svcs:
        if s["uuid"] not in have_svcs:
            call("POST", rs + "/services",
                 body=pick(s, ("uuid", "name", "application_uuid", "params", "metadata", "manifests", "type")))
        for i in get(ss + "/instances?service_uuid=" + s["uuid"]):
            if i["uuid"] not in have_insts:
                call("POST", rs + "/instances",
                     body=pick(i, ("uuid", "service_uuid", "params", "metadata"), drop_empty=True))
                n += 1
    return len(svcs), n


if __name__ == "__main__":
    if len(sys.argv) != 5:
        sys.exit(__doc__)
    si, ss, ri, rs = sys.argv[1:5]
    settled(ss + "/instances?type=agent")
    images = copy_images(si, ri)
    services, instances = copy_sapi(ss, rs)
    print("filled the real services: %d images, %d services, %d instances" % (images, services, instances))
