"""The table of scripts/bench_gpu.sh from its raw JSON lines.

  python3 scripts/bench/gpu_report.py RESULTS.jsonl
  python3 scripts/bench/gpu_report.py --summary FILE   # one line per JSON line

Lines come from scripts/bench/mt_run.py (framework mirrortrain, by name),
scripts/bench/torch_gpu.py (framework pytorch, by bench) and
scripts/bench/cublas_gemm.cu (framework cublas); a line with "error" says
why a measurement is missing.
"""
import json
import sys

# MLP of configs/mlp_4096_gpu.yaml: 784-4096x4-10.
HIDDEN = [4096, 4096, 4096, 4096]


def mlp_flops_per_example(hidden: list) -> int:
    """GEMM flops per example and step: forward, weight and input gradient
    (2*in*out each) per layer, less the first layer's input gradient."""
    dims = [784] + hidden + [10]
    macs = [i * o for i, o in zip(dims[:-1], dims[1:])]
    return 2 * (3 * sum(macs) - macs[0])


def fmt(v, digits=1, unit=""):
    if v is None:
        return "n/a"
    return f"{v:,.{digits}f}{unit}".replace(",", " ")


def summary(r: dict) -> str:
    """One readable line for the log of scripts/bench_gpu.sh."""
    fw = r.get("framework")
    if "error" in r:
        return f"{fw} {r.get('name') or r.get('bench')}: {r['error']}"
    if fw == "cublas":
        return f"cublasSgemm {r['m']}x{r['n']}x{r['k']} {r['precision']}: {r['tflops']} TFLOP/s"
    if fw == "pytorch":
        keys = ("m", "precision", "samples_per_sec", "tflops", "reached", "epoch",
                "seconds", "best_accuracy")
        return f"pytorch {r['bench']}: " + ", ".join(f"{k} {r[k]}" for k in keys if k in r)
    msg = f"mirrortrain {r['name']}: exit {r['exit_code']}"
    if r.get("stopped"):
        msg += f" (stopped: {r['stopped']})"
    if r.get("samples_per_sec"):
        msg += (f", {r['samples_per_sec']} samples/s, {r['step_ms']} ms/step, "
                f"{len(r['windows'])} windows")
    if "target" in r:
        msg += f", target {r['target']} ({r['target_weights']}): " + (
            f"epoch {r['epoch']} at {r['seconds']} s" if r["reached"] else "not reached")
        msg += "; tests " + ", ".join(f"{t['epoch']}:{t['weights']}={t['accuracy']:.4f}"
                                      for t in r["tests"])
    if r.get("stderr_tail"):
        msg += "\n  " + "\n  ".join(r["stderr_tail"].strip().splitlines()[-5:])
    return msg


