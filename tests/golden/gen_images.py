"""Golden images for tests/data: JPEG/PNG files with their expected pixels, and bilinear resizes.

Writes under <out>/images/:
  *.jpg           encoded by Pillow (libjpeg-turbo); expected pixels = Pillow's own decode of them
                  (libjpeg-turbo, ISLOW IDCT, fancy upsampling: brrr decodes with the same settings).
  *.png           written by the minimal encoder below (so every colour type / bit depth / palette
                  case is exercised); expected pixels computed from the source arrays with numpy:
                  16-bit samples keep the high byte, alpha is dropped, palette indices looked up.
  expected.pt     torch.save({name: tensor}) with uint8 (H, W, C) expected pixels per file, and
                  resize_in_<k> uint8 (C, H, W) / resize_out_<k> float32 (C, h, w) pairs from
                  torch.nn.functional.interpolate(mode="bilinear", align_corners=False, antialias=False).
"""
import pathlib
import struct
import zlib

import numpy as np
import torch
from PIL import Image


def _smooth_rgb(h: int, w: int, seed: int) -> np.ndarray:
    """A photo-like image: smooth gradients plus a few soft blobs (JPEG-friendly, no noise)."""
    rng = np.random.default_rng(seed)
    y, x = np.mgrid[0:h, 0:w].astype(np.float64)
    img = np.zeros((h, w, 3))
    for c in range(3):
        img[..., c] = 128 + 60 * np.sin(x / (17 + 5 * c) + c) * np.cos(y / (23 - 4 * c))
        for _ in range(3):
            cy, cx, r = rng.uniform(0, h), rng.uniform(0, w), rng.uniform(8, max(h, w) / 4)
            img[..., c] += rng.uniform(-60, 60) * np.exp(-((y - cy) ** 2 + (x - cx) ** 2) / (2 * r * r))
    return np.clip(np.rint(img), 0, 255).astype(np.uint8)


def _png_chunk(kind: bytes, data: bytes) -> bytes:
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))


def _write_png(path: pathlib.Path, rows: np.ndarray, color_type: int, bit_depth: int,
               extra: list = (), width: int = 17) -> None:
    """rows: (H, rowbytes) uint8 of already-packed scanlines (filter type 0 is prepended)."""
    h = rows.shape[0]
    raw = b"".join(b"\x00" + rows[i].tobytes() for i in range(h))
    ihdr = struct.pack(">IIBBBBB", width, h, bit_depth, color_type, 0, 0, 0)
    data = b"\x89PNG\r\n\x1a\n" + _png_chunk(b"IHDR", ihdr)
    for kind, payload in extra:
        data += _png_chunk(kind, payload)
    data += _png_chunk(b"IDAT", zlib.compress(raw)) + _png_chunk(b"IEND", b"")
    path.write_bytes(data)


