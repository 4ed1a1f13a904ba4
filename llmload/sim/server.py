"""The simulated vLLM server: gevent HTTP in front of the engine model, in real time.

One scheduler greenlet drives `Engine` on an absolute schedule: it runs a step, adds the
step's modelled duration to the deadline, sleeps until the deadline, then writes the step's
SSE events itself, straight to the clients' sockets (then, with a noisy profile, sleeps out
the step's stall the same way). Lateness never accumulates (`deadline += duration`, not
`now + duration`); when the engine is idle the loop blocks until a request arrives. Each
request's greenlet parses it, sends the headers, writes what a full socket did not take,
and ends the response.

Rules:
- One socket write per SSE event, on the step that produced it, with TCP_NODELAY on every
  accepted socket, so a client can time tokens to well under a millisecond.
- A client that goes away (the socket reads EOF or a write fails) aborts its request at
  once: the engine frees its KV blocks on the spot, as vLLM does (a profile with
  `abort_on_close` false runs it on to its end instead, writing to no one).
- Request handling (parsing, tokenizing, hashing) happens in the request's greenlet, never
  inside the scheduler loop; the modelled frontend delay is then waited out by the
  scheduler, with the same precise sleep as the steps.
- No monkey-patching here: `gevent.monkey.patch_all()` belongs to the process entry point
  (`python -m llmload.sim`); this module works with or without it.
"""

from __future__ import annotations

import argparse
import bisect
import collections
import functools
import heapq
import itertools
import logging
import os
import signal
import socket
import sys
import time
from typing import Any, Callable, Iterator

import gevent
import gevent.event
import gevent.monkey
from gevent.pywsgi import WSGIHandler, WSGIServer

import llmload
from llmload.sim import apis, pooling, protocol
from llmload.sim.launcher import WATCH_PARENT_ENV
from llmload.sim.engine import Engine, EngineRequest, Frontend, SeqOutput, block_hashes
from llmload.sim.profiles import ENDPOINTS, Profile, ProfileError, describe, load_profile, parse_overrides
from llmload.sim.protocol import ApiError, GenerationRequest, StreamEncoder
from llmload.sim.tokenizer import OutputModel, Tokenizer

logger = logging.getLogger(__name__)

PRECISE_SLEEP_MARGIN_S = 0.0015
"""The last stretch before a step deadline is slept with the OS's sleep: libev's timers
round to whole milliseconds and would make every token up to ~1.2 ms late. This blocks the
hub for at most this long per step."""
LISTEN_BACKLOG = 1024
SOCKET_KEY = "llmload.sim.socket"

_clock = time.perf_counter
_os_sleep = gevent.monkey.get_original("time", "sleep")

_JSON_HEADERS = [("Content-Type", "application/json")]
_SSE_HEADERS = [("Content-Type", "text/event-stream; charset=utf-8"),
                ("Cache-Control", "no-cache")]
_METRICS_HEADERS = [("Content-Type", "text/plain; version=0.0.4; charset=utf-8")]
_STATUS = {200: "200 OK", 400: "400 Bad Request", 401: "401 Unauthorized",
           404: "404 Not Found", 405: "405 Method Not Allowed",
           500: "500 Internal Server Error"}


def sleep_until(deadline_s: float) -> None:
    """Sleep until perf_counter reaches `deadline_s`, to about 0.1 ms."""
    while True:
        remaining = deadline_s - _clock()
        if remaining <= 0:
            return
        if remaining > PRECISE_SLEEP_MARGIN_S:
            gevent.sleep(remaining - PRECISE_SLEEP_MARGIN_S)
        else:
            _os_sleep(remaining)
            return


