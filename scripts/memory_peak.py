#!/usr/bin/env python3
"""What is alive at the memory peak of a Kineto trace recorded with allocations.

brrr writes such a trace with `train.profile: {steps: N, memory: true}` (trace.json in the run
directory); PyTorch with `torch.profiler.profile(profile_memory=True)` and `export_chrome_trace`
(`bench/torch_gpt2.py --profile DIR --profile-memory`). The trace's `[memory]` events are replayed
in order: the peak is the highest `Total Allocated` of the device, and each block alive at that
moment is listed under the ops that were running on its thread when it was allocated. Blocks
allocated before the recording began are counted as one sum (the trace does not say what they
are).

  scripts/memory_peak.py runs/exp/trace.json
  scripts/memory_peak.py runs/exp/trace.json --against torch_profile/compile_accum4.json

`--against` also lists the block sizes alive at the first trace's peak that the second trace's
peak has no block of (and the reverse): where two programs that train the same model differ.
"""
import argparse
import collections
import json
import pathlib
import sys

MIB = 2**20
DEVICE_TYPES = {"cpu": 0, "cuda": 1}


class Fail(Exception):
    pass


def load_events(path):
    try:
        with open(path) as f:
            trace = json.load(f)
    except OSError as e:
        raise Fail(f"{path}: cannot read: {e.strerror}")
    except json.JSONDecodeError as e:
        raise Fail(f"{path}: not a JSON trace: {e}")
    events = trace.get("traceEvents") if isinstance(trace, dict) else None
    if not isinstance(events, list):
        raise Fail(f"{path}: no traceEvents list (not a Chrome trace)")
    return events


def memory_events(path, events, device):
    """The `[memory]` events of `device` ("cuda", "cuda:1", "cpu"), in the order they happened."""
    kind, _, index = device.partition(":")
    want_type = DEVICE_TYPES[kind]
    mem = []
    for e in events:
        if e.get("name") != "[memory]":
            continue
        a = e.get("args", {})
        if a.get("Device Type") != want_type:
            continue
        if index and a.get("Device Id") != int(index):
            continue
        mem.append(e)
    if not mem:
        any_mem = any(e.get("name") == "[memory]" for e in events)
        raise Fail(f"{path}: no [memory] events for device {device}" +
                   ("" if any_mem else " (record it with train.profile.memory: true, or "
                    "profile_memory=True in PyTorch)"))
    ids = {a.get("Device Id") for a in (e["args"] for e in mem)}
    if not index and len(ids) > 1:
        raise Fail(f"{path}: [memory] events of devices {sorted(ids)}; name one "
                   f"(--device {kind}:N)")
    # Ev Idx is the profiler's own order; ts ties are common at microsecond resolution.
    mem.sort(key=lambda e: (e["ts"], e["args"].get("Ev Idx", 0)))
    return mem


def enclosing_ops(events, mem):
    """For each memory event, the names of the ops open on its thread at that moment, outermost
    first."""
    ops = collections.defaultdict(list)
    for e in events:
        if e.get("ph") == "X" and e.get("cat") in ("cpu_op", "user_annotation", "python_function"):
            ops[(e.get("pid"), e.get("tid"))].append(e)
    for lst in ops.values():
        lst.sort(key=lambda e: (e["ts"], -e.get("dur", 0)))
    by_thread = collections.defaultdict(list)
    for i, e in enumerate(mem):
        by_thread[(e.get("pid"), e.get("tid"))].append(i)
    chains = [()] * len(mem)
    for key, indices in by_thread.items():
        lst, k, stack = ops.get(key, []), 0, []
        for i in indices:
            ts = mem[i]["ts"]
            while k < len(lst) and lst[k]["ts"] <= ts:
                op = lst[k]
                while stack and stack[-1]["ts"] + stack[-1].get("dur", 0) < op["ts"]:
                    stack.pop()
                stack.append(op)
                k += 1
            while stack and stack[-1]["ts"] + stack[-1].get("dur", 0) < ts:
                stack.pop()
            chains[i] = tuple(op["name"] for op in stack
                              if op["ts"] + op.get("dur", 0) >= ts)
    return chains


