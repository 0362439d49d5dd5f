#!/usr/bin/env python3
"""Resident memory of a running process by kind (run by tests/bench/rss.sh
and tests/integration/test-rss-daemon.sh, not a test itself).

  rss-smaps.py snapshot PID [--model FILE]
      one JSON object: VmHWM and VmRSS (/proc/PID/status), and the resident
      bytes of /proc/PID/smaps summed by kind: the model file, CUDA
      libraries (libcu*, libnv*), other files, anonymous memory (heap and
      unnamed maps), stacks; the largest mappings; whether a CUDA library is
      mapped at all (resident or not).
  rss-smaps.py watch [--model FILE] [--interval S] -- COMMAND ...
      runs COMMAND (its stdout goes to stderr), keeps the snapshot of the
      largest resident set seen while it runs, takes its VmHWM from wait4
      (ru_maxrss) and prints them with its exit status.

A private mapping's copy-on-write pages (Anonymous: in smaps) count as
anonymous memory of that mapping's kind, not as file pages."""
import json
import os
import re
import subprocess
import sys
import time

CUDA_LIB = re.compile(r"/lib(cu|nv)[^/]*\.so")


def status_kb(pid, key):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith(key + ":"):
                return int(line.split()[1]) * 1024
    return 0


def kind_of(path, model):
    if model and path == model:
        return "model"
    if CUDA_LIB.search(path):
        return "cuda_libs"
    if path.startswith("[stack"):
        return "stack"
    if path in ("", "[heap]") or path.startswith("[anon"):
        return "anon"
    if path.startswith("["):
        return "other"
    return "files"


def mappings(pid):
    """(path, rss_bytes, anon_bytes) per mapping of /proc/PID/smaps."""
    out, cur = [], None
    with open(f"/proc/{pid}/smaps") as f:
        for line in f:
            head = line.split(None, 5)
            if re.match(r"^[0-9a-f]+-[0-9a-f]+$", head[0]):
                cur = [head[5].strip() if len(head) > 5 else "", 0, 0]
                out.append(cur)
            elif head[0] == "Rss:":
                cur[1] = int(head[1]) * 1024
            elif head[0] == "Anonymous:":
                cur[2] = int(head[1]) * 1024
    return out


def snapshot(pid, model=None):
    model = os.path.realpath(model) if model else None
    maps = mappings(pid)
    kinds = {k: 0 for k in ("model", "cuda_libs", "files", "anon", "stack", "other")}
    by_path = {}
    for path, rss, anon in maps:
        k = kind_of(path, model)
        if k in ("model", "cuda_libs", "files"):
            # copy-on-write pages of a file mapping are the process's own
            kinds[k] += rss - anon
            kinds["anon"] += anon
        else:
            kinds[k] += rss
        name = path or "[anonymous]"
        by_path[name] = by_path.get(name, 0) + rss
    top = sorted(by_path.items(), key=lambda kv: -kv[1])[:8]
    return {"vm_hwm": status_kb(pid, "VmHWM"), "vm_rss": status_kb(pid, "VmRSS"),
            "smaps": kinds, "smaps_total": sum(r for _, r, _ in maps),
            "cuda_mapped": sorted({p for p, _, _ in maps if CUDA_LIB.search(p)}),
            "top": [{"path": p, "rss": r} for p, r in top]}


def watch(cmd, model, interval):
    proc = subprocess.Popen(cmd, stdout=sys.stderr)  # stdout carries only the JSON
    best = None
    while True:
        # reaped here, not by Popen: wait4 gives the child's peak (ru_maxrss,
        # = VmHWM) even when it ends between two snapshots
        pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
        if pid:
            break
        try:
            snap = snapshot(proc.pid, model)
        except (OSError, IndexError, ValueError):
            snap = None  # the process is exiting
        if snap and (best is None or snap["smaps_total"] >= best["smaps_total"]):
            best = snap
        time.sleep(interval)
    kinds = ("model", "cuda_libs", "files", "anon", "stack", "other")
    best = best or {"vm_rss": 0, "smaps": dict.fromkeys(kinds, 0), "smaps_total": 0,
                    "cuda_mapped": [], "top": []}
    best["vm_hwm"] = usage.ru_maxrss * 1024
    best["exit_status"] = os.waitstatus_to_exitcode(status)
    return best


def main(argv):
    if len(argv) >= 2 and argv[0] == "snapshot":
        model = argv[argv.index("--model") + 1] if "--model" in argv else None
        print(json.dumps(snapshot(int(argv[1]), model)))
        return 0
    if argv and argv[0] == "watch" and "--" in argv:
        opts, cmd = argv[1:argv.index("--")], argv[argv.index("--") + 1:]
        model = opts[opts.index("--model") + 1] if "--model" in opts else None
        interval = float(opts[opts.index("--interval") + 1]) if "--interval" in opts else 0.05
        res = watch(cmd, model, interval)
        print(json.dumps(res))
        return 0 if res.get("exit_status") == 0 else 1
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
