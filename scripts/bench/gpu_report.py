"""The table of scripts/bench_gpu.sh from its raw JSON lines.

  python3 scripts/bench/gpu_report.py RESULTS.jsonl
  python3 scripts/bench/gpu_report.py --summary FILE   # one line per JSON line

Lines come from scripts/bench/mt_run.py (framework mirrortrain, by name),
scripts/bench/torch_gpu.py (framework pytorch, by bench, precision and
compile) and scripts/bench/cublas_gemm.cu (framework cublas); a line with
"error" says why a measurement is missing (by the run's name in
scripts/bench_gpu.sh).

Each mirrortrain row stands next to PyTorch eager and torch.compile of the
same bench and precision; the MLP's TFLOP/s also as a share of the GEMM rate
of its precision (tf32: cublasSgemm, bf16: cublasGemmEx; torch.matmul for
PyTorch).
"""
import json
import re
import statistics
import sys

# MLP of configs/mlp_4096_gpu.yaml: 784-4096x4-10.
HIDDEN = [4096, 4096, 4096, 4096]

# Dense (no sparsity) peak TFLOP/s per precision from NVIDIA's data sheets,
# by a substring of the device name (first match): fp32 on CUDA cores, tf32
# and bf16 on tensor cores. The denominator of model FLOP utilisation.
PEAKS = [("H100 PCIe", {"fp32": 51.2, "tf32": 378.0, "bf16": 756.0}),
         ("H100 NVL", {"fp32": 60.0, "tf32": 417.5, "bf16": 835.0}),
         ("H100", {"fp32": 66.9, "tf32": 494.7, "bf16": 989.4}),
         ("H200", {"fp32": 66.9, "tf32": 494.7, "bf16": 989.4}),
         ("A100", {"fp32": 19.5, "tf32": 156.0, "bf16": 312.0})]

# The config-built models (scripts/bench_gpu.sh resnet, gpt): run name
# prefix, label.
CONFIG_MODELS = [("resnet", "ResNet (configs/fashion_mnist_resnet.yaml) batch 128"),
                 ("gpt", "GPT (configs/fortunes_gpt.yaml) batch 32 x 64 tokens")]


def peak_tflops(gpu: str, precision: str):
    for key, peaks in PEAKS:
        if key in (gpu or ""):
            return peaks.get(precision)
    return None


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


def median_range(values: list, digits: int, unit: str = "", signed: bool = False) -> str:
    """The median, with the range when there are several values."""
    sign = "+" if signed else ""
    out = f"{statistics.median(values):{sign}.{digits}f}{unit}"
    if len(values) > 1:
        out += f" ({min(values):{sign}.{digits}f} to {max(values):{sign}.{digits}f})"
    return out


def comm_rounds(mt: dict, model: str, variant: str) -> dict:
    """The runs of one comm variant by round: comm_<model>_<variant>_r<K>
    (round 1 also as comm_<model>_<variant>, the name before rounds)."""
    pattern = re.compile(rf"comm_{model}_{variant}(?:_r(\d+))?$")
    out = {}
    for name, r in mt.items():
        m = pattern.match(name)
        if m:
            out[int(m.group(1) or 1)] = r
    return dict(sorted(out.items()))


def final_accuracy(r) -> dict:
    """The test accuracy of a run's last evaluation by weights ("raw",
    "ema"), with its "epoch"; empty when it made none (or did not end)."""
    if not r or r.get("exit_code") != 0 or not r.get("tests"):
        return {}
    last = max(t["step"] for t in r["tests"])
    out = {t["weights"]: t["accuracy"] for t in r["tests"] if t["step"] == last}
    out["epoch"] = next(t["epoch"] for t in r["tests"] if t["step"] == last)
    return out


