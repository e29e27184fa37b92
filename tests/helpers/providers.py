"""Provider APIs played locally.

``FakeProvider``, an HTTP server on 127.0.0.1 that answers the official SDK
clients with canned JSON and keeps the request bodies; ``output_message``,
an assistant message item of the Responses API.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any


class FakeProvider:
    """A provider API on ``127.0.0.1`` for the official SDK clients (offline):
    each POST is answered with the next of ``responses`` (JSON, status 200)
    and its body kept, decoded, in ``requests``. With ``check``, a request
    for which ``check(body)`` returns an error payload is answered with it
    and status 400 instead (the request is still kept; no response is
    used). ``url`` is the base URL; ``close()`` stops the server and joins
    its thread."""

    def __init__(
        self,
        responses: list[dict[str, Any]],
        check: Callable[[dict[str, Any]], dict[str, Any] | None] | None = None,
    ) -> None:
        import json
        from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

        self.responses = list(responses)
        self.requests: list[dict[str, Any]] = []
        provider = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers["Content-Length"]))
                request = json.loads(body.decode("utf-8"))
                provider.requests.append(request)
                error = None if check is None else check(request)
                payload = json.dumps(provider.responses.pop(0) if error is None else error).encode("utf-8")
                self.send_response(200 if error is None else 400)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.thread.join()


def output_message(text: str, *, item_id: str = "msg_1") -> dict[str, Any]:
    """A completed assistant ``message`` output item of the OpenAI
    Responses API whose one ``output_text`` part is ``text``."""
    return {
        "type": "message",
        "id": item_id,
        "role": "assistant",
        "status": "completed",
        "content": [{"type": "output_text", "text": text, "annotations": []}],
    }
