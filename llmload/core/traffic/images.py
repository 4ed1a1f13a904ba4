"""Images sent in chat messages (`--images K`): synthetic ones, seeded, or a folder's.

A request with images sends its user message as parts, OpenAI's shape that vLLM, SGLang
and llama.cpp's server take: the text, then K `image_url` parts whose URL is a data URL
(`data:image/jpeg;base64,...`, `protocols.request_body`): no server has to fetch anything.

- Synthetic (`--image-size WxH`): a JPEG (quality 90) of coloured blocks of 16 × 16 pixels
  drawn from a seed made of the request's key and the image's place, so every user (and
  every cold request) sends images of its own, and a server's image cache or prefix cache
  serves only what the matrix means it to (a decode cell's user sends its own images again,
  warm, as it sends its own prompt again). Encoded with Pillow: about 3 ms for 512 × 512.
- A folder (`--image-dir DIR`): its .jpg, .jpeg, .png, .webp and .gif files in name order,
  request after request from the place the key chooses; the folder must be on every machine
  a worker runs on.
- A dataset entry's own (`--dataset-images`, `llmload.core.traffic.dataset`): each image a
  file (read when sent: `reference_url`) or a data URL given in the dataset.

How many tokens an image costs is the server's business (a tiling rule, a fixed count per
image): the run asks the server once before the plan (`llmload.io.imageprobe`) and plans the
context with it (the text is the context less the images' tokens).
"""

from __future__ import annotations

import base64
import hashlib
import io
import re
from functools import lru_cache
from pathlib import Path

import numpy as np

BLOCK_PX = 16
"""A synthetic image's blocks of one colour, in pixels."""
MIME = {".jpg": "image/jpeg", ".jpeg": "image/jpeg", ".png": "image/png", ".webp": "image/webp",
        ".gif": "image/gif"}
MAX_SIDE = 8192


class ImageError(ValueError):
    """A bad --image-size or --image-dir (one line for the user)."""


def parse_size(text: str) -> tuple[int, int]:
    """"512x512" → (512, 512); 16 to MAX_SIDE pixels a side."""
    m = re.fullmatch(r"\s*(\d+)\s*[x×X]\s*(\d+)\s*", str(text))
    if not m:
        raise ImageError(f"image size {text!r} must be WIDTHxHEIGHT in pixels, e.g. 512x512")
    w, h = int(m.group(1)), int(m.group(2))
    if not (16 <= w <= MAX_SIDE and 16 <= h <= MAX_SIDE):
        raise ImageError(f"image size {text!r}: each side from 16 to {MAX_SIDE} pixels")
    return w, h


def synthetic_jpeg(key: str, width: int, height: int) -> bytes:
    """A JPEG of BLOCK_PX-pixel blocks of colours drawn from `key` (the same key, the same bytes)."""
    from PIL import Image
    seed = int.from_bytes(hashlib.sha256(key.encode()).digest()[:8], "little")
    rng = np.random.default_rng(seed)
    blocks = rng.integers(0, 256, size=(-(-height // BLOCK_PX), -(-width // BLOCK_PX), 3), dtype=np.uint8)
    pixels = np.repeat(np.repeat(blocks, BLOCK_PX, axis=0), BLOCK_PX, axis=1)[:height, :width]
    out = io.BytesIO()
    Image.fromarray(pixels, "RGB").save(out, format="JPEG", quality=90)
    return out.getvalue()


def data_url(data: bytes, mime: str) -> str:
    return f"data:{mime};base64,{base64.b64encode(data).decode('ascii')}"


@lru_cache(maxsize=4)
def folder_images(folder: str) -> tuple[Path, ...]:
    """The image files of `folder`, in name order (read when sent); ImageError when none."""
    path = Path(folder)
    if not path.is_dir():
        raise ImageError(f"--image-dir {folder}: no such folder")
    files = tuple(sorted(p for p in path.iterdir() if p.suffix.lower() in MIME and p.is_file()))
    if not files:
        raise ImageError(f"--image-dir {folder}: no image file ({', '.join(sorted(MIME))}) in it")
    return files


def image_urls(key: str, count: int, *, size: str = "512x512", folder: str | None = None) -> list[str]:
    """The `count` data URLs of the request keyed `key`: synthetic of `size`, or the folder's."""
    if count <= 0:
        return []
    if folder:
        files = folder_images(folder)
        start = int.from_bytes(hashlib.sha256(key.encode()).digest()[:4], "little")
        return [data_url(f.read_bytes(), MIME[f.suffix.lower()]) for f in (files[(start + i) % len(files)]
                                                                           for i in range(count))]
    w, h = parse_size(size)
    return [data_url(synthetic_jpeg(f"{key}/image{i}", w, h), "image/jpeg") for i in range(count)]


def reference_url(ref: str) -> str:
    """A dataset's image as sent: a data URL as given, a file's bytes as one (read now)."""
    if ref.startswith("data:"):
        return ref
    path = Path(ref)
    return data_url(path.read_bytes(), MIME.get(path.suffix.lower(), "image/jpeg"))


def image_reference(value: str, base: str, where: str) -> str:
    """A dataset's image reference checked: a data URL of an image type as it is, or a path
    (relative to the dataset's folder `base`) to an image file that exists, made absolute;
    ImageError (one line naming `where`) for anything else (a web URL: llmload fetches none)."""
    if value.startswith("data:"):
        if not re.match(r"data:image/[\w.+-]+;base64,", value):
            raise ImageError(f"{where}: a data URL of an image is data:image/<type>;base64,...")
        return value
    if re.match(r"[a-z][a-z0-9+.-]*://", value, re.IGNORECASE):
        raise ImageError(f"{where}: {value[:60]}: give an image file or a data: URL (llmload fetches nothing)")
    path = Path(base, value)
    if path.suffix.lower() not in MIME:
        raise ImageError(f"{where}: {value}: not an image file ({', '.join(sorted(MIME))})")
    if not path.is_file():
        raise ImageError(f"{where}: {value}: no such file")
    return str(path.resolve())


def encoded_url(data: bytes) -> str:
    """An image's bytes (a Hugging Face dataset's) as a data URL of the format Pillow reads in them."""
    from PIL import Image
    try:
        kind = Image.open(io.BytesIO(data)).format or ""
    except Exception:  # noqa: BLE001 - any undecodable bytes: said in one line
        raise ImageError("an image of the dataset is not one Pillow reads") from None
    return data_url(data, Image.MIME.get(kind, "image/jpeg"))
