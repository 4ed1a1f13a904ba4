"""Images in the twin's matrix (`llmload predict --images K --image-size WxH`): what K images
cost by the profile's rule, and the prompt ids that carry them.

Rules:
- Tokens: an image of W × H pixels costs what the profile's simulated server counts for it
  (`llmload.sim.images.tiles_and_tokens`: its tiles × image_tile_tokens + its markers), and
  K images K times that: what that server answers to the run's image probe
  (`llmload.io.imageprobe`), so the plan is the run's against it.
- Prompt: a cell of context C with K images is C tokens, as the run sends it: text ids, then
  the K images' ids, each an `ImageSpan` (its tiles: the vision encoder's cost, the engine's
  rule). The twin models ids, not a chat template: the run's text is fitted to the server's
  count of the chat prompt, role and assistant tokens included, so the total is the same.
- Ids, and so the prefix cache: an image's ids are the simulator's shape (two marker ids
  around tile ids drawn from a hash), drawn from the prompt's nonce and the image's place. A
  user sends its own prompt and images again (warm: prefix-cache hits, an image wholly in
  the hit costs no encoder time), a cold prefill its own.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from llmload.core.traffic.images import parse_size
from llmload.sim.calibration import unique_prompt
from llmload.sim.engine import ImageSpan
from llmload.sim.images import END_MARKER, START_MARKER, marker_id, tile_ids, tiles_and_tokens
from llmload.sim.profiles import Profile


@dataclass(frozen=True, slots=True, kw_only=True)
class ImageCost:
    """One image of the run's size, by the profile's rule."""

    tiles: int
    tokens: int
    """Prompt tokens: the tiles' and the markers'."""


def image_cost(profile: Profile, size: str) -> ImageCost:
    """An image of `size` ("WxH"; ImageError for a bad one) on the profile's server."""
    tiles, tokens = tiles_and_tokens(profile, *parse_size(size))
    return ImageCost(tiles=tiles, tokens=tokens)


def image_tokens(profile: Profile, counts: Sequence[int], size: str) -> dict[int, int]:
    """{K: tokens of K images} for each K above 0: the run's probe's answer
    (`llmload.io.imageprobe.image_tokens`) from the profile's server."""
    each = image_cost(profile, size).tokens
    return {k: k * each for k in counts if k > 0}


def short_contexts(tokens: Mapping[int, int], contexts: Sequence[int]) -> str | None:
    """Why the contexts cannot carry the most images and a word of text (the run's refusal,
    `llmload.matrix.runmatrix`), or None."""
    if not tokens:
        return None
    most, most_tokens = max(tokens.items())
    short = sorted({c for c in contexts if 0 < c <= most_tokens})
    if not short:
        return None
    return (f"--contexts {', '.join(map(str, short))}: not above the {most} images' {most_tokens:,} tokens; "
            "give longer contexts (or 0: the images and a word)")


def prompt_ids(profile: Profile, nonce: int, prompt_tokens: int, *, images: int = 0,
               cost: ImageCost | None = None) -> tuple[list[int], tuple[ImageSpan, ...]]:
    """A prompt of `prompt_tokens` ids unique to `nonce` (`unique_prompt`) and where its
    images lie: without images, the text alone (no span); with K, the text the images leave
    (at least one id), then the K images' ids."""
    if not images or cost is None:
        return unique_prompt(profile, nonce, prompt_tokens), ()
    ids = unique_prompt(profile, nonce, max(prompt_tokens - images * cost.tokens, 1))
    vocab = profile.vocab_size
    before = (profile.image_marker_tokens + 1) // 2
    after = profile.image_marker_tokens - before
    spans = []
    for place in range(images):
        spans.append(ImageSpan(start=len(ids), num_tokens=cost.tokens, tiles=cost.tiles))
        ids += ([marker_id(START_MARKER, vocab)] * before
                + tile_ids(f"llmload-twin/{nonce}/{place}".encode(), cost.tiles * profile.image_tile_tokens, vocab)
                + [marker_id(END_MARKER, vocab)] * after)
    return ids, tuple(spans)
