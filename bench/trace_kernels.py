#!/usr/bin/env python3
"""GPU kernel time by kernel name from Chrome/Perfetto traces (Kineto, as written by brrr's
`train.profile` and by torch.profiler), side by side for several traces.

For each trace: the summed duration of every GPU kernel and memcpy/memset, divided by the number
of profiled steps, grouped by a shortened kernel name. With two or more traces the table shows
each one's ms per step and the difference to the first, largest differences first.

    python3 bench/trace_kernels.py --steps 3 torch=eager.json brrr=runs/x/trace.json [--top 40]
"""
import argparse
import collections
import json
import pathlib
import re
import sys


def short_name(name):
    """Kernel names without template arguments, parameter lists and namespaces."""
    base = re.sub(r"<.*", "", name)
    base = re.sub(r"\(.*", "", base)
    base = base.replace("void ", "").strip()
    base = base.split("::")[-1] if "::" in base and not base.startswith("at::") else base
    return base[:90] or name[:90]


def kernel_times(path):
    data = json.loads(pathlib.Path(path).read_text())
    events = data["traceEvents"] if isinstance(data, dict) else data
    totals = collections.Counter()
    counts = collections.Counter()
    spans = []
    for e in events:
        if e.get("ph") != "X":
            continue
        cat = str(e.get("cat", "")).lower()
        if cat not in ("kernel", "gpu_memcpy", "gpu_memset"):
            continue
        name = short_name(e.get("name", "?")) if cat == "kernel" else f"[{cat}] {e.get('name', '')}"[:90]
        dur = float(e.get("dur", 0.0)) / 1e3  # us -> ms
        totals[name] += dur
        counts[name] += 1
        spans.append((float(e["ts"]), float(e["ts"]) + float(e.get("dur", 0.0))))
    wall = (max(s[1] for s in spans) - min(s[0] for s in spans)) / 1e3 if spans else 0.0
    return totals, counts, wall


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("traces", nargs="+", help="label=path.json")
    ap.add_argument("--steps", type=int, default=1, help="profiled steps in each trace")
    ap.add_argument("--top", type=int, default=40)
    args = ap.parse_args(argv)
    labelled = []
    for t in args.traces:
        label, sep, path = t.partition("=")
        if not sep:
            ap.error(f"{t!r}: expected label=path")
        if not pathlib.Path(path).is_file():
            sys.exit(f"trace_kernels.py: {path} not found")
        labelled.append((label, *kernel_times(path)))
    names = set()
    for _, totals, _, _ in labelled:
        names |= set(totals)
    first = labelled[0][1]

    def delta(n):
        return max(abs(t[n] - first[n]) for _, t, _, _ in labelled)

    order = sorted(names, key=lambda n: (-delta(n), -first[n])) if len(labelled) > 1 else \
        sorted(names, key=lambda n: -first[n])
    head = "".join(f" | {lab} ms/step (calls)" for lab, *_ in labelled)
    print(f"| kernel{head} |")
    print("|---" + "|---:" * len(labelled) + "|")
    s = args.steps
    for n in order[:args.top]:
        cells = "".join(f" | {t[n] / s:.3f} ({c[n] // s if c[n] % s == 0 else c[n] / s:g})"
                        for _, t, c, _ in labelled)
        print(f"| {n}{cells} |")
    sums = "".join(f" | **{sum(t.values()) / s:.3f}** ({sum(c.values()) / s:g})" for _, t, c, _ in labelled)
    print(f"| **all GPU work**{sums} |")
    walls = "".join(f" | {w / s:.3f} |" for _, _, _, w in labelled).replace("||", "|")
    print(f"| first-to-last GPU span{walls}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
