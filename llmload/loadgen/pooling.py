"""A user of a pooling cell (embeddings, rerank): a closed loop of one-answer requests.

Like a decode cell's user (`user.LLMUser`) it warms up once, reports ready, and from t0 sends
one request after another until t1 (the one running then is cancelled), but every request
carries inputs of its own (`inputs` of the cell's input length, keyed by the user and the
request's number): a pooling server that caches prompts must compute each one, as a
production embedding service does with new documents. Records are tagged "pooling".
"""

from __future__ import annotations

import gevent

from llmload.core.clock import now
from llmload.core.capacity.protocols import pooling_body
from llmload.loadgen.backoff import backoff_s
from llmload.loadgen.messages import CellSpec

TAG = "pooling"


def run_pooling_cell(user, client, cell: CellSpec) -> None:
    key = f"{cell.run_id}/{cell.id}/{user.user_id}"
    builder = user.cells.prompt_builder(cell)

    def body(request: str) -> bytes:
        inputs = [builder.prompt(f"{key}/{request}/{i}", cell.prompt_tokens) for i in range(cell.inputs)]
        return pooling_body(endpoint=cell.endpoint, model=cell.model, inputs=inputs)

    if cell.warmup:
        rec = client.stream(cell.path, body("warmup"), user_id=user.user_id, tag="warmup")
        user.llm.publish(rec, name=f"warm-up {cell.name}", cell_id=cell.id)
    window = user.cells.ready_for_window(cell.id, user_id=user.user_id)
    if window is None:
        return
    _, t1 = window
    user.cells.enter_window(cell.id)
    try:
        n = 0
        while now() < t1:
            n += 1
            rec = client.stream(cell.path, body(str(n)), user_id=user.user_id, tag=TAG, deadline_s=t1)
            user.llm.publish(rec, name=f"{cell.endpoint} {cell.name}", cell_id=cell.id)
            if rec.status == "error":
                gevent.sleep(min(backoff_s(rec), max(t1 - now(), 0)))
    finally:
        user.cells.leave_window(cell.id)
