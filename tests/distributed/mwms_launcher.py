"""Starts the 2 workers of mwms_worker.py on 127.0.0.1 and waits for them, so that one
recorded process (``nvtx-tf record -- python mwms_launcher.py ...``) holds every worker:
the children inherit the recorder's environment. Every wait is bounded: on timeout, or as
soon as one worker fails (the other would wait for it in a collective), the workers are
killed. Usage: mwms_launcher.py PORT0 PORT1 LOGDIR TIMEOUT_S EPOCHS STEPS [WORKER_SCRIPT]
(default mwms_worker.py, beside this file)."""

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import nvtx

HERE = Path(__file__).resolve().parent
port0, port1, logdir, timeout_s, epochs, steps = sys.argv[1:7]
worker_script = sys.argv[7] if len(sys.argv) > 7 else "mwms_worker.py"
logdir = Path(logdir)
cluster = {"worker": [f"127.0.0.1:{port0}", f"127.0.0.1:{port1}"]}

launch = nvtx.start_range("launch workers", domain="Launcher")
procs, logs = [], []
for index in range(2):
    env = dict(os.environ)
    env["TF_CONFIG"] = json.dumps({"cluster": cluster, "task": {"type": "worker", "index": index}})
    env["TF_USE_LEGACY_KERAS"] = "1"
    env.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    env["CUDA_VISIBLE_DEVICES"] = ""
    for var in ("http_proxy", "https_proxy", "HTTP_PROXY", "HTTPS_PROXY", "all_proxy", "ALL_PROXY", "grpc_proxy"):
        env.pop(var, None)  # loopback only
    env["no_proxy"] = env["NO_PROXY"] = "127.0.0.1,localhost"
    log = open(logdir / f"worker{index}.log", "w")
    logs.append(log)
    procs.append(
        subprocess.Popen(
            [sys.executable, str(HERE / worker_script), epochs, steps], env=env, stdout=log, stderr=subprocess.STDOUT
        )
    )
nvtx.end_range(launch)

wait = nvtx.start_range("wait workers", domain="Launcher")
deadline = time.monotonic() + float(timeout_s)
status = "ok"
while any(p.poll() is None for p in procs):
    if any(p.poll() not in (None, 0) for p in procs):
        status = "a worker failed"
        break
    if time.monotonic() > deadline:
        status = f"timeout after {timeout_s} s"
        break
    time.sleep(0.2)
for p in procs:
    if p.poll() is None:
        p.kill()
    try:
        p.wait(timeout=30)
    except subprocess.TimeoutExpired:
        pass
nvtx.end_range(wait)
for log in logs:
    log.close()
codes = [p.returncode for p in procs]
print("workers:", [p.pid for p in procs], "exit codes:", codes, status, flush=True)
sys.exit(0 if status == "ok" and codes == [0, 0] else 1)
