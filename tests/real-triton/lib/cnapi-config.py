#!/usr/bin/env python3
"""cnapi-config.py MODE: CNAPI's config/config.json for the loopback stack, from
the repository's own config/test.json with every upstream on 127.0.0.1. MODE
ur (CNAPI's default: CommandExecute through Ur) or cn-agent
(useCnAgentCommandExecute, what SAPI's FEATURE_USE_CNAGENT_COMMAND_EXECUTE
renders)."""
import json
import os
import sys

env = os.environ
src = os.path.join(env["RT_SRC"], "sdc-cnapi", "config")
cfg = json.load(open(os.path.join(src, "test.json")))


def url(port):
    return {"url": "http://127.0.0.1:%s" % port, "username": "admin", "password": "x"}


cfg.update({
    "logLevel": "debug",
    "datacenter_name": env["RT_DC"],
    "adminIp": "127.0.0.1",
    "instanceUuid": env["RT_ZONE"],
    "serverUuid": env["RT_ZONE"][:-1] + "2",
    "serviceName": "cnapi",
    "amqp": {"host": "127.0.0.1", "port": int(env["AMQP_PORT"])},
    "moray": {"host": "127.0.0.1", "port": int(env["MORAY_PORT"])},
    "api": {"port": int(env["CNAPI_PORT"]), "username": "admin", "password": "x"},
    "wfapi": dict(url(env["WF_PORT"]), workflows=[]),
    "napi": url(env["STUB_PORT"]),
    "vmapi": url(env["STUB_PORT"]),
    "assets": {"url": "http://127.0.0.1:%s" % env["ASSETS_PORT"]},
    "cnapi": {"url": "http://127.0.0.1:%s" % env["CNAPI_PORT"]},
    "imgapi": {"url": env["IMGAPI_URL"]},
})
cfg.pop("redis", None)
cfg.pop("useCnAgentCommandExecute", None)
if sys.argv[1] == "cn-agent":
    cfg["useCnAgentCommandExecute"] = True
json.dump(cfg, open(os.path.join(src, "config.json"), "w"), indent=2)
