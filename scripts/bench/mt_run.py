"""Runs `mirrortrain train` for scripts/bench_gpu.sh and prints one JSON line
with what its run directory's metrics.jsonl says.

It follows metrics.jsonl while the run goes and stamps each record with the
seconds since launch, so time-to-accuracy needs nothing from the trainer but
its per-epoch test records. With --target it stops the run (SIGTERM: the
trainer finishes the step, saves a checkpoint and exits 143) as soon as a
test record of --weights reaches the target. With --timeout it stops the run
the same way when time is up; the windows logged so far still count.

  python3 scripts/bench/mt_run.py --name cnn_rate --run_dir DIR --timeout 90 \
      -- build/bin/mirrortrain train --config configs/fashion_mnist_cnn_gpu.yaml --set ...

Output: {"framework": "mirrortrain", "name", "env" (the --env settings),
"exit_code", "stopped" (target,
timeout or null), "wall_seconds", "batch", "hidden_units", "windows" (train records:
step, samples_per_sec, seconds), "samples_per_sec" (median of the windows
after the first, which holds start-up and warm-up; the first alone if it is
the only one), "step_ms", "tests" (test records with seconds), "target",
"reached" (first test record of --weights at or above the target),
"startup" (the trainer's start-up line in seconds: total, devices, model,
test_split, training_split, and where the line has them gpu_libraries and
before, the process's age when the start-up began), "switch_calls" (the
internal switches' call counts the run printed at its end, by switch: whether
an A/B run took the switched path), "stderr_tail" (when the run failed)}.
"""
import argparse
import json
import os
import re
import signal
import statistics
import subprocess
import sys
import time


def read_new(path: str, offset: int) -> tuple:
    """Complete lines of `path` after byte `offset`, and the new offset."""
    try:
        with open(path, "rb") as f:
            f.seek(offset)
            data = f.read()
    except FileNotFoundError:
        return [], offset
    end = data.rfind(b"\n") + 1
    lines = [json.loads(l) for l in data[:end].decode().splitlines() if l.strip()]
    return lines, offset + end


def stop(proc: subprocess.Popen, grace: float) -> None:
    if proc.poll() is not None:
        return
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(timeout=grace)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


STARTUP = re.compile(
    r"^start-up ([\d.]+) s: devices ([\d.]+) s, model ([\d.]+) s; test split "
    r"([\d.]+) s and training split ([\d.]+) s loading meanwhile"
    r"(?:; GPU libraries ([\d.]+) s meanwhile)?"
    r"(?:; process launch to start-up ([\d.]+) s)?$", re.M)


def read_startup(log_path: str) -> dict:
    """The trainer's start-up line, in seconds; {} if absent."""
    try:
        with open(log_path, "rb") as f:
            m = STARTUP.search(f.read(1 << 16).decode(errors="replace"))
    except FileNotFoundError:
        return {}
    if not m:
        return {}
    keys = ("total", "devices", "model", "test_split", "training_split",
            "gpu_libraries", "before")
    return {k: float(v) for k, v in zip(keys, m.groups()) if v is not None}


SWITCH_CALLS = re.compile(r"^mirrortrain: internal switches: (.*: \d+ calls)$", re.M)


