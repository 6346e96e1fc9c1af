#!/usr/bin/env python3
"""Writes every golden reference file under --out by running each tests/golden/gen_*.py.

Golden values come from PyTorch (the CPU build installed by scripts/setup.sh), never from brrr.
A generator is re-run only when its script is newer than its stamp file, so repeated test runs are fast.
"""
import argparse
import importlib.util
import os
import pathlib
import sys


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    out = pathlib.Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    here = pathlib.Path(__file__).resolve().parent
    for script in sorted(here.glob("gen_*.py")):
        stamp = out / f".{script.stem}.stamp"
        if stamp.exists() and stamp.stat().st_mtime >= script.stat().st_mtime:
            continue
        spec = importlib.util.spec_from_file_location(script.stem, script)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        print(f"golden: {script.name} -> {out}", flush=True)
        module.generate(out)
        stamp.touch()
    return 0


if __name__ == "__main__":
    sys.exit(main())
