"""The server's write path: one write per event, and a backlog when the socket is full."""

import gevent
from gevent import socket as gsocket

from llmload.sim.engine import SeqOutput
from llmload.sim.protocol import GenerationRequest
from llmload.sim.server import SimApp, SimStream
from llmload.sim.profiles import load_profile


def _stream(num_output):
    request = GenerationRequest(chat=False, prompt_ids=[10, 11], max_tokens=num_output,
                                min_tokens=0, ignore_eos=True, cache_salt=None, stream=True,
                                include_usage=False, continuous_usage=False)
    return SimStream("cmpl-test", request, seed=1, num_output=num_output,
                   finish_reason="length", hashes=None)


def _output(i, last):
    return SeqOutput(request_id="cmpl-test", first_index=i, num_tokens=1,
                     finished=i == last, num_cached_tokens=0)


def test_events_the_socket_cannot_take_go_to_the_backlog_in_order():
    ours, peer = gsocket.socketpair()
    ours.setsockopt(gsocket.SOL_SOCKET, gsocket.SO_SNDBUF, 4096)
    count = 2000
    stream = _stream(count)
    stream.fd = ours.fileno()
    stream.render = lambda s, o: [b"event %06d\n" % o.first_index * 8]
    app = SimApp(load_profile("tiny"))
    for i in range(count):  # the scheduler's side: nobody reads meanwhile
        assert stream.deliver(_output(i, count - 1))
        if i == count - 1:
            stream.done = True
    assert stream.backlog, "the socket took everything: the backlog path was not exercised"
    received = []

    def read():
        data = b""
        while len(data) < count * 8 * 13:
            data += peer.recv(65536)
        received.append(data)

    reader = gevent.spawn(read)
    assert app._flush_until_done(stream, ours)
    reader.join(timeout=10)
    lines = received[0].split(b"\n")[:-1]
    assert [int(line.split()[1]) for line in lines[::8]] == list(range(count))
    ours.close()
    peer.close()


def test_a_failed_write_reports_the_client_gone():
    ours, peer = gsocket.socketpair()
    stream = _stream(3)
    stream.fd = ours.fileno()
    stream.render = lambda s, o: [b"x" * 100]
    peer.close()
    assert not stream.deliver(_output(0, 2))
    ours.close()
