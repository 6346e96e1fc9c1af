#!/usr/bin/env python3
"""PyTorch's side of the loader benchmark (the C++ side is bench/loader_bench.cpp).

Images/s of torch.utils.data.DataLoader over an image folder with ImageNet-style augmentation on
uint8 tensors, for several worker counts, measured end to end (batches handed to the caller, after
pin_memory when it is on):
  decode:     torchvision.io.decode_jpeg on the CPU (default), or PIL (--decoder pil: Image.open +
              convert("RGB") + pil_to_tensor), full-resolution decode either way;
  transforms: torchvision.transforms.v2 RandomResizedCrop(224, antialias=True, torchvision's
              default) + RandomHorizontalFlip, on uint8 (C, H, W) tensors; default collate.
Then, with CUDA: host-to-device GB/s of one large uint8 batch from pinned vs pageable memory
(timed with CUDA events), and the bus peak: a 1 GiB pinned copy.

Writes CSV rows `impl,metric,workers,batch,value,unit` (the schema of bench_loader_bench).

    python3 bench/torch_loader_bench.py --root data_cache/photos --workers 0,1,2,4,8,16 \
        --batch 64 --batches 50 --warmup 10 --csv torch_loader.csv
"""
import argparse
import os
import pathlib
import sys
import time

import torch

IMG_EXTS = (".jpg", ".jpeg", ".JPG", ".JPEG")


def list_images(root):
    """(path, label) pairs in ImageFolder order: sorted class folders, sorted files."""
    root = pathlib.Path(root)
    if not root.is_dir():
        sys.exit(f"torch_loader_bench.py: --root {root} is not a folder "
                 "(make it with scripts/make_photo_folder.py)")
    classes = sorted(p.name for p in root.iterdir() if p.is_dir() and not p.name.startswith("."))
    items = [(str(f), label) for label, c in enumerate(classes)
             for f in sorted((root / c).iterdir()) if f.suffix in IMG_EXTS]
    if not items:
        sys.exit(f"torch_loader_bench.py: no JPEG files under {root}/<class>/")
    return items, classes


class JpegFolder(torch.utils.data.Dataset):
    def __init__(self, items, decoder, size):
        from torchvision.transforms import v2
        self.items = items
        self.decoder = decoder
        self.transform = v2.Compose([v2.RandomResizedCrop(size, antialias=True),
                                     v2.RandomHorizontalFlip()])

    def __len__(self):
        return len(self.items)

    def __getitem__(self, i):
        path, label = self.items[i]
        if self.decoder == "torchvision":
            import torchvision.io as tio
            image = tio.decode_jpeg(tio.read_file(path), mode=tio.ImageReadMode.RGB)
        else:
            from PIL import Image
            from torchvision.transforms.v2.functional import pil_to_tensor
            with Image.open(path) as im:
                image = pil_to_tensor(im.convert("RGB"))
        return self.transform(image), label  # uint8 (3, 224, 224), int


def loader_images_per_s(dataset, workers, batch, batches, warmup, pin_memory, seed):
    """Images/s over `batches` batches after `warmup` (worker start-up is inside the warm-up)."""
    g = torch.Generator()
    g.manual_seed(seed)
    kw = dict(batch_size=batch, shuffle=True, num_workers=workers, pin_memory=pin_memory,
              drop_last=True, generator=g)
    if workers > 0:
        kw.update(prefetch_factor=2, persistent_workers=True)
    loader = torch.utils.data.DataLoader(dataset, **kw)
    need = warmup + batches
    seen = 0
    t0 = None
    while seen < need:  # several epochs when the folder is small
        for images, labels in loader:
            assert images.dtype == torch.uint8 and images.shape[0] == batch
            seen += 1
            if seen == warmup:
                t0 = time.perf_counter()
            if seen == need:
                break
    if t0 is None:  # warmup == 0
        raise SystemExit("torch_loader_bench.py: --warmup must be >= 1")
    elapsed = time.perf_counter() - t0
    del loader
    return batches * batch / elapsed