def read_switch_calls(log_path: str) -> dict:
    """{switch: calls} from the run's closing switches line; {} if absent."""
    try:
        with open(log_path, "rb") as f:
            text = f.read().decode(errors="replace")
    except FileNotFoundError:
        return {}
    calls = {}
    for line in SWITCH_CALLS.findall(text):
        for item in line.split(", "):
            name, _, count = item.partition(": ")
            calls[name] = int(count.split()[0])
    return calls


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--name", required=True)
    p.add_argument("--run_dir", required=True)
    p.add_argument("--timeout", type=float, default=120.0)
    p.add_argument("--target", type=float, default=None,
                   help="stop once a test accuracy of --weights reaches this")
    p.add_argument("--weights", default="ema", help="ema or raw")
    # A record's time is when the poll reads it: 0.05 s added 25 ms on
    # average to a two-second time-to-accuracy.
    p.add_argument("--poll", type=float, default=0.01,
                   help="seconds between reads of metrics.jsonl")
    p.add_argument("--env", action="append", default=[], metavar="NAME=VALUE",
                   help="set in the run's environment (e.g. MIRRORTRAIN_SWITCHES=...)")
    p.add_argument("cmd", nargs=argparse.REMAINDER,
                   help="-- mirrortrain train ... (--run_dir is added)")
    a = p.parse_args()
    cmd = a.cmd[1:] if a.cmd[:1] == ["--"] else a.cmd
    if not cmd:
        p.error("no mirrortrain command after --")
    os.makedirs(a.run_dir, exist_ok=True)
    metrics = os.path.join(a.run_dir, "metrics.jsonl")
    log_path = os.path.join(a.run_dir, "mirrortrain.log")
    cmd = cmd + ["--run_dir", a.run_dir]

    # Switches come only from --env, so the JSON line says what the run had.
    env = {k: v for k, v in os.environ.items() if k != "MIRRORTRAIN_SWITCHES"}
    for item in a.env:
        name, sep, value = item.partition("=")
        if not sep or not name:
            p.error(f"--env {item}: expected NAME=VALUE")
        env[name] = value
    records, offset, stopped, reached = [], 0, None, None
    t0 = time.perf_counter()
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env)
        while True:
            done = proc.poll() is not None
            lines, offset = read_new(metrics, offset)
            now = round(time.perf_counter() - t0, 3)
            for rec in lines:
                rec["seconds"] = now
                records.append(rec)
                if (a.target is not None and reached is None and
                        rec.get("split") == "test" and
                        rec.get("weights") == a.weights and
                        rec.get("accuracy", 0) >= a.target):
                    reached = rec
            if done:
                break
            if reached is not None:
                stopped = "target"
                stop(proc, 60)
                continue  # Read what the last step logged.
            if now > a.timeout:
                stopped = "timeout"
                stop(proc, 30)
                continue
            time.sleep(a.poll)
    wall = time.perf_counter() - t0

    batch, hidden = None, None
    try:
        with open(os.path.join(a.run_dir, "config.yaml")) as f:
            resolved = f.read()
        m = re.search(r"global_batch_size: (\d+)", resolved)
        batch = int(m.group(1)) if m else None
        m = re.search(r"model:.*?hidden_units: \[([\d, ]*)\]", resolved, re.S)
        hidden = [int(u) for u in m.group(1).split(",") if u.strip()] if m else None
    except FileNotFoundError:
        pass
    windows = [{"step": r["step"], "samples_per_sec": r["samples_per_sec"],
                "seconds": r["seconds"]}
               for r in records if r.get("split") == "train"]
    rates = [w["samples_per_sec"] for w in windows]
    rate = statistics.median(rates[1:]) if len(rates) > 1 else (rates[0] if rates else None)
    out = {"framework": "mirrortrain", "name": a.name,
           "command": " ".join(cmd), "env": a.env, "exit_code": proc.returncode,
           "stopped": stopped, "wall_seconds": round(wall, 2), "batch": batch,
           "hidden_units": hidden,
           "windows": windows,
           "samples_per_sec": round(rate, 1) if rate else None,
           "first_window_only": len(rates) == 1,
           "step_ms": round(1e3 * batch / rate, 3) if rate and batch else None,
           "tests": [{k: r.get(k) for k in ("step", "epoch", "weights", "accuracy", "seconds")}
                     for r in records if r.get("split") == "test"]}
    if a.target is not None:
        out.update({"target": a.target, "target_weights": a.weights,
                    "reached": reached is not None,
                    "epoch": reached["epoch"] if reached else None,
                    "seconds": reached["seconds"] if reached else None,
                    "timing": "from process launch (start-up, data loading, CUDA "
                              "context included) to the crossing test record"})
    startup = read_startup(log_path)
    if startup:
        out["startup"] = startup
    switch_calls = read_switch_calls(log_path)
    if switch_calls:
        out["switch_calls"] = switch_calls
    ok = proc.returncode == 0 or (stopped and proc.returncode == 128 + signal.SIGTERM)
    if not ok or not windows:
        with open(log_path, "rb") as f:
            tail = f.read()[-2000:].decode(errors="replace")
        out["stderr_tail"] = tail
    print(json.dumps(out), flush=True)


if __name__ == "__main__":
    sys.exit(main())
