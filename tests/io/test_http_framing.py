"""HTTP/1.1 message framing of dshtools.io.http_request (docs/contract.md#a14; field case B39; the rule list is docs/decisions/0026-http-message-framing.md).

Each test serves one scripted response, byte for byte, from a loopback
socket thread and checks what ``http_request`` makes of it. A response
that is not close-delimited is followed by the server *keeping the
connection open* until the client closes it, so a client that reads past
the end of a message hangs (and the test times out) instead of passing by
luck.
"""

from __future__ import annotations

import http.client
import shutil
import socket
import ssl
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from dshtools import AbortController, AbortError
from dshtools import io as dio
from tests.helpers.waiting import AbortLater

KEEP_OPEN = "keep-open"  # after the response, wait for the client to close
CLOSE = "close"  # after the response, close (ends a close-delimited body)


class Scripted:
    """Accepts one connection, reads the request head (and a body of its
    ``Content-Length``), sends ``response`` and then closes or waits."""

    def __init__(self, response: bytes, after: str) -> None:
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self.sock.getsockname()[1]}/x?q=1"
        self.response = response
        self.after = after
        self.request = b""
        self.client_closed = threading.Event()
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        conn, _ = self.sock.accept()
        with conn:
            conn.settimeout(20)
            data = b""
            while b"\r\n\r\n" not in data:
                chunk = conn.recv(65536)
                if not chunk:
                    return
                data += chunk
            head, _, rest = data.partition(b"\r\n\r\n")
            length = 0
            for line in head.split(b"\r\n")[1:]:
                name, _, value = line.partition(b":")
                if name.strip().lower() == b"content-length":
                    length = int(value)
            while len(rest) < length:
                rest += conn.recv(65536)
            self.request = data
            conn.sendall(self.response)
            if self.after == CLOSE:
                return
            try:
                while conn.recv(65536):
                    pass
            except OSError:
                pass
            self.client_closed.set()

    def close(self) -> None:
        self.thread.join(20)
        self.sock.close()


@pytest.fixture
def scripted() -> Iterator[list[Scripted]]:
    servers: list[Scripted] = []
    yield servers
    for s in servers:
        s.close()


def serve(servers: list[Scripted], response: bytes, after: str = KEEP_OPEN) -> Scripted:
    s = Scripted(response, after)
    servers.append(s)
    return s


def request(server: Scripted, method: str = "GET", **kwargs: object) -> dio.HttpResponse:
    return dio.http_request(method, server.url, AbortController().signal, timeout=10, **kwargs)  # type: ignore[arg-type]


OK_HELLO = b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello"


# ------------------------------------------------------ interim responses


@pytest.mark.timeout(30)
@pytest.mark.parametrize(
    "interim",
    [
        pytest.param(b"HTTP/1.1 103 Early Hints\r\nLink: </style.css>; rel=preload; as=style\r\n\r\n", id="B39-103"),
        pytest.param(
            b"HTTP/1.1 102 Processing\r\n\r\nHTTP/1.1 103 Early Hints\r\nLink: </a.js>; rel=preload\r\n\r\n",
            id="B39-102-then-103",
        ),
        pytest.param(b"HTTP/1.1 100 Continue\r\n\r\n", id="100-unasked"),
        pytest.param(b"HTTP/1.1 199 Whatever\r\nContent-Length: 7\r\n\r\n", id="1xx-length-ignored"),
    ],
)
def test_interim_responses_are_skipped_and_the_final_one_returned(scripted: list[Scripted], interim: bytes) -> None:
    server = serve(scripted, interim + OK_HELLO)
    response = request(server)
    assert (response.status, response.body) == (200, b"hello")
    assert "Link" not in response.headers  # interim fields are not the final response's
    assert response.headers["content-length"] == "5"