def main() -> None:
    if sys.argv[1] == "--summary":
        with open(sys.argv[2]) as f:
            for raw in f:
                if raw.strip().startswith("{"):
                    print(summary(json.loads(raw)))
        return
    lines = []
    with open(sys.argv[1]) as f:
        for raw in f:
            raw = raw.strip()
            if raw.startswith("{"):
                try:
                    lines.append(json.loads(raw))
                except json.JSONDecodeError:
                    pass
    mt = {r["name"]: r for r in lines if r.get("framework") == "mirrortrain"}
    pt = {}  # A measurement wins over an error line of the same call.
    for r in lines:
        if r.get("framework") == "pytorch" and r.get("bench") != "matmul":
            if "error" not in r or r.get("bench") not in pt:
                pt[r.get("bench")] = r
    gemm = {(r.get("framework"), r.get("m"), r.get("precision")): r.get("tflops")
            for r in lines if r.get("bench") in ("gemm", "matmul") and "tflops" in r}
    errors = [r for r in lines if "error" in r]

    def ok(r):  # A mirrortrain run that logged numbers.
        return r is not None and r.get("samples_per_sec") is not None

    def why(r):
        if r is None:
            return "not run"
        if "error" in r:
            return r["error"]
        if r.get("samples_per_sec") is None:
            tail = (r.get("stderr_tail") or "").strip().splitlines()
            return f"failed (exit {r.get('exit_code')}): {tail[-1] if tail else '?'}"
        return ""

    rows = [("benchmark", "mirrortrain", "PyTorch", "ratio")]
    gpu = next((r.get("gpu") for r in lines if r.get("gpu")), "?")

    # 1. CNN throughput.
    m, p = mt.get("cnn_rate"), pt.get("cnn_rate")
    mv = m["samples_per_sec"] if ok(m) else None
    pv = (p or {}).get("samples_per_sec")
    prec = (p or {}).get("precision", "fp32")
    rows.append((f"CNN batch 256 {prec}: train samples/s", fmt(mv) if mv else why(m),
                 fmt(pv), f"{mv / pv:.2f}x" if mv and pv else "n/a"))

    # 1b. Time to accuracy.
    m, p = mt.get("cnn_tta"), pt.get("cnn_tta")

    def tta(r, weights):
        if r is None:
            return "not run", None
        if "error" in r:
            return r["error"], None
        if r.get("reached"):
            return f"{r['seconds']:.1f} s (epoch {r['epoch']}, {weights})", r["seconds"]
        best = max((t["accuracy"] for t in r.get("tests", [])
                    if t.get("weights") == weights), default=r.get("best_accuracy"))
        if r.get("exit_code") not in (0, 143, None) and not r.get("tests"):
            return why(r) if "stderr_tail" in r else "failed", None
        return f"not reached (best {fmt(best, 4)})", None

    ms, mtime = tta(m, "ema")
    ps, ptime = tta(p, "plain")
    target = (m or p or {}).get("target", 0.916)
    rows.append((f"CNN batch 256: wall time to test accuracy {target}", ms, ps,
                 f"{ptime / mtime:.2f}x (PyTorch s / mirrortrain s)" if mtime and ptime else "n/a"))

    # 2. Large MLP in tf32.
    m, p = mt.get("mlp"), pt.get("mlp")
    mtf = None
    if ok(m):
        mtf = m["samples_per_sec"] * mlp_flops_per_example(m.get("hidden_units") or HIDDEN) / 1e12
    ptf = (p or {}).get("tflops")
    rows.append(("MLP 784-4096x4-10 batch 4096 tf32: TFLOP/s", fmt(mtf, 1) if mtf else why(m),
                 fmt(ptf, 1), f"{mtf / ptf:.2f}x" if mtf and ptf else "n/a"))
    for size in (8192, 4096):
        cb, tm = gemm.get(("cublas", size, "tf32")), gemm.get(("pytorch", size, "tf32"))
        rows.append((f"  tf32 GEMM {size}^3 rate, TFLOP/s (cublasSgemm | torch.matmul)",
                     fmt(cb, 1), fmt(tm, 1), f"{cb / tm:.2f}x" if cb and tm else "n/a"))
        rows.append((f"  MLP TFLOP/s as a share of that GEMM rate",
                     fmt(100 * mtf / cb, 0, "%") if mtf and cb else "n/a",
                     fmt(100 * ptf / tm, 0, "%") if ptf and tm else "n/a", ""))

    # 3. Communication not hidden by compute (mirrored, 2 logical replicas on gpu:0).
    comm_rows = []
    for model in ("cnn", "mlp"):
        runs = {v: mt.get(f"comm_{model}_{v}") for v in ("one_device", "mirrored1", "mirrored2", "mirrored2_nocomm")}
        ms_ = {v: r["step_ms"] if ok(r) else None for v, r in runs.items()}
        cells = [f"{v} {fmt(t, 2, ' ms') if t else why(runs[v])}" for v, t in ms_.items()]
        if ms_["mirrored2"] and ms_["mirrored2_nocomm"]:
            exposed = ms_["mirrored2"] - ms_["mirrored2_nocomm"]
            share = f"exposed communication {exposed:.2f} ms = {100 * exposed / ms_['mirrored2']:.1f}% of the mirrored-2 step"
        else:
            share = "exposed-communication share: n/a (needs mirrored-2 and mirrored-2 without communication)"
        comm_rows.append((model, cells, share))

    width = [max(len(str(r[i])) for r in rows) for i in range(4)]
    print(f"GPU: {gpu}")
    for i, r in enumerate(rows):
        print(" | ".join(str(c).ljust(w) for c, w in zip(r, width)).rstrip())
        if i == 0:
            print("-+-".join("-" * w for w in width))
    print("ratio: mirrortrain / PyTorch (for time: PyTorch seconds / mirrortrain seconds); >1 favours mirrortrain")
    print("mirrortrain time-to-accuracy: EMA weights, from process launch; PyTorch: plain weights, "
          "from before data loading (CUDA context included); both evaluated once per epoch on the 10000 test images")
    print("\nstep time (ms), mirrored with 2 logical replicas on gpu:0 (no PyTorch twin: "
          "DDP/NCCL needs one GPU per rank):")
    for model, cells, share in comm_rows:
        print(f"  {model}: " + "; ".join(cells))
        print(f"       {share}")
    for e in errors:
        print(f"error: {e.get('bench') or e.get('name')}: {e['error']}")


if __name__ == "__main__":
    main()
