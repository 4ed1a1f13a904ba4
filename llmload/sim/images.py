"""Images in chat messages, as the simulated vision model takes them: pure, no I/O (nothing
is fetched).

A chat message's `content` may be a list of parts, OpenAI's shape that vLLM takes for a
vision model: `{"type": "text", "text": ...}` and `{"type": "image_url", "image_url": {"url":
"data:image/jpeg;base64,..."}}` (the `image_url` may also be the URL string itself).

Rules:
- URLs: only base64 data URLs of an image type, `data:image/<subtype>;base64,<data>`. An
  http(s) URL is a 400 (vLLM would fetch it; the simulator fetches nothing); any other URL,
  a data URL of another shape, bad base64, or bytes in which Pillow finds no image are a 400
  with a one-line message (the simulator's words). Pillow reads the image's header only
  (`Image.open(...).size` is lazy): the pixels are never decoded.
- Tokens, the profile's rule (`Profile.image_tile_px`, `image_tile_tokens`,
  `image_marker_tokens`; 448, 256 and 2 by default): an image of W × H pixels is
  tiles = ⌈W / image_tile_px⌉ × ⌈H / image_tile_px⌉ and
  tokens = tiles × image_tile_tokens + image_marker_tokens. They are prompt tokens like any:
  usage.prompt_tokens, /tokenize, the context limit, the prefill's cost count them; the
  engine adds the vision encoder's time per tile (`llmload.sim.engine`).
- Place: a message's parts keep their order in the prompt (the chat template of
  `llmload.sim.tokenizer`): a text part's tokens, then an image's tokens where its part is;
  text parts next to each other are joined by a newline, as a content of text parts alone
  always was. An image's tokens are ⌈m/2⌉ start markers, its tiles' tokens, ⌊m/2⌋ end
  markers (m = image_marker_tokens).
- Ids, and so the prefix cache: the markers are two fixed vocabulary ids; the tiles' tokens
  are regular ids drawn from the SHA-256 of the image's bytes. The prefix cache hashes blocks
  of token ids (`llmload.sim.engine.block_hashes`), so the same image in the same place of
  the same prompt is a hit and another image is not. vLLM gets the same effect otherwise:
  its placeholder ids are the same for every image, and it adds a hash of the image to the
  hash of each block that holds its placeholders. vLLM hashes the decoded image, the
  simulator its encoded bytes: the same picture sent as the same bytes (as llmload sends
  its images again) hits on both.
- A profile without vision (`Profile.vision` false): an image part is a 400
  "<served_model_name> is not a multimodal model", the ValueError of vLLM's
  `MultiModalRegistry.create_processor` (vllm/multimodal/registry.py) for a text-only
  model, in the body of the simulator's other 400s.
- Callers that take no image (the embeddings' `messages`) pass no profile: an image part is
  then a 400.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import io
import math
import struct
import zlib
from dataclasses import dataclass
from typing import Any

from llmload.sim.profiles import Profile
from llmload.sim.tokenizer import NUM_SPECIAL, Tokenizer

START_MARKER = b"<img>"
END_MARKER = b"</img>"
"""The marker tokens are the regular ids these names hash to (`marker_id`)."""


class ImageError(ValueError):
    """An image part refused: a 400 whose message is one line (`llmload.sim.protocol` answers
    it in vLLM's error body, with `param`)."""

    def __init__(self, message: str, param: str | None = "messages") -> None:
        super().__init__(message)
        self.param = param


@dataclass(frozen=True, slots=True)
class ImagePart:
    """One decoded image part: its size, tiles and the token ids it adds to the prompt."""

    width: int
    height: int
    tiles: int
    ids: list[int]


def tiles_and_tokens(profile: Profile, width: int, height: int) -> tuple[int, int]:
    """(tiles, prompt tokens) of an image of `width` × `height` pixels, by the profile's rule."""
    side = profile.image_tile_px
    tiles = math.ceil(width / side) * math.ceil(height / side)
    return tiles, tiles * profile.image_tile_tokens + profile.image_marker_tokens


def marker_id(name: bytes, vocab_size: int) -> int:
    return NUM_SPECIAL + zlib.crc32(name) % (vocab_size - NUM_SPECIAL)


def tile_ids(data: bytes, count: int, vocab_size: int) -> list[int]:
    """`count` regular ids drawn from the SHA-256 of `data` (a SHAKE-128 stream of it)."""
    if count == 0:
        return []
    stream = hashlib.shake_128(hashlib.sha256(data).digest()).digest(4 * count)
    regular = vocab_size - NUM_SPECIAL
    return [NUM_SPECIAL + x % regular for x in struct.unpack(f"<{count}I", stream)]


def content_segments(content: Any, *, profile: Profile | None, tokenizer: Tokenizer,
                     first_index: int = 0) -> tuple[list[str | list[int]], list[ImagePart]]:
    """A message's content as the chat template's segments (texts, and each image's ids in
    its place), with its images in order; ImageError for what the simulator refuses. Images
    are numbered in messages from `first_index` (the request's images before this message)."""
    if content is None:
        return [""], []
    if isinstance(content, str):
        return [content], []
    if not isinstance(content, list):
        raise ImageError("message content must be a string or a list of parts")
    segments: list[str | list[int]] = []
    texts: list[str] = []
    images: list[ImagePart] = []
    for part in content:
        kind = part.get("type") if isinstance(part, dict) else None
        if kind == "text":
            texts.append(str(part.get("text", "")))
            continue
        if kind != "image_url":
            raise ImageError("The simulator accepts text and image_url content parts only.")
        if profile is None:
            raise ImageError("Image parts are taken by generation requests and /tokenize only.")
        if not profile.vision:
            raise ImageError(f"{profile.served_model_name} is not a multimodal model", param=None)
        if texts:
            segments.append("\n".join(texts))
            texts = []
        image = decode_image(_url(part.get("image_url")), profile=profile, tokenizer=tokenizer,
                             index=first_index + len(images))
        images.append(image)
        segments.append(image.ids)
    if texts or not segments:
        segments.append("\n".join(texts))
    return segments, images


def _url(image_url: Any) -> str:
    if isinstance(image_url, dict):
        image_url = image_url.get("url")
    if not isinstance(image_url, str):
        raise ImageError("an image_url part needs image_url.url, a string")
    return image_url


def decode_image(url: str, *, profile: Profile, tokenizer: Tokenizer, index: int = 0) -> ImagePart:
    """The image of a data URL, sized by Pillow from its header, with its prompt token ids."""
    scheme = url.split(":", 1)[0].lower() if ":" in url else ""
    if scheme in ("http", "https"):
        raise ImageError(f"image {index}: the simulator fetches no remote image; send it as a data URL "
                         "(data:image/jpeg;base64,...)")
    head, comma, payload = url.partition(",")
    if scheme != "data" or not comma or not head[5:].lower().startswith("image/") \
            or not head.lower().endswith(";base64"):
        raise ImageError(f"image {index}: not a base64 data URL of an image "
                         "(data:image/<type>;base64,<data>)")
    try:
        data = base64.b64decode(payload, validate=True)
    except (binascii.Error, ValueError):
        raise ImageError(f"image {index}: the data URL's base64 is malformed") from None
    width, height = _size(data, index)
    tiles, tokens = tiles_and_tokens(profile, width, height)
    if tokens > profile.max_model_len:
        raise ImageError(f"image {index} ({width}x{height} pixels) is {tokens} tokens, over the model's "
                         f"maximum context length of {profile.max_model_len} tokens")
    vocab = tokenizer.vocab_size
    before = (profile.image_marker_tokens + 1) // 2
    after = profile.image_marker_tokens - before
    ids = ([marker_id(START_MARKER, vocab)] * before
           + tile_ids(data, tiles * profile.image_tile_tokens, vocab)
           + [marker_id(END_MARKER, vocab)] * after)
    return ImagePart(width=width, height=height, tiles=tiles, ids=ids)


def _size(data: bytes, index: int) -> tuple[int, int]:
    # Imported on the first image: a simulator that is sent none never loads Pillow.
    from PIL import Image as PilImage
    try:
        width, height = PilImage.open(io.BytesIO(data)).size
    except Exception as exc:  # any failure of the decoder on bytes from the wire is a bad image
        raise ImageError(f"image {index}: the data is not an image Pillow can read "
                         f"({type(exc).__name__})") from None
    if width < 1 or height < 1:
        raise ImageError(f"image {index}: the image has no pixels ({width}x{height})")
    return width, height
