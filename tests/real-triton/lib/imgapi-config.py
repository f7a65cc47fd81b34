#!/usr/bin/env python3
"""imgapi-config.py OUT: the real IMGAPI's config for the loopback stack: dc
mode (the mode of a datacenter's IMGAPI, what agentsadm and cn-agent use),
authType none, local database and storage under $RT_ROOT/imgapi (the
datacenter's IMGAPI keeps its files in Manta or locally; here locally)."""
import json
import os
import sys

env = os.environ
zone = env["RT_ZONE"]
json.dump({
    "port": int(env["REAL_IMGAPI_PORT"]), "address": "127.0.0.1", "maxSockets": 100,
    "logLevel": "info", "mode": "dc", "datacenterName": env["RT_DC"],
    "serviceName": "imgapi", "instanceUuid": zone[:-1] + "6", "serverUuid": zone[:-1] + "2",
    "adminUuid": "930896af-bf8c-48d4-885c-6573a94b1853", "adminIp": "127.0.0.1",
    "authType": "none", "databaseType": "local", "storageTypes": ["local"],
    "placeholderImageLifespanDays": 7, "allowLocalCreateImageFromVm": False,
    "minImageCreationPlatform": ["7.0", "20130917T001310Z"],
    "ufds": {"url": "ldaps://127.0.0.1:9", "bindDN": "cn=root", "bindPassword": "x"},
    "moray": {"host": "127.0.0.1", "port": 9},
    "wfapi": {"url": "http://127.0.0.1:9", "workflows": ["import-remote-image", "create-from-vm"]},
}, open(sys.argv[1], "w"), indent=2)