class Peak:
    """The replayed peak of one trace."""

    def __init__(self, path, device, depth):
        events = load_events(path)
        mem = memory_events(path, events, device)
        chains = enclosing_ops(events, mem)
        totals = [e["args"].get("Total Allocated", 0) for e in mem]
        peak_at = max(range(len(mem)), key=totals.__getitem__)  # the first, on ties
        live = {}  # replayed up to the peak
        for i, e in enumerate(mem[:peak_at + 1]):
            a = e["args"]
            addr, nbytes = a.get("Addr"), a.get("Bytes", 0)
            if nbytes > 0:
                live[addr] = (nbytes, chains[i][-depth:] if depth else chains[i])
            elif nbytes < 0:
                live.pop(addr, None)  # a block from before the recording ends here
        self.path, self.events = path, len(mem)
        self.total = totals[peak_at]
        self.at_ms = (mem[peak_at]["ts"] - mem[0]["ts"]) / 1e3
        self.blocks = list(live.values())
        self.before = self.total - sum(b for b, _ in self.blocks)

    def report(self, top, out):
        made = self.total - self.before
        print(f"{self.path}: peak {self.total / MIB:,.1f} MiB allocated, {self.at_ms:,.3f} ms "
              f"into the recording ({self.events:,} allocation events)", file=out)
        print(f"  {self.before / MIB:,.1f} MiB allocated before the recording began and alive "
              f"at the peak; {made / MIB:,.1f} MiB in {len(self.blocks):,} blocks made while "
              f"recording:", file=out)
        sites = collections.defaultdict(list)
        for nbytes, chain in self.blocks:
            sites[chain].append(nbytes)
        rows = sorted(sites.items(), key=lambda kv: -sum(kv[1]))
        print(f"  {'MiB':>10} {'blocks':>6}  sizes (bytes)  <-  ops open when allocated", file=out)
        for chain, sizes in rows[:top]:
            distinct = sorted(set(sizes), reverse=True)
            shown = ", ".join(f"{s:,}" for s in distinct[:3]) + (", ..." if len(distinct) > 3
                                                                  else "")
            where = " > ".join(chain) if chain else "(no op open on the thread)"
            print(f"  {sum(sizes) / MIB:>10,.2f} {len(sizes):>6}  {shown}  <-  {where}", file=out)
        if len(rows) > top:
            rest = sum(sum(s) for _, s in rows[top:])
            print(f"  {rest / MIB:>10,.2f}         ... {len(rows) - top} more sites", file=out)


def unmatched(a, b):
    """Blocks alive at a's peak, by size, beyond what b's peak holds of that size."""
    counts = collections.Counter(n for n, _ in b.blocks)
    extra = []
    for nbytes, chain in sorted(a.blocks, key=lambda x: -x[0]):
        if counts[nbytes] > 0:
            counts[nbytes] -= 1
        else:
            extra.append((nbytes, chain))
    return extra


def report_difference(a, b, top, out):
    print(f"\npeak difference: {(a.total - b.total) / MIB:+,.1f} MiB "
          f"({pathlib.Path(a.path).name} - {pathlib.Path(b.path).name}); before the "
          f"recording {(a.before - b.before) / MIB:+,.1f} MiB", file=out)
    for x, y in ((a, b), (b, a)):
        extra = unmatched(x, y)
        print(f"  alive at {pathlib.Path(x.path).name}'s peak, no block of that size at the "
              f"other's: {sum(n for n, _ in extra) / MIB:,.2f} MiB in {len(extra)} blocks",
              file=out)
        for nbytes, chain in extra[:top]:
            print(f"    {nbytes:>14,}  <-  {' > '.join(chain) or '(no op open)'}", file=out)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("trace", help="Chrome trace (JSON) with [memory] events")
    ap.add_argument("--against", metavar="TRACE", help="a second trace to compare with")
    ap.add_argument("--device", default="cuda",
                    help="cuda, cuda:N or cpu (default cuda)")
    ap.add_argument("--depth", type=int, default=3,
                    help="innermost ops named per block (0 = all; default 3)")
    ap.add_argument("--top", type=int, default=25, help="rows listed (default 25)")
    args = ap.parse_args(argv)
    if args.device.partition(":")[0] not in DEVICE_TYPES:
        ap.error(f"--device {args.device}: expected cuda, cuda:N or cpu")
    try:
        a = Peak(args.trace, args.device, args.depth)
        a.report(args.top, sys.stdout)
        if args.against:
            b = Peak(args.against, args.device, args.depth)
            print(file=sys.stdout)
            b.report(args.top, sys.stdout)
            report_difference(a, b, args.top, sys.stdout)
    except Fail as e:
        print(f"memory_peak.py: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