def h2d_gbps(src, dst, repeats):
    """GB/s (1e9 bytes) of dst.copy_(src, non_blocking=True), timed with CUDA events."""
    for _ in range(2):
        dst.copy_(src, non_blocking=True)
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(repeats):
        dst.copy_(src, non_blocking=True)
    end.record()
    end.synchronize()
    return src.numel() * src.element_size() * repeats / (start.elapsed_time(end) * 1e-3) / 1e9


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--root", default="data_cache/photos", help="image folder (<class>/*.jpg)")
    ap.add_argument("--workers", default="0,1,2,4,8,16", help="comma-separated worker counts")
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--batches", type=int, default=50, help="timed batches per worker count")
    ap.add_argument("--warmup", type=int, default=10, help="untimed batches first")
    ap.add_argument("--size", type=int, default=224, help="crop side")
    ap.add_argument("--decoder", choices=["torchvision", "pil"], default="torchvision")
    ap.add_argument("--pin-memory", choices=["auto", "true", "false"], default="auto",
                    help="DataLoader pin_memory (auto: when CUDA is available)")
    ap.add_argument("--copy-batch", type=int, default=256,
                    help="images in the H2D copy test (uint8 3x224x224 each)")
    ap.add_argument("--copy-repeats", type=int, default=20)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--csv", type=pathlib.Path, help="write the rows here too")
    args = ap.parse_args(argv)
    try:
        workers = [int(w) for w in args.workers.split(",") if w != ""]
    except ValueError:
        ap.error(f"--workers {args.workers!r}: expected integers like 0,1,2,4")
    if any(w < 0 for w in workers) or args.batch < 1 or args.batches < 1 or args.warmup < 1:
        ap.error("--workers >= 0, --batch >= 1, --batches >= 1, --warmup >= 1")
    try:
        import torchvision  # noqa: F401
    except ImportError as e:
        sys.exit(f"torch_loader_bench.py: needs torchvision ({e})")

    cuda = torch.cuda.is_available()
    pin = cuda if args.pin_memory == "auto" else args.pin_memory == "true"
    items, classes = list_images(args.root)
    if len(items) < args.batch:
        sys.exit(f"torch_loader_bench.py: {len(items)} images under {args.root} < batch {args.batch}")
    dataset = JpegFolder(items, args.decoder, args.size)
    print(f"# torch {torch.__version__}, {len(items)} images / {len(classes)} classes in {args.root}, "
          f"decoder {args.decoder}, pin_memory {pin}, batch {args.batch}, cpus {os.cpu_count()}",
          file=sys.stderr)
    rows = []
    impl = f"torch_{args.decoder}"
    for w in workers:
        ips = loader_images_per_s(dataset, w, args.batch, args.batches, args.warmup, pin, args.seed)
        rows.append((impl, "images_per_s", w, args.batch, ips, "images/s"))
        print(f"# workers {w:2d}: {ips:9.1f} images/s", file=sys.stderr)
    if cuda:
        shape = (args.copy_batch, 3, args.size, args.size)
        dst = torch.empty(shape, dtype=torch.uint8, device="cuda")
        pinned = torch.randint(0, 256, shape, dtype=torch.uint8).pin_memory()
        pageable = pinned.clone()
        rows.append(("torch", "h2d_pinned_gbps", 0, args.copy_batch,
                     h2d_gbps(pinned, dst, args.copy_repeats), "GB/s"))
        rows.append(("torch", "h2d_pageable_gbps", 0, args.copy_batch,
                     h2d_gbps(pageable, dst, args.copy_repeats), "GB/s"))
        big = torch.empty(1 << 30, dtype=torch.uint8).pin_memory()
        big_dst = torch.empty(1 << 30, dtype=torch.uint8, device="cuda")
        rows.append(("torch", "h2d_peak_gbps", 0, 0, h2d_gbps(big, big_dst, 5), "GB/s"))
    lines = ["impl,metric,workers,batch,value,unit"]
    lines += [f"{i},{m},{w},{b},{v:.3f},{u}" for i, m, w, b, v, u in rows]
    print("\n".join(lines))
    if args.csv:
        args.csv.write_text("\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
