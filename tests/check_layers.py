#!/usr/bin/env python3
"""Fails when a source folder includes a header of a layer above it.

The layers, lowest first (DESIGN.md): core <- core/ops <- data, models <- trainer/optim,
trainer/observe <- trainer <- trainer/report <- trainer/cli. A file may include headers of its own
layer and of the layers listed for it below; tools/, tests/, bench/ and examples/ may include
anything. Usage: check_layers.py REPO_ROOT
"""
import pathlib
import re
import sys

# folder -> the folders (layers) whose headers it may include, itself included.
ALLOWED = {
    "core": {"core"},
    "core/ops": {"core", "core/ops"},
    "data": {"core", "data"},
    "models": {"core", "core/ops", "models"},
    "trainer/optim": {"core", "trainer/optim"},
    "trainer/observe": {"core", "trainer/observe"},
    "trainer": {"core", "core/ops", "data", "models", "trainer/optim", "trainer/observe", "trainer"},
    "trainer/report": {"core", "trainer/observe", "trainer/report"},
    "trainer/cli": {"core", "data", "models", "trainer/optim", "trainer/observe", "trainer",
                    "trainer/report", "trainer/cli"},
}
INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"')


def layer_of(path: str) -> str:
    """The deepest folder of ALLOWED that holds `path` (a repository-relative path)."""
    best = ""
    for folder in ALLOWED:
        if path.startswith(folder + "/") and len(folder) > len(best):
            best = folder
    return best


def main() -> int:
    root = pathlib.Path(sys.argv[1])
    problems = []
    for folder in ("core", "data", "models", "trainer"):
        for f in sorted((root / folder).rglob("*")):
            if f.suffix not in (".h", ".cpp", ".cu", ".cuh"):
                continue
            rel = f.relative_to(root).as_posix()
            own = layer_of(rel)
            for n, line in enumerate(f.read_text(encoding="utf-8").splitlines(), 1):
                m = INCLUDE.match(line)
                if not m or "/" not in m.group(1):
                    continue
                target = layer_of(m.group(1))
                if target and target not in ALLOWED[own]:
                    problems.append(f"{rel}:{n}: layer '{own}' includes \"{m.group(1)}\" "
                                    f"of the higher layer '{target}'")
    for p in problems:
        print(p)
    print(f"{len(problems)} layering violations" if problems else "layers: ok")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