def summary(r: dict) -> str:
    """One readable line for the log of scripts/bench_gpu.sh."""
    fw = r.get("framework")
    if "error" in r:
        return f"{fw} {r.get('name') or r.get('bench')}: {r['error']}"
    if fw == "cublas":
        return (f"{r.get('call', 'cublasSgemm')} {r['m']}x{r['n']}x{r['k']} "
                f"{r['precision']}: {r['tflops']} TFLOP/s")
    if fw == "pytorch":
        keys = ("model", "m", "precision", "compile", "samples_per_sec", "tokens_per_sec", "tflops",
                "warmup_seconds", "reached", "epoch", "seconds", "best_accuracy")
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
    pt = {}  # (bench, precision, compiled): a torch_gpu.py measurement.
    pt_errors = {}  # Run name in scripts/bench_gpu.sh: why it has none.
    for r in lines:
        if r.get("framework") == "pytorch" and r.get("bench") != "matmul":
            if "error" in r:
                pt_errors[r.get("name") or r.get("bench")] = r
            else:
                bench = r.get("bench")
                if bench == "config_rate":  # One per model.
                    bench = f"config_rate:{r.get('model')}"
                if r.get("cudnn_benchmark"):  # Its own row, beside the default.
                    bench = f"{bench}:cudnn_benchmark"
                pt[(bench, r.get("precision"), bool(r.get("compile")))] = r

    def pt_get(bench, precision, compiled, name):
        """The measurement, else the error line of run `name`, else None."""
        return pt.get((bench, precision, compiled)) or pt_errors.get(name)

    gemm = {(r.get("framework"), r.get("m"), r.get("precision")): r.get("tflops")
            for r in lines if r.get("bench") in ("gemm", "matmul") and "tflops" in r}
    calls = {(r.get("m"), r.get("precision")): r.get("call")
             for r in lines if r.get("framework") == "cublas" and r.get("call")}
    errors = [r for r in lines if "error" in r]

    def ok(r):  # A mirrortrain run that logged numbers.
        return r is not None and r.get("samples_per_sec") is not None

    def timed(r):  # ... and knew its batch, so has a step time too.
        return ok(r) and r.get("step_ms") is not None

    def why(r):
        if r is None:
            return "not run"
        if "error" in r:
            return r["error"]
        if r.get("samples_per_sec") is None:
            tail = (r.get("stderr_tail") or "").strip().splitlines()
            return f"failed (exit {r.get('exit_code')}): {tail[-1] if tail else '?'}"
        return ""

    def cell(v, r, digits=1):
        return fmt(v, digits) if v else why(r)

    def ratio(a, b):
        return f"{a / b:.2f}x" if a and b else "n/a"

    def share(a, b):
        return fmt(100 * a / b, 0, "%") if a and b else "n/a"

    rows = [("benchmark", "mirrortrain", "PyTorch eager", "torch.compile",
             "vs eager", "vs compile")]
    gpu = next((r.get("gpu") for r in lines if r.get("gpu")), "?")

    # 1. CNN throughput: the config's precision (runs cnn_rate, cnn_rate_compile;
    # read from PyTorch's lines, mirrortrain's carry none) and bf16 (*_bf16*).
    cnn_prec = next((k[1] for k in pt if k[0] == "cnn_rate" and k[1] != "bf16"), "fp32")
    for name, prec in (("cnn_rate", cnn_prec), ("cnn_rate_bf16", "bf16")):
        m = mt.get(name)
        pe = pt_get("cnn_rate", prec, False, name)
        pc = pt_get("cnn_rate", prec, True, name + "_compile")
        mv = m["samples_per_sec"] if ok(m) else None
        pev, pcv = (pe or {}).get("samples_per_sec"), (pc or {}).get("samples_per_sec")
        rows.append((f"CNN batch 256 {prec}: train samples/s", cell(mv, m), cell(pev, pe),
                     cell(pcv, pc), ratio(mv, pev), ratio(mv, pcv)))
    # Against PyTorch eager with cudnn.benchmark on (per-shape algorithm
    # search; PyTorch's default is off), the config's precision.
    pb = pt_get("cnn_rate:cudnn_benchmark", cnn_prec, False, "cnn_rate_cudnn_benchmark")
    if pb is not None:
        m = mt.get("cnn_rate")
        mv = m["samples_per_sec"] if ok(m) else None
        pbv = pb.get("samples_per_sec")
        rows.append((f"CNN batch 256 {cnn_prec} vs PyTorch cudnn.benchmark: train samples/s",
                     cell(mv, m), cell(pbv, pb), "", ratio(mv, pbv), ""))
    # The same without CUDA graphs (train.cuda_graph: off): what replaying the
    # captured step is worth.
    m = mt.get("cnn_rate_eager")
    if m is not None:
        mv = m["samples_per_sec"] if ok(m) else None
        pe = pt_get("cnn_rate", cnn_prec, False, "cnn_rate")
        pc = pt_get("cnn_rate", cnn_prec, True, "cnn_rate_compile")
        pev, pcv = (pe or {}).get("samples_per_sec"), (pc or {}).get("samples_per_sec")
        rows.append((f"CNN batch 256 {cnn_prec}, cuda_graph off: train samples/s", cell(mv, m),
                     cell(pev, pe), cell(pcv, pc), ratio(mv, pev), ratio(mv, pcv)))

    # 1b. Time to accuracy (eager PyTorch only), the config's precision and bf16.
    def tta(r, weights):
        if r is None:
            return "not run", None
        if "error" in r:
            return r["error"], None
        if r.get("reached"):
            st = r.get("startup")
            where = (f"; start-up {st['total']:.2f} s: devices {st['devices']:.2f}, "
                     f"model {st['model']:.2f}, training split {st['training_split']:.2f}"
                     if st else "")
            if st and "gpu_libraries" in st:
                where += f", GPU libraries {st['gpu_libraries']:.2f}"
            if st and "before" in st:
                where += f"; {st['before']:.2f} s before it"
            return (f"{r['seconds']:.1f} s (epoch {r['epoch']}, {weights}{where})",
                    r["seconds"])
        best = max((t["accuracy"] for t in r.get("tests", [])
                    if t.get("weights") == weights), default=r.get("best_accuracy"))
        if r.get("exit_code") not in (0, 143, None) and not r.get("tests"):
            return why(r) if "stderr_tail" in r else "failed", None
        return f"not reached (best {fmt(best, 4)})", None

    # The config's precision as the PyTorch twin of its run recorded it.
    tta_prec = next((k[1] for k in pt if k[0] == "cnn_tta" and k[1] != "bf16"), cnn_prec)
    for name, prec, label in (("cnn_tta", tta_prec, tta_prec), ("cnn_tta_bf16", "bf16", "bf16"),
                              ("cnn_tta_winograd", tta_prec, f"{tta_prec} conv_gpu_winograd=on")):
        m = mt.get(name)
        if m is None and name != "cnn_tta":
            continue
        p = pt.get(("cnn_tta", prec, False), pt_errors.get(name))
        ms, mtime = tta(m, "ema")
        ps, ptime = tta(p, "plain")
        target = (m or p or {}).get("target", 0.916)
        rows.append((f"CNN batch 256 {label}: wall time to test accuracy {target}", ms, ps, "",
                     f"{ptime / mtime:.2f}x (PyTorch s / mirrortrain s)" if mtime and ptime else "n/a",
                     ""))

    # 2. Large MLP in tf32 (runs mlp, mlp_compile) and bf16 (mlp_bf16*), each
    # against the GEMM rate of its precision: cuBLAS for mirrortrain,
    # torch.matmul for PyTorch.
    for name, prec, target in (("mlp", "tf32", 75), ("mlp_bf16", "bf16", 70)):
        m = mt.get(name)
        pe = pt_get("mlp", prec, False, name)
        pc = pt_get("mlp", prec, True, name + "_compile")
        mtf = None
        if ok(m):
            mtf = m["samples_per_sec"] * mlp_flops_per_example(m.get("hidden_units") or HIDDEN) / 1e12
        petf, pctf = (pe or {}).get("tflops"), (pc or {}).get("tflops")
        rows.append((f"MLP 784-4096x4-10 batch 4096 {prec}: TFLOP/s", cell(mtf, m),
                     cell(petf, pe), cell(pctf, pc), ratio(mtf, petf), ratio(mtf, pctf)))
        for size in (8192, 4096):
            cb, tm = gemm.get(("cublas", size, prec)), gemm.get(("pytorch", size, prec))
            call = calls.get((size, prec)) or ("cublasGemmEx" if prec == "bf16" else "cublasSgemm")
            rows.append((f"  {prec} GEMM {size}^3 rate, TFLOP/s ({call} | torch.matmul)",
                         fmt(cb, 1), fmt(tm, 1), "", ratio(cb, tm), ""))
            rows.append((f"  MLP TFLOP/s as a share of that GEMM rate (target >={target}%)",
                         share(mtf, cb), share(petf, tm), share(pctf, tm), "", ""))

    # 2b. Models built from configs, next to the same layer list in PyTorch:
    # samples/s (tokens/s for text) and model FLOP utilisation (the twin's
    # FLOPs per sample, the same model, against the data-sheet peak).
    for model, label in CONFIG_MODELS:
        for prec in ("fp32", "bf16"):
            name = f"{model}_rate" + ("" if prec == "fp32" else f"_{prec}")
            m = mt.get(name)
            pe = pt_get(f"config_rate:{model}", prec, False, name)
            pc = pt_get(f"config_rate:{model}", prec, True, name + "_compile")
            if m is None and pe is None and pc is None:
                continue
            twin = next((r for r in (pe, pc) if r and "flops_per_sample" in r), {})
            per = twin.get("tokens_per_sample", 1)
            unit = "tokens/s" if "tokens_per_sample" in twin else "samples/s"
            mv = m["samples_per_sec"] * per if ok(m) else None
            pev = (pe or {}).get("samples_per_sec")
            pcv = (pc or {}).get("samples_per_sec")
            pev, pcv = pev and pev * per, pcv and pcv * per
            rows.append((f"{label} {prec}: train {unit}", cell(mv, m), cell(pev, pe),
                         cell(pcv, pc), ratio(mv, pev), ratio(mv, pcv)))
            flops, peak = twin.get("flops_per_sample"), peak_tflops(gpu, prec)
            if flops and peak:
                def mfu(v):
                    if not v:
                        return "n/a"
                    pct = 100 * v / per * flops / 1e12 / peak
                    return f"{pct:.{2 if pct < 1 else 1}f}%"
                rows.append((f"  model FLOP utilisation ({fmt(flops / 1e6, 1)} MFLOP per sample "
                             f"fwd+bwd; {prec} peak {fmt(peak, 1)} TFLOP/s)",
                             mfu(mv), mfu(pev), mfu(pcv), "", ""))

    # 3. Communication not hidden by compute (mirrored, 2 logical replicas on
    # gpu:0), and mirrored on [gpu:0] against one_device. Each variant ran in
    # rounds (comm_<model>_<variant>_r<K>), the variants interleaved; a
    # comparison pairs the two variants' runs of one round, so drift between
    # rounds cancels, and gives the median over the rounds (and the range).
    comm_rows = []
    for model in ("cnn", "mlp"):
        variants = ("one_device", "mirrored1", "mirrored2", "mirrored2_reduce",
                    "mirrored2_b4m", "mirrored2_b1m", "mirrored2_normal",
                    "mirrored2_nocomm")
        rounds = {v: comm_rounds(mt, model, v) for v in variants}
        cells = []
        # Folders from before the sum in the update (no mirrored2_reduce
        # runs) hold mirrored2 runs that all-reduced.
        summed_in_update = bool(rounds["mirrored2_reduce"])
        for v in ("one_device", "mirrored1", "mirrored2", "mirrored2_reduce",
                  "mirrored2_nocomm"):
            if v == "mirrored2_reduce" and not summed_in_update:
                continue
            times = [r["step_ms"] for r in rounds[v].values() if timed(r)]
            if times:
                cells.append(f"{v} {median_range(times, 3, ' ms')}")
            else:
                cells.append(f"{v} {why(next(iter(rounds[v].values()), None))}")

        def paired(a, b, f):
            """f(a's step, b's step) for each round both logged."""
            return [f(rounds[a][k]["step_ms"], rounds[b][k]["step_ms"])
                    for k in rounds[a] if timed(rounds[a][k]) and timed(rounds[b].get(k))]

        notes = []
        slower = paired("mirrored1", "one_device", lambda m, o: 100 * (m / o - 1))
        notes.append("mirrored-1 vs one_device: " + (
            f"{median_range(slower, 1, '%', signed=True)} ({len(slower)} rounds)" if slower
            else "n/a (needs both)"))
        if summed_in_update:
            vs = paired("mirrored2", "mirrored2_reduce", lambda m, a: 100 * (m / a - 1))
            notes.append("summed in the update vs all-reduce: " + (
                f"{median_range(vs, 1, '%', signed=True)} ({len(vs)} rounds)" if vs
                else "n/a (needs both)"))
        exposed = [("mirrored2", "summed in the update" if summed_in_update
                     else "25 MiB buckets")]
        if summed_in_update:
            exposed.append(("mirrored2_reduce", "all-reduce, 25 MiB buckets"))
        exposed += [("mirrored2_b4m", "all-reduce, 4 MiB"),
                    ("mirrored2_b1m", "all-reduce, 1 MiB"),
                    ("mirrored2_normal", "all-reduce, 25 MiB, normal-priority streams")]
        for v, label in exposed:
            shares = paired(v, "mirrored2_nocomm", lambda m, n: 100 * (m - n) / m)
            notes.append(f"exposed communication, {label}: " + (
                f"{median_range(shares, 1, '%')} of the mirrored-2 step" if shares
                else "n/a (needs it and mirrored-2 without communication)"))
        comm_rows.append((model, cells, "; ".join(notes)))

    # 3b. A/B rows: <base>_ab_<switch>_r<K> ran <base>'s run with one
    # internal switch flipped (README, internal switches), next to
    # <base>_ab_default_r<K>; each pair of one round compared, medians.
    ab_rows = []
    ab_runs = {}  # (base, switch) -> {round: run}
    for name, r in mt.items():
        m = re.match(r"(.+)_ab_(.+)_r(\d+)$", name)
        if m:
            ab_runs.setdefault((m.group(1), m.group(2)), {})[int(m.group(3))] = r
    for (base, switch), runs in sorted(ab_runs.items()):
        if switch == "default":
            continue
        defaults = ab_runs.get((base, "default"), {})
        changes = [100 * (r["samples_per_sec"] / defaults[k]["samples_per_sec"] - 1)
                   for k, r in sorted(runs.items()) if timed(r) and timed(defaults.get(k))]
        setting = next((e.partition("=")[2] for r in runs.values() for e in r.get("env", [])),
                       switch)
        # Whether the switched path was taken: the runs' own call counts.
        calls = sorted({r["switch_calls"][switch] for r in runs.values()
                        if switch in r.get("switch_calls", {})})
        taken = f"; {'/'.join(map(str, calls))} calls" if calls else ""
        if changes:
            ab_rows.append(f"  {base}: {setting}: {median_range(changes, 1, '%', signed=True)} "
                           f"samples/s against the defaults ({len(changes)} rounds{taken})")
        else:
            first = runs[min(runs)]
            ab_rows.append(f"  {base}: {setting}: {why(first) or 'n/a (no default run to pair with)'}")

    # 4. bf16 accuracy parity: each model's final test accuracy in both.
    parity_rows = []
    for model in ("cnn", "resnet"):
        runs = {p: mt.get(f"parity_{model}_{p}") for p in ("fp32", "bf16")}
        if not any(runs.values()):
            continue
        final = {p: final_accuracy(r) for p, r in runs.items()}
        cells = []
        for p, r in runs.items():
            acc = final[p]
            if acc:
                values = " / ".join(f"{acc[w]:.4f}" for w in ("raw", "ema") if w in acc)
                cells.append(f"{p} {values} (epoch {acc['epoch']}, {r['wall_seconds']:.0f} s)")
            elif r is None:
                cells.append(f"{p} not run")
            else:  # Stopped, failed or skipped before its last evaluation.
                cells.append(f"{p} " + (why(r) or (
                    f"no final test (exit {r.get('exit_code')}, stopped: {r.get('stopped')}, "
                    f"{r.get('wall_seconds')} s)")))
        points = {w: 100 * (final["bf16"][w] - final["fp32"][w])
                  for w in ("raw", "ema") if w in final["fp32"] and w in final["bf16"]}
        verdict = [f"{w} {d:+.2f} points" for w, d in points.items()]
        if points:
            verdict.append("bf16 at most 0.3 points below fp32: "
                           + ("yes" if min(points.values()) >= -0.3 else "no"))
        parity_rows.append((model, cells, "; ".join(verdict) or "n/a (needs both runs to end)"))

    width = [max(len(str(r[i])) for r in rows) for i in range(len(rows[0]))]
    print(f"GPU: {gpu}")
    for i, r in enumerate(rows):
        print(" | ".join(str(c).ljust(w) for c, w in zip(r, width)).rstrip())
        if i == 0:
            print("-+-".join("-" * w for w in width))
    print("vs eager, vs compile: mirrortrain / PyTorch eager, mirrortrain / torch.compile "
          "(for time: PyTorch seconds / mirrortrain seconds); >1 favours mirrortrain; "
          "GEMM rows: cuBLAS / torch.matmul")
    print("PyTorch bf16: torch.autocast(bfloat16) around forward and loss, f32 weights; "
          "torch.compile: default mode, compiled in the warm-up steps")
    print("targets: CNN >=3x PyTorch eager and >1x torch.compile (fp32 and bf16); MLP >=75% "
          "(tf32) / >=70% (bf16) of the cuBLAS GEMM rate of its precision, >1x PyTorch")
    print("mirrortrain time-to-accuracy: EMA weights, from process launch; PyTorch: plain weights, "
          "from before data loading (CUDA context included); both evaluated once per epoch on the 10000 test images")
    print("\nstep time (ms), mirrored with 2 logical replicas on gpu:0 (no PyTorch twin: "
          "DDP/NCCL needs one GPU per rank); median over the rounds (range), each comparison "
          "between the runs of one round:")
    for model, cells, share in comm_rows:
        print(f"  {model}: " + "; ".join(cells))
        print(f"       {share}")
    if ab_rows:
        print("\nA/B, one internal switch flipped, against the default run of the same round "
              "(median over the rounds, range):")
        for line in ab_rows:
            print(line)
    if parity_rows:
        print("\nbf16 accuracy parity, final test accuracy raw / EMA on Fashion-MNIST (target: bf16 "
              "reaches fp32's accuracy within 0.3 points):")
        for model, cells, verdict in parity_rows:
            print(f"  {model}: " + "; ".join(cells))
            print(f"       bf16 - fp32: {verdict}")
    for e in errors:
        print(f"error: {e.get('bench') or e.get('name')}: {e['error']}")


if __name__ == "__main__":
    main()
