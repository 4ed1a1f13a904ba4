"""The leaderboard's routes: `/leaderboard` (the page) and `/api/leaderboard` (its rows as JSON),
`?model=M&context=C[&concurrency=N][&hardware=H][&version=V][&endpoint=E][&images=K][&rank=cost]`.

Which board they show (`which_board`):
- `endpoint=embeddings` or `rerank`: the pooling board of that endpoint (`Store.pooling_leaderboard`),
  C an input length, runs ranked by inputs/s, with input tok/s and latency p50 and p99;
- another endpoint: the token board (`Store.leaderboard`), runs ranked by total tok/s;
- no endpoint: the token board where any run of the model measured a total tok/s at C (as
  before pooling runs were ranked); else, where its runs at C are embeddings or rerank runs,
  their board, embeddings first (each endpoint's inputs are its own: a rerank input is a
  query and document pair, so the two are never ranked together). The page says which board
  it is, and links the other endpoints measured there.

The token board ranks the cells of one image count: `images=K` (0 to 64, default 0) the cells
whose requests carried K images (their tokens in the context), so text-only runs and each
vision load are ranked apart (`boards.token_board`); the page offers the image counts measured
at C where any is above 0, and links their boards. The embeddings and rerank boards have no
images: `images` above 0 with their endpoint is a 400.

The token board ranks by total tok/s, or with `rank=cost` by cost per 1M output tokens: the
priced runs (their own price, else the hub operator's for their hardware: `llmload.hub.pricing`)
cheapest first, then the runs without a price, said "no price" (`boards.cost_ranked`). Every
row carries its pricing and cost either way. The embeddings and rerank boards rank by inputs/s
only: `rank=cost` with their endpoint is a 400, and without an endpoint it asks for the token board.
"""

from __future__ import annotations

from typing import Any, Callable

from flask import Flask, jsonify, request

from llmload.core.capacity.protocols import POOLING_ENDPOINTS
from llmload.hub import views
from llmload.hub.query import RANKS, QueryError, board_filter, count, images, rank, required, tokens
from llmload.output import formats

TOKENS, POOLING = "tokens", "pooling"
"""The two boards: ranked by total tok/s, or by inputs/s (embeddings, rerank)."""


def which_board(reads: Any, model: str, context: int, concurrency: int | None, hardware: str | None,
                version: str | None, endpoint: str | None, image_count: int = 0,
                ranked_by: str = "tok_s") -> tuple[str, str | None, list]:
    """(the board, its endpoint, its rows) for a leaderboard's query (module docstring)."""
    if image_count and endpoint in POOLING_ENDPOINTS:
        raise QueryError(f"images: the {endpoint} board ranks inputs without images; "
                         "images is a token generation board's filter")
    if ranked_by != "tok_s" and endpoint in POOLING_ENDPOINTS:
        raise QueryError(f"rank: the {endpoint} board ranks by inputs/s; rank={ranked_by} is a token "
                         "generation board's")
    if endpoint is None and not image_count and ranked_by == "tok_s" and not reads.leaderboard(model, context):
        pooled = reads.pooling_leaderboard(model, context)
        endpoint = next((e for e in POOLING_ENDPOINTS if any(row.endpoint == e for row in pooled)), None)
    if endpoint in POOLING_ENDPOINTS:
        return POOLING, endpoint, reads.pooling_leaderboard(model, context, concurrency, hardware=hardware,
                                                            engine_version=version, endpoint=endpoint)
    return TOKENS, endpoint, reads.leaderboard(model, context, concurrency, hardware=hardware,
                                               engine_version=version, endpoint=endpoint, images=image_count,
                                               rank=ranked_by)


def add_leaderboard_routes(app: Flask, reads: Any, page: Callable[..., str]) -> None:
    """The leaderboard's page and JSON on `app`, reading the store through `reads`
    (`llmload.hub.offloop.OffLoop`); `page(template, active, **context)` renders a page."""
    app.jinja_env.filters.update(whole_rate=formats.fmt_whole_rate, latency=formats.fmt_tbt_ms)

    def board_query() -> dict:
        model = required(request.args, "model", "a model (its served name or model root)")
        context = tokens(request.args, "context")
        if context is None:
            raise QueryError("context is missing: give a context in tokens (e.g. 16384 or 16K)")
        concurrency = count(request.args, "concurrency")
        hardware, version, asked = board_filter(request.args)
        image_count, ranked_by = images(request.args), rank(request.args)
        kind, endpoint, board = which_board(reads, model, context, concurrency, hardware, version, asked, image_count,
                                            ranked_by)
        return dict(model=model, context=context, concurrency=concurrency, hardware=hardware, version=version,
                    endpoint=asked, image_count=image_count, kind=kind, board_endpoint=endpoint, board=board,
                    rank=ranked_by, priced=any(row.pricing.price_per_hour for row in board if kind == TOKENS))

    @app.get("/leaderboard")
    def leaderboard_page():
        models = reads.models()
        if not request.args:
            return page("leaderboard.html", "Leaderboard", models=models, model=None, context=None,
                        concurrency=None, hardware=None, version=None, endpoint=None, image_count=0, board=None,
                        contexts=[], kind=TOKENS, board_endpoint=None, columns=[], choices=([], [], [], []),
                        cell_at=views.cell_at, other_boards=[], rank="tok_s", ranks=RANKS, priced=False)
        q = board_query()
        choices = reads.leaderboard_choices(q["model"], q["context"])
        return page("leaderboard.html", "Leaderboard", models=models, contexts=reads.contexts(q["model"]),
                    columns=views.concurrencies(q["board"]), cell_at=views.cell_at, choices=choices,
                    other_boards=views.other_boards(q["kind"], q["board_endpoint"], choices[2], q["image_count"],
                                                    choices[3]), ranks=RANKS, **q)

    @app.get("/api/leaderboard")
    def leaderboard_api():
        q = board_query()
        if q["kind"] == POOLING:
            return jsonify([views.pooling_dict(row) for row in q["board"]])
        return jsonify([views.leader_dict(row, q["rank"]) for row in q["board"]])
