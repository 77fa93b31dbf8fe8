"""A client that sends again before the wait its 429 told it is not read again until that wait is over
(memoryhub/gunicorn_worker.py): its next request waits in the socket buffer, holding no thread, while the
other clients are served; past a share of the worker's connections a held one is closed instead."""

import socket

import pytest

from memoryhub.gunicorn_worker import HOLD_ENVIRON_KEY
from memoryhub.ratelimit import Rate
from tests.reliability.test_load_server import start_gunicorn

HOLD_SECONDS = 4


def _send(sock, token, path="/api/v1/search", body=b'{"query": "spare key"}'):
    method = "POST" if body else "GET"
    head = f"{method} {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: {len(body)}\r\n"
    if token:
        head += f"Authorization: Bearer {token}\r\n"
    sock.sendall(head.encode() + b"\r\n" + body)


def _answer(sock, timeout):
    """The status of the next response on the connection; None when none came within `timeout` seconds,
    0 when the server closed (or reset) the connection."""
    sock.settimeout(timeout)
    data = b""
    try:
        while b"\r\n\r\n" not in data:
            chunk = sock.recv(65536)
            if not chunk:
                return 0
            data += chunk
        head, _, body = data.partition(b"\r\n\r\n")
        lengths = [int(line.split(b":")[1]) for line in head.split(b"\r\n") if line.lower().startswith(b"content-length:")]
        done = (lambda: len(body) >= lengths[0]) if lengths else (lambda: body.endswith(b"0\r\n\r\n"))  # else chunked
        while not done():
            body += sock.recv(65536)
    except TimeoutError:
        return None
    except ConnectionResetError:
        return 0
    return int(head.split(b" ")[1])


def _request(url, token, **kwargs):
    host, port = url.removeprefix("http://").split(":")
    sock = socket.create_connection((host, int(port)), timeout=60)
    _send(sock, token, **kwargs)
    return sock


@pytest.fixture
def limited_server(tmp_path):
    """One gunicorn worker with one thread and four connections, a search rate of 1 a minute."""
    process, url = start_gunicorn(
        tmp_path, "--threads", "1", "--worker-connections", "4",
        MEMORYHUB_WEB_WORKERS=1, MEMORYHUB_RATE_LIMIT_SEARCH="1/min", MEMORYHUB_RATE_LIMIT_HOLD_SECONDS=HOLD_SECONDS,
        MEMORYHUB_LOG_FORMAT="text",
    )
    yield url
    process.stop()


@pytest.mark.django_db(transaction=True)
def test_a_connection_that_ignores_its_wait_is_read_again_only_when_the_hold_is_over(alice, bob, limited_server):
    url = limited_server
    flood = _request(url, alice.raw_token)
    assert _answer(flood, 60) == 200
    _send(flood, alice.raw_token)
    assert _answer(flood, 60) == 429  # the limiter: told to wait a minute
    _send(flood, alice.raw_token)
    assert _answer(flood, 60) == 429  # sent before the wait was over: refused at once, and held from now on

    _send(flood, alice.raw_token)
    assert _answer(flood, 1.5) is None  # not read: on gthread this was another 429 within milliseconds

    # The held connection has no thread: the worker's only thread serves another tenant meanwhile.
    other = _request(url, bob.raw_token)
    assert _answer(other, 60) == 200

    assert _answer(flood, 60) == 429  # read once the hold is over, and refused again
    flood.close()
    other.close()


@pytest.mark.django_db(transaction=True)
def test_past_its_share_of_the_connections_a_refused_connection_is_closed_instead(alice, limited_server):
    url = limited_server
    first = _request(url, alice.raw_token)
    assert _answer(first, 60) == 200
    _send(first, alice.raw_token)
    assert _answer(first, 60) == 429
    _send(first, alice.raw_token)
    assert _answer(first, 60) == 429  # held: one of four connections, the share a worker holds

    second = _request(url, alice.raw_token)
    assert _answer(second, 60) == 429
    try:
        _send(second, alice.raw_token)
    except OSError:
        pass  # closed already
    assert _answer(second, 60) == 0  # closed rather than held (the held share is taken): on gthread, a 429
    first.close()
    second.close()


@pytest.mark.django_db
@pytest.mark.usefixtures("own_rate_limits")
def test_only_a_request_sent_before_its_told_wait_is_marked_for_holding(alice, settings):
    settings.MEMORYHUB_RATE_LIMITS = {**settings.MEMORYHUB_RATE_LIMITS, "search": Rate(1, 60)}
    settings.MEMORYHUB_RATE_LIMIT_HOLD_SECONDS = 3

    def search():
        return alice.client.post("/api/v1/search", {"query": "spare key"}, format="json")

    answers = [search() for _ in range(3)]
    assert [a.status_code for a in answers] == [200, 429, 429]
    marks = [a.wsgi_request.META.get(HOLD_ENVIRON_KEY) for a in answers]
    assert marks[:2] == [None, None]  # served, and refused by the limiter: the client has ignored nothing yet
    assert marks[2] == 3  # came back before its told wait (a minute): held for the setting's 3 s

    settings.MEMORYHUB_RATE_LIMIT_HOLD_SECONDS = 0
    again = search()
    assert again.status_code == 429 and HOLD_ENVIRON_KEY not in again.wsgi_request.META


@pytest.fixture
def long_hold_server(tmp_path):
    """As limited_server, with holds as long as the limiter's minute, so that a held connection cannot pass
    for a served one on a slow machine."""
    process, url = start_gunicorn(
        tmp_path, "--threads", "1", "--worker-connections", "4",
        MEMORYHUB_WEB_WORKERS=1, MEMORYHUB_RATE_LIMIT_SEARCH="1/min", MEMORYHUB_RATE_LIMIT_HOLD_SECONDS=60,
        MEMORYHUB_LOG_FORMAT="text",
    )
    yield url
    process.stop()


@pytest.mark.django_db(transaction=True)
def test_a_connection_several_tokens_share_is_never_held(alice, bob, long_hold_server):
    # One keep-alive connection carrying two agents' requests (a host with one HTTP session, a pooling proxy).
    shared = _request(long_hold_server, bob.raw_token)
    assert _answer(shared, 60) == 200
    _send(shared, alice.raw_token)
    assert _answer(shared, 60) == 200
    _send(shared, alice.raw_token)
    assert _answer(shared, 60) == 429  # the limiter: alice is told to wait a minute
    _send(shared, alice.raw_token)
    assert _answer(shared, 60) == 429  # alice ignored her wait: a connection of hers alone is held here

    # bob's next request on the same connection is read and answered, not left unread for alice's minute.
    _send(shared, bob.raw_token, path="/api/v1/files", body=b"")
    assert _answer(shared, 30) == 200
    shared.close()


@pytest.mark.django_db(transaction=True)
def test_a_connection_of_one_token_is_held_for_the_whole_wait(alice, long_hold_server):
    # The control of the test above: the same requests from alice alone, and her connection is held.
    flood = _request(long_hold_server, alice.raw_token)
    assert _answer(flood, 60) == 200
    _send(flood, alice.raw_token)
    assert _answer(flood, 60) == 429
    _send(flood, alice.raw_token)
    assert _answer(flood, 60) == 429

    _send(flood, alice.raw_token, path="/api/v1/files", body=b"")
    assert _answer(flood, 30) is None  # still held, well inside the minute
    flood.close()