@pytest.mark.timeout(30)
def test_an_unsolicited_101_is_a_protocol_error(scripted: list[Scripted]) -> None:
    server = serve(scripted, b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: h2c\r\n\r\n" + OK_HELLO)
    with pytest.raises(dio.HttpProtocolError):
        request(server)


@pytest.mark.timeout(30)
def test_101_answering_the_callers_upgrade_is_the_final_response(scripted: list[Scripted]) -> None:
    server = serve(
        scripted, b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n\x81"
    )
    response = request(server, headers={"Upgrade": "websocket", "Connection": "Upgrade"})
    assert (response.status, response.body, response.headers["upgrade"]) == (101, b"", "websocket")


# ------------------------------------------------------ bodiless responses


@pytest.mark.timeout(30)
@pytest.mark.parametrize(
    ("method", "response"),
    [
        pytest.param("HEAD", b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\n", id="HEAD-content-length"),
        pytest.param("HEAD", b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n", id="HEAD-chunked"),
        pytest.param("GET", b"HTTP/1.1 204 No Content\r\nContent-Length: 5\r\n\r\nhello", id="204-with-length"),
        pytest.param(
            "GET", b"HTTP/1.1 304 Not Modified\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello", id="304-chunked"
        ),
        pytest.param("GET", b"HTTP/1.1 304 Not Modified\r\n\r\n", id="304-no-length"),
    ],
)
def test_bodiless_responses_have_no_body_whatever_their_headers_say(
    scripted: list[Scripted], method: str, response: bytes
) -> None:
    server = serve(scripted, response)
    result = request(server, method)
    assert result.body == b""
    assert result.status in (200, 204, 304)
    assert server.client_closed.wait(5)  # returned without waiting for more bytes or a close


# ------------------------------------------------------ length determination


@pytest.mark.timeout(30)
def test_chunked_body_with_extensions_and_trailers(scripted: list[Scripted]) -> None:
    server = serve(
        scripted,
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nTrailer: X-Checksum\r\n\r\n"
        b"5;ext=1\r\nhello\r\n7\r\n, world\r\n0\r\nX-Checksum: abc\r\n\r\n",
    )
    response = request(server)
    assert response.body == b"hello, world"
    assert response.trailers == {"X-Checksum": "abc"}
    assert "X-Checksum" not in response.headers  # kept apart (RFC 9110 §6.5.1)


@pytest.mark.timeout(30)
def test_transfer_encoding_overrides_content_length(scripted: list[Scripted]) -> None:
    server = serve(
        scripted, b"HTTP/1.1 200 OK\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n"
    )
    assert request(server).body == b"hello"


@pytest.mark.timeout(30)
def test_content_length_ends_the_body_and_extra_bytes_are_dropped(scripted: list[Scripted]) -> None:
    server = serve(scripted, b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhelloGARBAGE")
    assert request(server).body == b"hello"


@pytest.mark.timeout(30)
def test_close_delimited_body_is_read_until_the_server_closes(scripted: list[Scripted]) -> None:
    server = serve(scripted, b"HTTP/1.1 200 OK\r\nConnection: close\r\n\r\nuntil the end", after=CLOSE)
    assert request(server).body == b"until the end"


# Responses the RFCs let a recipient read, each a body of b"hello", by id.
LENIENT = {
    "CL-repeated": b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\nContent-Length: 5\r\n\r\nhello",
    "CL-list": b"HTTP/1.1 200 OK\r\nContent-Length: 5, 5\r\n\r\nhello",
    "bare-LF-lines": b"HTTP/1.1 200 OK\nContent-Length: 5\n\nhello",
    "no-reason-phrase": b"HTTP/1.1 200\r\nContent-Length: 5\r\n\r\nhello",
    "TE-case": b"HTTP/1.1 200 OK\r\nTransfer-Encoding: Chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n",
}


@pytest.mark.timeout(30)
@pytest.mark.parametrize("response", LENIENT.values(), ids=LENIENT.keys())
def test_lenient_where_the_rfc_allows(scripted: list[Scripted], response: bytes) -> None:
    """Identical repeated Content-Length values are one length; bare LF
    line ends, a missing reason phrase and a transfer coding in any case
    are read as the RFCs allow."""
    server = serve(scripted, response)
    assert request(server).body == b"hello"


@pytest.mark.timeout(30)
def test_http_1_0_response_without_length_is_close_delimited(scripted: list[Scripted]) -> None:
    server = serve(scripted, b"HTTP/1.0 200 OK\r\n\r\nold school", after=CLOSE)
    response = request(server)
    assert (response.status, response.body) == (200, b"old school")


# Responses whose framing is broken, by id: (the response, what the server
# does after sending it).
BROKEN_FRAMING = {
    "CL-conflict": (b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\nContent-Length: 6\r\n\r\nhello!", KEEP_OPEN),
    "CL-list-conflict": (b"HTTP/1.1 200 OK\r\nContent-Length: 5, 6\r\n\r\nhello!", KEEP_OPEN),
    "CL-not-a-number": (b"HTTP/1.1 200 OK\r\nContent-Length: abc\r\n\r\nhello", KEEP_OPEN),
    "CL-negative": (b"HTTP/1.1 200 OK\r\nContent-Length: -1\r\n\r\nhello", KEEP_OPEN),
    "CL-signed": (b"HTTP/1.1 200 OK\r\nContent-Length: +5\r\n\r\nhello", KEEP_OPEN),
    "CL-overflow": (b"HTTP/1.1 200 OK\r\nContent-Length: 123456789012345678901234\r\n\r\nhello", KEEP_OPEN),
    "CL-body-cut-short": (b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nhello", CLOSE),
    "chunked-cut-short": (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhel", CLOSE),
    "bad-chunk-size": (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\nhello\r\n", CLOSE),
    "TE-not-chunked": (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip\r\n\r\nhello", CLOSE),
    "TE-chunked-twice": (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked, chunked\r\n\r\n0\r\n\r\n", CLOSE),
    "TE-in-HTTP/1.0": (b"HTTP/1.0 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n", CLOSE),
    "no-response": (b"", CLOSE),
    "head-cut-short": (b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n", CLOSE),
    "bad-status-code": (b"HTTP/1.1 2000 OK\r\n\r\n", CLOSE),
    "space-in-field-name": (b"HTTP/1.1 200 OK\r\nBad Name: x\r\n\r\n", CLOSE),
    "space-before-colon": (b"HTTP/1.1 200 OK\r\nName : x\r\n\r\n", CLOSE),
    "fold-at-start": (b"HTTP/1.1 200 OK\r\n Leading: x\r\nContent-Length: 0\r\n\r\n", CLOSE),
}


@pytest.mark.timeout(30)
@pytest.mark.parametrize(("response", "after"), BROKEN_FRAMING.values(), ids=BROKEN_FRAMING.keys())
def test_broken_framing_is_a_protocol_error(scripted: list[Scripted], response: bytes, after: str) -> None:
    server = serve(scripted, response, after)
    with pytest.raises(dio.HttpProtocolError):
        request(server)


@pytest.mark.timeout(30)
def test_a_body_cut_short_by_an_abort_is_the_abort_not_a_framing_error(scripted: list[Scripted]) -> None:
    # The shutdown that wakes the read ends the Content-Length body early,
    # which h11 calls a framing error: the abort is what the caller hears.
    assert issubclass(dio.HttpProtocolError, http.client.HTTPException)
    server = serve(scripted, b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nhello")
    controller = AbortController()
    later = AbortLater(controller, 0.3, "stop")
    try:
        with pytest.raises(AbortError) as info:
            dio.http_request("GET", server.url, controller.signal)
    finally:
        later.cancel()
    assert info.value.reason == "stop"
    assert server.client_closed.wait(5)


# ------------------------------------------------------ fields and the request


@pytest.mark.timeout(30)
def test_obsolete_line_folding_becomes_a_space(scripted: list[Scripted]) -> None:
    server = serve(scripted, b"HTTP/1.1 200 OK\r\nX-Folded: one\r\n  two\r\nContent-Length: 0\r\n\r\n")
    assert request(server).headers["x-folded"] == "one two"


@pytest.mark.timeout(30)
def test_request_head_carries_host_length_and_close(scripted: list[Scripted]) -> None:
    server = serve(scripted, OK_HELLO)
    request(server, "POST", body=b"abc", headers={"X-Test": "1"})
    head = server.request.split(b"\r\n\r\n")[0].decode().split("\r\n")
    fields = {line.split(":", 1)[0].lower(): line.split(":", 1)[1].strip() for line in head[1:]}
    assert head[0] == "POST /x?q=1 HTTP/1.1"
    assert fields["host"] == server.url.split("/")[2]
    assert (fields["content-length"], fields["connection"], fields["x-test"]) == ("3", "close", "1")


@pytest.mark.timeout(30)
@pytest.mark.parametrize("method", ["POST", "PUT", "PATCH"])
def test_a_method_with_content_and_no_body_says_length_zero(scripted: list[Scripted], method: str) -> None:
    server = serve(scripted, OK_HELLO)
    request(server, method)
    assert b"\r\ncontent-length: 0\r\n" in server.request.lower()


@pytest.mark.timeout(30)
def test_get_without_body_sends_no_length(scripted: list[Scripted]) -> None:
    server = serve(scripted, OK_HELLO)
    request(server)
    assert b"content-length" not in server.request.lower()


@pytest.mark.timeout(30)
def test_invalid_request_header_and_connect_are_value_errors() -> None:
    signal = AbortController().signal
    with pytest.raises(ValueError, match="invalid request"):
        dio.http_request("GET", "http://127.0.0.1:9/", signal, headers={"X-Bad": "a\r\nInjected: 1"})
    with pytest.raises(ValueError, match="both"):
        dio.http_request(
            "POST",
            "http://127.0.0.1:9/",
            signal,
            body=b"x",
            headers={"Content-Length": "1", "Transfer-Encoding": "chunked"},
        )
    with pytest.raises(ValueError, match="CONNECT"):
        dio.http_request("CONNECT", "http://127.0.0.1:9/", signal)


# ------------------------------------------------------ TLS closure


@pytest.fixture
def tls_files(tmp_path: Path) -> tuple[Path, Path]:
    if shutil.which("openssl") is None:
        pytest.skip("needs the openssl command to make a test certificate")
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]
        + ["-keyout", str(key), "-out", str(cert), "-days", "1", "-subj", "/CN=127.0.0.1"]
        + ["-addext", "subjectAltName=IP:127.0.0.1"],
        check=True,
        capture_output=True,
        timeout=30,
    )
    return cert, key


@pytest.mark.timeout(30)
@pytest.mark.parametrize("close_notify", [True, False], ids=["close_notify", "bare-FIN"])
def test_tls_close_without_close_notify_does_not_complete_a_close_delimited_body(
    tls_files: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch, close_notify: bool
) -> None:
    cert, key = tls_files
    server_ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    server_ctx.load_cert_chain(cert, key)
    make_default = ssl.create_default_context
    monkeypatch.setattr(ssl, "create_default_context", lambda: make_default(cafile=str(cert)))
    listener = socket.create_server(("127.0.0.1", 0))

    def serve_one() -> None:
        raw, _ = listener.accept()
        with server_ctx.wrap_socket(raw, server_side=True) as conn:
            data = b""
            while b"\r\n\r\n" not in data:
                data += conn.recv(65536)
            conn.sendall(b"HTTP/1.1 200 OK\r\nConnection: close\r\n\r\nall of it")
            if close_notify:
                try:
                    conn.unwrap().close()  # sends close_notify, then waits for the client's
                except (ssl.SSLError, OSError):
                    pass  # the client closed without answering it: fine here

    thread = threading.Thread(target=serve_one, daemon=True)
    thread.start()
    url = f"https://127.0.0.1:{listener.getsockname()[1]}/"
    try:
        if close_notify:
            assert dio.http_request("GET", url, AbortController().signal, timeout=10).body == b"all of it"
        else:
            with pytest.raises(dio.HttpProtocolError, match="close_notify"):
                dio.http_request("GET", url, AbortController().signal, timeout=10)
    finally:
        thread.join(10)
        listener.close()
