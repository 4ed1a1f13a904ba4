"""How many tokens a request's images add to a chat prompt, asked of the server before the plan.

Chat requests, not streamed, max_tokens 1: the same short text alone and with each of the
run's K images (every K of --images, a request each) (synthetic ones of --image-size, or the folder's): the difference of their
usage.prompt_tokens is the images' tokens with whatever the server puts around them (vLLM:
the model's processor, e.g. Idefics3's tiles; llama.cpp: the projector's fixed count, and
the text after an image tokenized anew: 19 tokens for the first of the test suite's images,
16 for a second beside it, so K images are asked together, not one times K). The
server's count of the chat template's text is not used: llama.cpp's /apply-template renders
an image as a placeholder text that /tokenize counts as text. A server that refuses the
image (a model without vision) is refused with one line before the plan. Folder images of
other sizes may cost otherwise: each request's own count is its record's prompt_tokens.
"""

from __future__ import annotations

from collections.abc import Sequence

from llmload.core.capacity.protocols import ENDPOINT_PATHS
from llmload.core.traffic.images import image_urls
from llmload.io.endpointcheck import EndpointRefused, error_line, probe_body
from llmload.io.probe import ProbeError, ServerInfo, http_json

PROBE_TEXT = "Describe the picture."
PROBE_TIMEOUT_S = 120.0
"""A vision model's first image may take long (its encoder warms up)."""


def image_tokens(info: ServerInfo, api_key: str | None, *, counts: Sequence[int], size: str,
                 folder: str | None) -> dict[int, int]:
    """Tokens of K images in a chat prompt by the server's count, for each K of `counts`
    (above 0); EndpointRefused where the server takes no image or gives no usage."""
    try:
        prompt_tokens = {k: chat_prompt_tokens(info, api_key, PROBE_TEXT, image_urls("llmload-image-probe", k,
                                                                                     size=size, folder=folder))
                         for k in dict.fromkeys((0, *counts))}
    except EndpointRefused as exc:
        raise EndpointRefused(f"{info.model} takes no image in a chat message ({exc}); --images needs a "
                              "vision model (llama.cpp: --mmproj)") from None
    out = {}
    for k in counts:
        if k <= 0:
            continue
        added = prompt_tokens[k] - prompt_tokens[0]
        if added <= 0:
            raise EndpointRefused(f"{info.model} counted {added} tokens for {k} image(s) in a chat "
                                  "message: it does not read them (a model without vision?)")
        out[k] = added
    return out


def chat_prompt_tokens(info: ServerInfo, api_key: str | None, text: str, urls: list[str]) -> int:
    """usage.prompt_tokens of a chat request of `text` and the images of `urls` (max_tokens 1,
    not streamed); EndpointRefused (what the server said: "HTTP 400: ...") where it refuses
    the request or gives no usage, ProbeError where it fails."""
    body = probe_body(info, "chat", text, images=urls)
    try:
        status, answer = http_json(f"{info.base_url}{ENDPOINT_PATHS['chat']}", api_key=api_key, body=body,
                                   timeout_s=PROBE_TIMEOUT_S)
    except (OSError, ValueError) as exc:  # a timeout, a reset: the server's failure, not the input's
        raise ProbeError(f"{info.model} did not answer a chat request with {len(urls)} image(s) "
                         f"({type(exc).__name__}: {exc})") from None
    usage = answer.get("usage") if status == 200 and isinstance(answer, dict) else None
    if not isinstance(usage, dict) or not isinstance(usage.get("prompt_tokens"), int):
        raise EndpointRefused(f"HTTP {status}: {error_line(answer)}" if status != 200 else "no usage in its answer")
    return usage["prompt_tokens"]
