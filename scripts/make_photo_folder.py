#!/usr/bin/env python3
"""Makes an image-folder dataset of real-photo-sized JPEGs from the photographs scikit-image ships.

Each class is one source photograph (skimage.data: astronaut, coffee, chelsea, rocket, ...); each
file is a random crop of it (area 20-100 %, aspect 3:4..4:3), rescaled to about 400x350 (+-15 %),
randomly mirrored, re-encoded as JPEG quality 90 by Pillow. File k of class c depends only on
(seed, c, k), so the folder is the same whatever the number of processes.

Layout: OUT/<class>/<class>_<k:05d>.jpg, and OUT/.complete holding the parameters once every file is
written (a second run with the same parameters returns at once).

    python3 scripts/make_photo_folder.py --out data_cache/photos --per-class 500 --seed 0
"""
import argparse
import json
import multiprocessing as mp
import os
import pathlib
import sys
import time

try:
    import numpy as np
    from PIL import Image
except ImportError as e:  # pragma: no cover - environment problem, reported clearly
    sys.exit(f"make_photo_folder.py: needs numpy and Pillow ({e})")

# Class name -> (skimage.data function, index into its result or None). The colour photographs
# first; the grey ones (replicated to RGB) fill up to 12 classes. All are bundled with
# scikit-image (no download).
SOURCES = [
    ("astronaut", "astronaut", None),
    ("chelsea", "chelsea", None),
    ("coffee", "coffee", None),
    ("hubble_deep_field", "hubble_deep_field", None),
    ("immunohistochemistry", "immunohistochemistry", None),
    ("motorcycle_left", "stereo_motorcycle", 0),
    ("retina", "retina", None),
    ("rocket", "rocket", None),
    ("camera", "camera", None),
    ("coins", "coins", None),
    ("moon", "moon", None),
    ("grass", "grass", None),
]
TARGET_W, TARGET_H = 400, 350

_photos = {}  # class name -> (H, W, 3) uint8; filled in the parent, inherited by forked workers


def load_sources(names):
    try:
        import skimage.data as data
    except ImportError as e:
        sys.exit(f"make_photo_folder.py: needs scikit-image (pip install scikit-image): {e}")
    table = {name: (fn, idx) for name, fn, idx in SOURCES}
    for name in names:
        fn, idx = table[name]
        img = getattr(data, fn)()
        if idx is not None:
            img = img[idx]
        img = np.asarray(img)
        if img.ndim == 2:
            img = np.stack([img] * 3, axis=-1)
        _photos[name] = np.ascontiguousarray(img[..., :3].astype(np.uint8))


def make_one(task):
    """Writes file k of class (c, name); returns its size in bytes."""
    seed, c, name, k, out_dir, quality = task
    rng = np.random.default_rng([seed, c, k])
    src = _photos[name]
    h, w = src.shape[:2]
    area = h * w * rng.uniform(0.2, 1.0)
    aspect = np.exp(rng.uniform(np.log(3 / 4), np.log(4 / 3)))
    ch = int(round(min(h, np.sqrt(area / aspect))))
    cw = int(round(min(w, np.sqrt(area * aspect))))
    top = int(rng.integers(0, h - ch + 1))
    left = int(rng.integers(0, w - cw + 1))
    out_w = int(round(TARGET_W * rng.uniform(0.85, 1.15)))
    out_h = int(round(TARGET_H * rng.uniform(0.85, 1.15)))
    flip = rng.random() < 0.5
    img = Image.fromarray(src[top:top + ch, left:left + cw])
    img = img.resize((out_w, out_h), Image.BICUBIC)
    if flip:
        img = img.transpose(Image.FLIP_LEFT_RIGHT)
    path = os.path.join(out_dir, name, f"{name}_{k:05d}.jpg")
    img.save(path, format="JPEG", quality=quality)
    return os.path.getsize(path)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", required=True, type=pathlib.Path, help="output folder")
    ap.add_argument("--per-class", type=int, default=500, help="files per class (default 500)")
    ap.add_argument("--classes", type=int, default=len(SOURCES),
                    help=f"number of classes, 1..{len(SOURCES)} (default {len(SOURCES)})")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--quality", type=int, default=90, help="JPEG quality (default 90)")
    ap.add_argument("--jobs", type=int, default=os.cpu_count() or 1, help="processes")
    ap.add_argument("--force", action="store_true", help="rewrite even if complete")
    args = ap.parse_args(argv)
    if not 1 <= args.classes <= len(SOURCES):
        ap.error(f"--classes {args.classes} must be in 1..{len(SOURCES)}")
    if args.per_class < 1:
        ap.error(f"--per-class {args.per_class} must be >= 1")

    params = {"per_class": args.per_class, "classes": args.classes, "seed": args.seed,
              "quality": args.quality, "size": [TARGET_W, TARGET_H]}
    stamp = args.out / ".complete"
    if not args.force and stamp.exists():
        try:
            if json.loads(stamp.read_text()) == params:
                print(f"{args.out}: already complete ({params})")
                return 0
        except ValueError:
            pass
    names = [s[0] for s in SOURCES[:args.classes]]
    t0 = time.time()
    load_sources(names)
    if stamp.exists():
        stamp.unlink()
    for name in names:
        (args.out / name).mkdir(parents=True, exist_ok=True)
    tasks = [(args.seed, c, name, k, str(args.out), args.quality)
             for c, name in enumerate(names) for k in range(args.per_class)]
    ctx = mp.get_context("fork")
    with ctx.Pool(max(1, args.jobs)) as pool:
        total = sum(pool.imap_unordered(make_one, tasks, chunksize=32))
    stamp.write_text(json.dumps(params))
    print(f"{args.out}: {len(tasks)} JPEGs, {len(names)} classes, "
          f"{total / len(tasks) / 1024:.1f} KiB mean, {time.time() - t0:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