class SimStream:
    """One generation request between its greenlet and the scheduler.

    Streamed requests get their SSE events written by the scheduler itself, one
    non-blocking `write` per event, the moment their step ends; only what the socket does not
    take at once goes to `backlog`, which the request's greenlet then writes in order.
    Non-streamed requests collect `outputs` for their greenlet.
    """

    __slots__ = ("request_id", "request", "seed", "num_output", "finish_reason", "outputs",
                 "event", "submitted", "done", "aborted", "cached_tokens", "hashes",
                 "render", "fd", "backlog", "writing")

    def __init__(self, request_id: str, request: GenerationRequest, seed: int,
                 num_output: int, finish_reason: str, hashes: list[int] | None) -> None:
        self.request_id = request_id
        self.request = request
        self.seed = seed
        self.num_output = num_output
        self.finish_reason = finish_reason
        self.hashes = hashes
        self.outputs: list[SeqOutput] = []
        self.event = gevent.event.Event()
        self.submitted = self.done = self.aborted = False
        self.cached_tokens: int | None = None
        self.render: Callable[[SimStream, SeqOutput], list[bytes]] | None = None
        """For streamed requests: an output's wire frames (set with `fd`)."""
        self.fd = -1
        self.backlog: collections.deque[bytes] = collections.deque()
        self.writing = False

    def deliver(self, output: SeqOutput) -> bool:
        """Take a step's output (scheduler side); False if the client is gone."""
        if self.render is None:
            self.outputs.append(output)
            self.event.set()
            return True
        for frame in self.render(self, output):
            if self.backlog or self.writing:
                self.backlog.append(frame)
                continue
            try:
                sent = os.write(self.fd, frame)
            except BlockingIOError:
                sent = 0
            except OSError:
                return False
            if sent < len(frame):
                self.backlog.append(frame[sent:])
        if self.backlog or output.finished:
            self.event.set()
        return True

    def take(self) -> list[SeqOutput]:
        """Wait for outputs; an empty list means the request was aborted."""
        while not self.outputs and not self.aborted:
            self.event.wait()
            self.event.clear()
        outputs, self.outputs = self.outputs, []
        return outputs


