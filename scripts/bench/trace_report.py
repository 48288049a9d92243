#!/usr/bin/env python3
"""Summarises a GPU timeline written by scripts/bench/cupti_trace.cc.

    trace_report.py TRACE.tsv [--skip 0.5]

Looks at the steady state: with CUDA graphs (8 or more cudaGraphLaunch
calls), the time between the host's launch of the step halfway through the
run and its last launch (the host runs at most a few steps ahead, so the
GPU is then busy with steady-state steps only, not with warm-up or with
the evaluation and checkpoint after the last step); else the part of the
run after --skip of its GPU span. In it: how busy the GPU is, each stream's kernel time and how much of it
ran while another stream was busy (overlap), the kernels that take the
time, and where the host threads wait in the CUDA runtime.
"""
import argparse
import collections
import gzip


def read(path):
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rt") as f:
        for line in f:
            kind, start, end, where, name = line.rstrip("\n").split("\t", 4)
            yield kind, int(start), int(end), int(where), name


def union_length(intervals):
    total, cur_s, cur_e = 0, None, None
    for s, e in sorted(intervals):
        if cur_e is None or s > cur_e:
            if cur_e is not None:
                total += cur_e - cur_s
            cur_s, cur_e = s, e
        else:
            cur_e = max(cur_e, e)
    if cur_e is not None:
        total += cur_e - cur_s
    return total


def merged(intervals):
    out = []
    for s, e in sorted(intervals):
        if out and s <= out[-1][1]:
            out[-1][1] = max(out[-1][1], e)
        else:
            out.append([s, e])
    return out


def intersect_length(a, b):
    """Length of the intersection of two merged interval lists."""
    i = j = total = 0
    while i < len(a) and j < len(b):
        s, e = max(a[i][0], b[j][0]), min(a[i][1], b[j][1])
        if s < e:
            total += e - s
        if a[i][1] < b[j][1]:
            i += 1
        else:
            j += 1
    return total


def short(name, width=70):
    """A kernel's name without its parameter list (and without the
    "(anonymous namespace)::" that would otherwise be cut as one)."""
    if not name.startswith(("memcpy", "memset")):
        name = name.replace("(anonymous namespace)::", "").split("(")[0]
    return name if len(name) <= width else name[: width - 3] + "..."


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("trace")
    ap.add_argument("--skip", type=float, default=0.5,
                    help="share of the GPU span to skip as warm-up")
    ap.add_argument("--top", type=int, default=15)
    args = ap.parse_args()

    records = list(read(args.trace))
    gpu = [r for r in records if r[0] in "KCS"]
    if not gpu:
        raise SystemExit("no GPU records")
    first, last = min(r[1] for r in gpu), max(r[2] for r in gpu)
    launches = sorted(r[2] for r in records
                      if r[0] == "R" and r[4].startswith("cudaGraphLaunch"))
    if len(launches) >= 8:
        t0, t1 = launches[len(launches) // 2], launches[-1]
        how = (f"between graph launches {len(launches) // 2 + 1} and "
               f"{len(launches)} (host times)")
    else:
        t0, t1 = first + int((last - first) * args.skip), last
        how = f"after {args.skip:.0%} of the GPU span"
    window = t1 - t0
    # GPU activities clipped to the window.
    gpu = [(k, max(s, t0), min(e, t1), w, n) for k, s, e, w, n in gpu
           if e > t0 and s < t1]
    host = [r for r in records if r[0] == "R" and r[1] >= t0 and r[2] <= t1]
    ms = 1e-6

    print(f"window: {window * ms:.1f} ms of {(last - first) * ms:.1f} ms, {how}")
    busy = union_length([(r[1], r[2]) for r in gpu])
    print(f"GPU busy (any stream): {busy * ms:.1f} ms = {100 * busy / window:.1f}%")

    by_stream = collections.defaultdict(list)
    for r in gpu:
        by_stream[r[3]].append((r[1], r[2]))
    streams = {s: merged(v) for s, v in by_stream.items()}
    print("\nstream   busy ms   share   overlapped with other streams")
    for s, iv in sorted(streams.items(), key=lambda kv: -union_length(kv[1])):
        own = union_length(iv)
        others = merged([x for t, v in streams.items() if t != s for x in v])
        both = intersect_length(iv, others)
        print(f"{s:6d} {own * ms:9.1f} {100 * own / window:6.1f}%   "
              f"{both * ms:.1f} ms ({100 * both / max(own, 1):.0f}%)")

    totals = collections.defaultdict(lambda: [0, 0, set()])
    for kind, s, e, stream, name in gpu:
        t = totals[short(name)]
        t[0] += e - s
        t[1] += 1
        t[2].add(stream)
    print(f"\ntop {args.top} GPU activities (summed time, calls, streams)")
    for name, (t, n, st) in sorted(totals.items(), key=lambda kv: -kv[1][0])[: args.top]:
        print(f"  {t * ms:8.2f} ms {100 * t / window:5.1f}% {n:6d}x  "
              f"{','.join(map(str, sorted(st)))}  {name}")

    waits = collections.defaultdict(lambda: [0, 0])
    for _, s, e, thread, name in host:
        w = waits[(thread, name)]
        w[0] += e - s
        w[1] += 1
    print("\nhost time in CUDA runtime calls, per thread (top)")
    for (thread, name), (t, n) in sorted(waits.items(), key=lambda kv: -kv[1][0])[: args.top]:
        print(f"  thread {thread % 100000:5d}  {t * ms:8.2f} ms {100 * t / window:5.1f}% {n:6d}x  {name}")


if __name__ == "__main__":
    main()
