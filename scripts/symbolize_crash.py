#!/usr/bin/env python3
"""Names the addresses of a crash report printed by tests/test_support.cpp (pc, the words at the
top of the stack, the stack frames), using the report's own /proc/self/maps and addr2line.

    python3 scripts/symbolize_crash.py crash.txt
"""
import re
import shutil
import subprocess
import sys


def main(path):
    text = open(path, errors="replace").read()
    maps = []
    for line in text.split("maps:\n", 1)[-1].splitlines():
        m = re.match(r"([0-9a-f]+)-([0-9a-f]+) (\S+) ([0-9a-f]+) \S+ \d+\s+(/\S+)", line)
        if m and "x" in m.group(3):
            maps.append((int(m.group(1), 16), int(m.group(2), 16), int(m.group(4), 16), m.group(5)))
    head = text.split("maps:\n", 1)[0]
    addresses = [int(a, 16) for a in re.findall(r"(?:pc: |^  |\[)0x([0-9a-f]+)", head, re.M)]
    if not shutil.which("addr2line"):
        print("symbolize_crash.py: no addr2line")
        return 0
    for addr in addresses:
        for lo, hi, off, module in maps:
            if lo <= addr < hi:
                rel = addr - lo + off
                name = subprocess.run(["addr2line", "-Cfipe", module, hex(rel)], capture_output=True,
                                      text=True).stdout.strip()
                print(f"0x{addr:x} {module}+0x{rel:x}: {name}")
                break
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