class Scheduler:
    """Drives the engine in real time and routes its outputs to the streams.

    Requests wait here until their modelled frontend delay is over (`ready_s`), exactly as
    in `llmload.sim.virtual`: an idle engine wakes `engine_wakeup_ms` after the first one is
    ready; a busy engine admits, at each step boundary, those ready by then.
    """

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self._streams: dict[str, SimStream] = {}
        self._pending: list[tuple[float, int, SimStream]] = []
        self._order = itertools.count()
        self._wake = gevent.event.Event()
        self.finished: collections.Counter[str] = collections.Counter()
        self.lateness_s = 0.0
        self.lateness_max_s = 0.0
        self.lateness_buckets = [0] * (len(protocol.LATENESS_BUCKETS_S) + 1)

    def submit(self, stream: SimStream, ready_s: float) -> None:
        """Hand a request over; the engine sees it once perf_counter passes `ready_s`."""
        heapq.heappush(self._pending, (ready_s, next(self._order), stream))
        self._wake.set()

    def abort(self, stream: SimStream) -> None:
        """The client is gone: stop the request and free its KV blocks at once (unless the
        profile runs it on, `Profile.abort_on_close`)."""
        if stream.aborted:
            return
        stream.aborted = True
        stream.event.set()
        if stream.done:
            return  # the engine is through with it already
        self.finished["abort"] += 1
        if not self.engine.profile.abort_on_close:
            return  # generated to its end for no one (`_deliver` writes nothing of it)
        if stream.submitted and self.engine.abort(stream.request_id):
            self._streams.pop(stream.request_id, None)
        logger.debug("aborted %s", stream.request_id)

    def server_stats(self) -> protocol.ServerStats:
        return protocol.ServerStats(finished=dict(self.finished),
                                    step_lateness_s=self.lateness_s,
                                    step_lateness_max_s=self.lateness_max_s,
                                    step_lateness_buckets=tuple(self.lateness_buckets))

    def run(self) -> None:
        wakeup_s = self.engine.profile.engine_wakeup_ms / 1e3
        deadline_s = _clock()
        while True:
            self._admit_ready(deadline_s)
            if not self.engine.has_work:
                self._wait_for_ready()
                # Requests sent together reach an idle engine together (see the profile).
                sleep_until(_clock() + wakeup_s)
                deadline_s = _clock()
                self._admit_ready(deadline_s)
                if not self.engine.has_work:
                    continue  # aborted meanwhile
            result = self.engine.step()
            if result.num_scheduled == 0:
                logger.error("engine has work but could schedule none of it; waiting")
                gevent.sleep(0.1)
                deadline_s = _clock()
                continue
            deadline_s += result.duration_s
            sleep_until(deadline_s)
            self._note_lateness(_clock() - deadline_s)
            self._deliver(result.outputs)
            # Let the streams write before the next step is computed.
            gevent.sleep(0)
            if result.stall_s:  # a noisy profile's stall: on the same absolute schedule
                deadline_s += result.stall_s
                sleep_until(deadline_s)

    def _admit_ready(self, now_s: float) -> None:
        pending = self._pending
        while pending and pending[0][0] <= now_s:
            stream = heapq.heappop(pending)[2]
            if stream.aborted and self.engine.profile.abort_on_close:
                continue
            request = stream.request
            self.engine.add(EngineRequest(
                request_id=stream.request_id, prompt_ids=request.prompt_ids,
                num_output_tokens=stream.num_output, cache_salt=request.cache_salt,
                block_hashes=stream.hashes, pooling=request.api == pooling.POOLING_API,
                images=request.images))
            stream.submitted = True
            self._streams[stream.request_id] = stream

    def _wait_for_ready(self) -> None:
        """Block until the earliest pending request is ready (a new one may come sooner)."""
        while True:
            pending = self._pending
            while pending and pending[0][2].aborted and self.engine.profile.abort_on_close:
                heapq.heappop(pending)
            if not pending:
                self._wake.clear()
                self._wake.wait()
                continue
            remaining_s = pending[0][0] - _clock()
            if remaining_s <= 0:
                return
            if remaining_s <= PRECISE_SLEEP_MARGIN_S:
                _os_sleep(remaining_s)
                return
            self._wake.clear()
            self._wake.wait(remaining_s - PRECISE_SLEEP_MARGIN_S)

    def _note_lateness(self, late_s: float) -> None:
        self.lateness_s += late_s
        if late_s > self.lateness_max_s:
            self.lateness_max_s = late_s
        self.lateness_buckets[bisect.bisect_left(protocol.LATENESS_BUCKETS_S, late_s)] += 1

    def _deliver(self, outputs: tuple[SeqOutput, ...]) -> None:
        streams = self._streams
        for output in outputs:
            stream = streams.get(output.request_id)
            if stream is None:
                continue  # aborted while its step ran
            if output.finished:
                del streams[output.request_id]
                stream.done = True
                if not stream.aborted:
                    self.finished[stream.finish_reason] += 1
            if stream.aborted:
                continue  # its client is gone, the request run on (`Profile.abort_on_close`)
            if not stream.deliver(output):
                self.abort(stream)  # the write failed: the client is gone