def _pngs(d: pathlib.Path, expected: dict) -> None:
    rng = np.random.default_rng(7)
    h, w = 13, 17  # odd sizes catch stride bugs
    rgb = rng.integers(0, 256, (h, w, 3), dtype=np.uint8)
    gray = rng.integers(0, 256, (h, w), dtype=np.uint8)
    alpha = rng.integers(0, 256, (h, w), dtype=np.uint8)
    g16 = rng.integers(0, 65536, (h, w), dtype=np.uint16)
    rgb16 = rng.integers(0, 65536, (h, w, 3), dtype=np.uint16)

    _write_png(d / "gray8.png", gray, 0, 8)
    expected["gray8.png"] = gray[..., None]
    _write_png(d / "gray16.png", g16.astype(">u2").view(np.uint8).reshape(h, -1), 0, 16)
    expected["gray16.png"] = (g16 >> 8).astype(np.uint8)[..., None]
    _write_png(d / "gray_alpha.png", np.stack([gray, alpha], -1).reshape(h, -1), 4, 8)
    expected["gray_alpha.png"] = gray[..., None]
    _write_png(d / "rgb8.png", rgb.reshape(h, -1), 2, 8)
    expected["rgb8.png"] = rgb
    _write_png(d / "rgba8.png", np.concatenate([rgb, alpha[..., None]], -1).reshape(h, -1), 6, 8)
    expected["rgba8.png"] = rgb
    _write_png(d / "rgb16.png", rgb16.astype(">u2").view(np.uint8).reshape(h, -1), 2, 16)
    expected["rgb16.png"] = (rgb16 >> 8).astype(np.uint8)
    palette = rng.integers(0, 256, (16, 3), dtype=np.uint8)
    index = rng.integers(0, 16, (h, w), dtype=np.uint8)
    _write_png(d / "palette.png", index, 3, 8, [(b"PLTE", palette.tobytes()),
                                                (b"tRNS", bytes(range(0, 256, 16)))])
    expected["palette.png"] = palette[index]
    bits = rng.integers(0, 2, (h, w), dtype=np.uint8)
    _write_png(d / "gray1.png", np.packbits(bits, axis=1), 0, 1)
    expected["gray1.png"] = (bits * 255).astype(np.uint8)[..., None]


def _jpegs(d: pathlib.Path, expected: dict) -> None:
    img = Image.fromarray(_smooth_rgb(48, 80, 1))
    files = {
        "rgb420.jpg": dict(quality=90, subsampling=2),
        "rgb444.jpg": dict(quality=95, subsampling=0),
        "progressive.jpg": dict(quality=85, progressive=True),
    }
    for name, kwargs in files.items():
        img.save(d / name, **kwargs)
    img.convert("L").save(d / "gray.jpg", quality=90)
    # A larger source for the region-decode tests (odd size: partial iMCUs at both edges).
    Image.fromarray(_smooth_rgb(333, 501, 2)).save(d / "large420.jpg", quality=92)
    Image.fromarray(_smooth_rgb(301, 257, 3)).save(d / "large444.jpg", quality=92, subsampling=0)
    # CMYK (Pillow writes Adobe-inverted CMYK); Pillow's RGB of it is the reference.
    img.convert("CMYK").save(d / "cmyk.jpg", quality=90)
    expected["cmyk.jpg"] = np.asarray(Image.open(d / "cmyk.jpg").convert("RGB"))
    expected["cmyk_gray.jpg"] = np.asarray(Image.open(d / "cmyk.jpg").convert("RGB").convert("L"))[..., None]
    for name in list(files) + ["gray.jpg"]:
        arr = np.asarray(Image.open(d / name))
        expected[name] = arr if arr.ndim == 3 else arr[..., None]


def _resizes(expected: dict) -> None:
    gen = torch.Generator().manual_seed(11)
    cases = [((3, 37, 53), (16, 24)), ((3, 20, 30), (41, 67)), ((1, 64, 64), (64, 31)),
             ((3, 17, 9), (17, 9)), ((3, 100, 75), (7, 11))]
    for k, (shape, size) in enumerate(cases):
        x = torch.randint(0, 256, shape, generator=gen, dtype=torch.uint8)
        y = torch.nn.functional.interpolate(x[None].float(), size=size, mode="bilinear",
                                            align_corners=False, antialias=False)[0]
        expected[f"resize_in_{k}"] = x
        expected[f"resize_out_{k}"] = y


def generate(out_dir: pathlib.Path) -> None:
    d = pathlib.Path(out_dir) / "images"
    d.mkdir(parents=True, exist_ok=True)
    expected = {}
    _pngs(d, expected)
    _jpegs(d, expected)
    tensors = {k: (torch.from_numpy(np.array(v, copy=True)) if isinstance(v, np.ndarray) else v)
               for k, v in expected.items()}
    _resizes(tensors)
    torch.save(tensors, d / "expected.pt")


if __name__ == "__main__":
    import sys
    generate(pathlib.Path(sys.argv[1] if len(sys.argv) > 1 else "golden"))
