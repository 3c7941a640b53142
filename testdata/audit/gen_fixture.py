"""Regenerate original.sqlite3 by replaying session.jsonl against the Python original.

Usage: python3 gen_fixture.py /path/to/orig/src/main.py
Each "$Gn" in the script stands for the n-th group id returned by create_group.
"""
import json
import os
import shutil
import sqlite3
import subprocess
import sys
import tempfile

here = os.path.dirname(os.path.abspath(__file__))
server = sys.argv[1]
work = tempfile.mkdtemp()
env = dict(os.environ, CROSSTALK_OBSERVABILITY_RETENTION_DAYS="inf", CROSSTALK_GROUPS_DIR=work)
proc = subprocess.Popen([sys.executable, server], stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env, text=True)
groups = []
with open(os.path.join(here, "session.jsonl")) as script:
    for line in script:
        for index, group in enumerate(groups, start=1):
            line = line.replace("$G%d" % index, group)
        request = json.loads(line)
        proc.stdin.write(line)
        proc.stdin.flush()
        if isinstance(request, list):
            # A batch is answered by one array; skip notifications before it.
            response = json.loads(proc.stdout.readline())
            while not isinstance(response, list):
                response = json.loads(proc.stdout.readline())
            continue
        if request.get("id") is None:
            continue
        response = json.loads(proc.stdout.readline())
        while not isinstance(response, dict) or response.get("id") != request["id"]:
            response = json.loads(proc.stdout.readline())
        params = request.get("params") or {}
        if params.get("name") == "create_group" and "result" in response:
            groups.append(json.loads(response["result"]["content"][0]["text"])["group_id"])
proc.stdin.close()
proc.wait()
database = sqlite3.connect(os.path.join(work, "observability.sqlite3"))
database.execute("PRAGMA wal_checkpoint(TRUNCATE)")
database.close()
shutil.copy(os.path.join(work, "observability.sqlite3"), os.path.join(here, "original.sqlite3"))
shutil.rmtree(work)