class SimApp:
    """The WSGI application: routes, validation, and the generation and pooling endpoints.

    Only the endpoints of `Profile.endpoints` are routed; any other path is a 404.
    """

    def __init__(self, profile: Profile, *, api_key: str | None = None) -> None:
        self.profile = profile
        self.api_key = api_key
        self.tokenizer = Tokenizer(profile.vocab_size, piece_chars=profile.word_piece_chars)
        self.output_model = OutputModel(vocab_size=profile.vocab_size,
                                        eos_min_tokens=profile.eos_min_tokens,
                                        eos_max_tokens=profile.eos_max_tokens)
        self.frontend = Frontend(profile)
        self.scheduler = Scheduler(Engine(profile))
        served = {
            "completions": {"/v1/completions": self._completions},
            "chat": {"/v1/chat/completions": self._chat_completions},
            "responses": {"/v1/responses": functools.partial(self._generate, chat=True, api="responses")},
            "messages": {"/v1/messages": functools.partial(self._generate, chat=True, api="messages")},
            "embeddings": dict.fromkeys(pooling.EMBEDDINGS_PATHS,
                                        functools.partial(self._pool, kind="embeddings")),
            "rerank": dict.fromkeys(pooling.RERANK_PATHS, functools.partial(self._pool, kind="rerank")),
        }
        self._routes: dict[str, tuple[str, Callable[..., Any]]] = {
            path: ("POST", handler)
            for endpoint in profile.endpoints for path, handler in served[endpoint].items()}
        self._routes |= {
            "/v1/models": ("GET", self._models),
            "/version": ("GET", self._version),
            "/health": ("GET", self._health),
            "/tokenize": ("POST", self._tokenize),
            "/detokenize": ("POST", self._detokenize),
            "/metrics": ("GET", self._metrics),
        }

    def __call__(self, environ: dict, start_response: Callable) -> Any:
        path = environ.get("PATH_INFO", "")
        try:
            if self.api_key is not None and path.startswith("/v1") \
                    and not self._authorized(environ):
                return _respond(start_response, 401, b'{"error":"Unauthorized"}')
            route = self._routes.get(path)
            if route is None:
                return _respond(start_response, 404, b'{"detail":"Not Found"}')
            if environ.get("REQUEST_METHOD") != route[0]:
                return _respond(start_response, 405, b'{"detail":"Method Not Allowed"}')
            return route[1](environ, start_response)
        except ApiError as exc:
            return _respond(start_response, exc.status, exc.body())
        except Exception:
            logger.exception("internal error on %s", path)
            body = ApiError(500, "Internal server error", err_type="InternalServerError").body()
            return _respond(start_response, 500, body)

    def _authorized(self, environ: dict) -> bool:
        return environ.get("HTTP_AUTHORIZATION", "") == f"Bearer {self.api_key}"

    # -- simple endpoints -----------------------------------------------------------------
    def _models(self, environ: dict, start_response: Callable) -> list[bytes]:
        return _respond(start_response, 200,
                        protocol.models_body(self.profile, protocol.now_created()))

    def _version(self, environ: dict, start_response: Callable) -> list[bytes]:
        return _respond(start_response, 200,
                        protocol.version_body(self.profile, llmload.__version__))

    def _health(self, environ: dict, start_response: Callable) -> list[bytes]:
        start_response("200 OK", [("Content-Length", "0")])
        return [b""]

    def _tokenize(self, environ: dict, start_response: Callable) -> list[bytes]:
        body = protocol.parse_json(read_error_body(environ))
        return _respond(start_response, 200, protocol.tokenize(
            body, profile=self.profile, tokenizer=self.tokenizer))

    def _detokenize(self, environ: dict, start_response: Callable) -> list[bytes]:
        body = protocol.parse_json(read_error_body(environ))
        return _respond(start_response, 200, protocol.detokenize(
            body, profile=self.profile, tokenizer=self.tokenizer))

    def _metrics(self, environ: dict, start_response: Callable) -> list[bytes]:
        text = protocol.metrics_text(self.profile, self.scheduler.engine.stats(),
                                     self.scheduler.server_stats())
        start_response("200 OK", _METRICS_HEADERS + [("Content-Length", str(len(text)))])
        return [text]

    # -- generation -----------------------------------------------------------------------
    def _completions(self, environ: dict, start_response: Callable) -> Any:
        return self._generate(environ, start_response, chat=False)

    def _chat_completions(self, environ: dict, start_response: Callable) -> Any:
        return self._generate(environ, start_response, chat=True)

    def _generate(self, environ: dict, start_response: Callable, *, chat: bool, api: str = "") -> Any:
        arrival_s = _clock()
        body = protocol.parse_json(read_error_body(environ))
        if api:
            request = apis.parse_typed(body, api=api, profile=self.profile, tokenizer=self.tokenizer)
        else:
            request = protocol.parse_generation(body, chat=chat, profile=self.profile,
                                                tokenizer=self.tokenizer)
        stream = self._new_stream(request)
        ready_s = self.frontend.ready_time_s(arrival_s, len(request.prompt_ids))
        sock = environ.get(SOCKET_KEY)
        if request.stream:
            write = start_response("200 OK", list(_SSE_HEADERS))
            chunked = environ.get("SERVER_PROTOCOL") != "HTTP/1.0"
            return self._sse(stream, ready_s, sock, write, chunked)
        return self._complete(stream, ready_s, sock, start_response)

    def _pool(self, environ: dict, start_response: Callable, *, kind: str) -> list[bytes]:
        """An embeddings or rerank request: each input a prefill in the engine, all submitted
        at once; the answer goes when the last one's prefill ends."""
        arrival_s = _clock()
        body = protocol.parse_json(read_error_body(environ))
        parse = pooling.parse_embeddings if kind == "embeddings" else pooling.parse_rerank
        request = parse(body, profile=self.profile, tokenizer=self.tokenizer)
        request_id = pooling.new_id(kind)
        streams = [SimStream(f"{request_id}-{i}", pooling.engine_input(ids), 0, 1, "stop", None)
                   for i, ids in enumerate(request.prompts)]
        ready_s = self.frontend.ready_time_s(arrival_s, request.num_tokens)
        watcher = self._watch(environ.get(SOCKET_KEY), *streams)
        try:
            for stream in streams:
                self.scheduler.submit(stream, ready_s)
            for stream in streams:
                if not stream.take():
                    return []  # the client is gone; nobody reads a body
        finally:
            for stream in streams:
                self._close(stream, None)
            if watcher is not None:
                watcher.kill()
        model = self.profile.served_model_name
        if kind == "embeddings":
            answer = pooling.embeddings_body(request, request_id=request_id, model=model,
                                             dimensions=self.profile.embedding_dimensions)
        else:
            answer = pooling.rerank_body(request, request_id=request_id, model=model)
        return _respond(start_response, 200, answer)

    def _new_stream(self, request: GenerationRequest) -> SimStream:
        seed = self.output_model.seed(request.prompt_ids)
        num_output, finish_reason = self.output_model.plan(
            seed, max_tokens=request.max_tokens, min_tokens=request.min_tokens,
            ignore_eos=request.ignore_eos)
        hashes = (block_hashes(request.prompt_ids, self.profile.block_size, request.cache_salt)
                  if self.profile.enable_prefix_caching else None)
        return SimStream(protocol.new_request_id(request.chat), request, seed, num_output,
                       finish_reason, hashes)

    def _sse(self, stream: SimStream, ready_s: float, sock: socket.socket | None,
             write: Callable[[bytes], None], chunked: bool) -> Iterator[bytes]:
        write(b"")  # the status line and headers go out now, before any token, as on vLLM
        api = stream.request.api
        if api:
            encoder = apis.ENCODERS[api](stream.request, request_id=stream.request_id,
                                         created=protocol.now_created(), model=self.profile.served_model_name)
        else:
            encoder = StreamEncoder(stream.request, request_id=stream.request_id,
                                    created=protocol.now_created(),
                                    model=self.profile.served_model_name,
                                    reasoning_field=self.profile.reasoning_field)
        if sock is not None:
            stream.fd = sock.fileno()
            stream.render = self._renderer(encoder, chunked)
        watcher = self._watch(sock, stream)
        try:
            self.scheduler.submit(stream, ready_s)
            if stream.render is None:
                yield from self._sse_events(stream, encoder)
            elif not self._flush_until_done(stream, sock):
                return
            if api:
                # vLLM's Responses always says its cached tokens; its Messages only with the details flag
                cached = (stream.cached_tokens or 0) if api == "responses" else self._cached_tokens(stream)
                yield encoder.closing(finish_reason=stream.finish_reason, num_completion=stream.num_output,
                                      cached_tokens=cached)
                return
            if stream.request.include_usage:
                yield encoder.usage_event(self._cached_tokens(stream))
            yield protocol.DONE_EVENT
        finally:
            self._close(stream, watcher)

    def _renderer(self, encoder: StreamEncoder,
                  chunked: bool) -> Callable[[SimStream, SeqOutput], list[bytes]]:
        def render(stream: SimStream, output: SeqOutput) -> list[bytes]:
            events = []
            if stream.request.chat and output.first_index == 0:
                events.append(encoder.role_event())
            reasoning, text = self._texts(stream, output)
            event = encoder.token_event(
                text, output.num_tokens, stream.finish_reason if output.finished else None, reasoning)
            if event:  # a typed API's output without text (the EOS token) has no event
                events.append(event)
            if not chunked:
                return events
            # The response uses chunked transfer encoding (pywsgi chose it): frame each event.
            return [b"%x\r\n%s\r\n" % (len(event), event) for event in events]
        return render

    def _flush_until_done(self, stream: SimStream, sock: socket.socket) -> bool:
        """Write what the scheduler could not, until the last token is out; False if aborted."""
        while True:
            stream.event.wait()
            stream.event.clear()
            if stream.aborted:
                return False
            stream.writing = True
            try:
                while stream.backlog:
                    sock.sendall(stream.backlog.popleft())
            finally:
                stream.writing = False
            if stream.done and not stream.backlog:
                return True

    def _sse_events(self, stream: SimStream, encoder: StreamEncoder) -> Iterator[bytes]:
        """The same events without a raw socket to write to (pywsgi writes them)."""
        finished = False
        while not finished:
            outputs = stream.take()
            if not outputs:
                return
            for output in outputs:
                if stream.request.chat and output.first_index == 0:
                    yield encoder.role_event()
                finished = output.finished
                reasoning, text = self._texts(stream, output)
                yield encoder.token_event(text, output.num_tokens,
                                          stream.finish_reason if finished else None, reasoning)

    def _complete(self, stream: SimStream, ready_s: float, sock: socket.socket | None,
                  start_response: Callable) -> list[bytes]:
        watcher = self._watch(sock, stream)
        try:
            self.scheduler.submit(stream, ready_s)
            texts: list[tuple[str, str]] = []
            finished = False
            while not finished:
                outputs = stream.take()
                if not outputs:
                    return []  # the client is gone; nobody reads a body
                texts.extend(self._texts(stream, output) for output in outputs)
                finished = outputs[-1].finished
        finally:
            self._close(stream, watcher)
        answer = "".join(text for _, text in texts)
        if stream.request.api:
            build = functools.partial(apis.typed_body, stream.request.api)
        elif stream.request.chat:
            build = functools.partial(protocol.chat_body, reasoning="".join(r for r, _ in texts),
                                      reasoning_field=self.profile.reasoning_field)
        else:
            build = protocol.completion_body
        body = build(request_id=stream.request_id, created=protocol.now_created(),
                     model=self.profile.served_model_name, text=answer,
                     finish_reason=stream.finish_reason,
                     num_prompt=len(stream.request.prompt_ids),
                     num_completion=stream.num_output,
                     cached_tokens=self._cached_tokens(stream))
        return _respond(start_response, 200, body)

    def _texts(self, stream: SimStream, output: SeqOutput) -> tuple[str, str]:
        """(thinking, answer) text of one output: a chat answer's first `think_tokens`
        tokens are thinking (`Profile.think_tokens`)."""
        if stream.cached_tokens is None:
            stream.cached_tokens = output.num_cached_tokens
        first = output.first_index
        end = first + output.num_tokens
        if stream.finish_reason == "stop" and end == stream.num_output:
            end -= 1  # the last token is EOS, which has no text
        think = self.profile.think_tokens if stream.request.chat else 0
        if first >= think:
            return "", self._words(stream, first, end)
        split = max(first, min(end, think))
        return self._words(stream, first, split), self._words(stream, split, end)

    def _words(self, stream: SimStream, first: int, end: int) -> str:
        token, word = self.output_model.token, self.tokenizer.word
        if end == first + 1:
            return " " + word(token(stream.seed, first))
        return "".join(" " + word(token(stream.seed, i)) for i in range(first, end))

    def _cached_tokens(self, stream: SimStream) -> int | None:
        if not self.profile.enable_prompt_tokens_details:
            return None
        return stream.cached_tokens or 0

    def _watch(self, sock: socket.socket | None, *streams: SimStream) -> gevent.Greenlet | None:
        if sock is None:
            return None
        return gevent.spawn(self._watch_socket, sock, streams)

    def _watch_socket(self, sock: socket.socket, streams: tuple[SimStream, ...]) -> None:
        # A client sends nothing while its response streams: EOF here means it went away.
        try:
            data = sock.recv(1, socket.MSG_PEEK)
        except OSError:
            data = b""
        if not data:
            for stream in streams:
                self.scheduler.abort(stream)

    def _close(self, stream: SimStream, watcher: gevent.Greenlet | None) -> None:
        if watcher is not None:
            watcher.kill()
        if not stream.done:
            self.scheduler.abort(stream)


