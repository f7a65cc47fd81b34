#!/usr/bin/env python3
"""readopt.py SAPI CNAPI SERVER COMPONENT: what vm-agent's and net-agent's
postinstalls do on a real CN, done by the harness's stand-in before the
installer runs: the server's COMPONENT instance is adopted again in SAPI with
only {uuid, service_uuid}. Real SAPI stores that over the whole record, so the
instance loses server_uuid, image_uuid and agentsadm's marks; agentsadm must
put them back. The instance is the one whose params name SERVER, else the one
server.agents names. Prints what it did."""
import json
import sys
import urllib.request

sapi, cnapi, server, component = sys.argv[1:5]


def get(url):
    return json.load(urllib.request.urlopen(url, timeout=30))


svc = get(sapi + "/services?type=agent&name=" + component)[0]["uuid"]
mine = [i for i in get(sapi + "/instances?service_uuid=" + svc)
        if (i.get("params") or {}).get("server_uuid") == server]
if not mine:
    listed = [a.get("uuid") for a in get(cnapi + "/servers/" + server).get("agents") or []
              if a.get("name") == component and a.get("uuid")]
    mine = [{"uuid": u} for u in listed]
if not mine:
    print("readopt %s on %s: no instance to adopt" % (component, server))
    sys.exit(0)
body = json.dumps({"uuid": mine[0]["uuid"], "service_uuid": svc}).encode()
req = urllib.request.Request(sapi + "/instances", data=body, method="POST",
                             headers={"Content-Type": "application/json"})
urllib.request.urlopen(req, timeout=30).read()
print("readopt %s on %s: instance %s adopted bare" % (component, server, mine[0]["uuid"]))