def read_error_body(environ: dict) -> bytes:
    return environ["wsgi.input"].read()


def _respond(start_response: Callable, status: int, body: bytes) -> list[bytes]:
    start_response(_STATUS.get(status, f"{status} Error"),
                   _JSON_HEADERS + [("Content-Length", str(len(body)))])
    return [body]


class _Handler(WSGIHandler):
    """Hands the raw socket to the application, to watch for a client that goes away."""

    def get_environ(self) -> dict:
        environ = super().get_environ()
        environ[SOCKET_KEY] = self.socket
        return environ


class _Server(WSGIServer):
    handler_class = _Handler

    def handle(self, sock: socket.socket, address: Any) -> None:
        # Small SSE writes must leave at once, not wait for Nagle's algorithm.
        try:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        except OSError:
            pass
        super().handle(sock, address)


def _url(host: str, port: int) -> str:
    return f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"


def _stop_when_parent_goes(stop: gevent.event.Event) -> None:
    """The launcher holds our stdin open and never writes; EOF means it has gone, even if
    it was killed outright, so a simulator is never left behind."""
    from llmload.io.parentwatch import wait_for_parent_exit
    if wait_for_parent_exit():
        logger.warning("parent process gone: stopping")
        stop.set()


def serve(profile: Profile, *, host: str = "127.0.0.1", port: int = 8000,
          api_key: str | None = None, on_ready: Callable[[str], None] | None = None) -> None:
    """Serve the simulated vLLM API until SIGINT or SIGTERM.

    Prints one line to stdout once listening, `llmload sim listening on URL (profile NAME)`,
    then calls `on_ready(URL)` (with the real port when `port` is 0).
    """
    app = SimApp(profile, api_key=api_key)
    server = _Server((host, port), app, log=None, error_log=logger, backlog=LISTEN_BACKLOG)
    server.start()
    url = _url(host, server.server_port)
    scheduler = gevent.spawn(app.scheduler.run)
    stop = gevent.event.Event()
    handlers = [gevent.signal_handler(sig, stop.set) for sig in (signal.SIGINT, signal.SIGTERM)]
    watcher = gevent.spawn(_stop_when_parent_goes, stop) if os.environ.get(WATCH_PARENT_ENV) == "1" else None
    print(f"llmload sim listening on {url} (profile {profile.name})", flush=True)
    logger.info("profile %s: %s", profile.name, profile.description)
    logger.info("%s", describe(profile))
    try:
        if on_ready is not None:
            on_ready(url)
        stop.wait()
    finally:
        for handler in handlers:
            handler.cancel()
        server.stop(timeout=1)
        scheduler.kill()
        if watcher is not None:
            watcher.kill()


def build_arg_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m llmload.sim",
        description="Serve a simulated vLLM server (OpenAI-compatible API) until stopped.")
    parser.add_argument("--profile", default="rtx3090-r1-qwen14b-awq",
                        help="built-in profile name or path to a profile JSON file")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8000, help="0 picks a free port")
    parser.add_argument("--set", dest="overrides", action="append", default=[],
                        metavar="KEY=VALUE",
                        help="override a profile field (repeatable); endpoints=LIST picks what the server "
                             f"serves, of {','.join(ENDPOINTS)} (default: all)")
    parser.add_argument("--api-key", default=None,
                        help="require 'Authorization: Bearer KEY' on /v1/* (like vllm serve)")
    parser.add_argument("--log-level", default="WARNING")
    return parser


def main_cli(argv: list[str] | None = None) -> int:
    """`python -m llmload.sim`: parse arguments, load the profile, serve."""
    args = build_arg_parser().parse_args(argv)
    logging.basicConfig(level=args.log_level.upper(), stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        profile = load_profile(args.profile, parse_overrides(args.overrides))
    except ProfileError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    serve(profile, host=args.host, port=args.port, api_key=args.api_key)
    return 0
