"""How dtq reads a JSON body, through DRF (JSONParser, Request) and on the fast path (load_json).

DRF's JSON parser, refusing what it would let through but Python cannot take further:
- A string with an unpaired surrogate escape ("\\ud800") parses, but is not Unicode: encoding it
  for Redis would fail later, after part of a request had been acted on.
- Nesting past MAX_JSON_DEPTH: about a thousand levels exhaust the recursion limit in the parser,
  or a little fewer later, when the payload is written back out (after the task was queued).
- Bytes that do not decode, including an incomplete character at the very end, which DRF's
  decoding reader drops without a word.
Each is a 400 MALFORMED_JSON, like any other body that is not JSON the API can use.
"""

from __future__ import annotations

import io
import json
import re
from collections.abc import Mapping
from typing import Any

from django.conf import settings
from rest_framework import parsers, request
from rest_framework.exceptions import ParseError
from rest_framework.utils.json import strict_constant

from dtq_core.submit import MAX_JSON_DEPTH, nested_deeper_than

# A \uD800-\uDFFF escape in the raw body: the only way a surrogate gets into parsed JSON (UTF-8
# bytes cannot encode one). A pair is fine; the exact check below runs only when this matches.
_SURROGATE_ESCAPE = re.compile(rb"\\u[dD][89abcdefABCDEF]")
_LONE_SURROGATE = re.compile("[\ud800-\udfff]")


class JSONParser(parsers.JSONParser):
    strict = True  # NaN and Infinity refused, whatever REST_FRAMEWORK's STRICT_JSON says

    def parse(self, stream: Any, media_type: str | None = None, parser_context: Mapping[str, Any] | None = None) -> Any:
        encoding = (parser_context or {}).get("encoding", settings.DEFAULT_CHARSET)
        return load_json(stream.read() if stream is not None else b"", encoding)


class Request(request.Request):
    """DRF's Request, reading a body sent without Content-Length (chunked, which daphne passes on
    whole): DRF takes any body without one as empty."""

    def _load_stream(self) -> None:
        if declared_length(self._request.META) is not None:
            super()._load_stream()  # type: ignore[misc]  # private in DRF, so not in its stubs
            return
        body = self._request.body  # past DATA_UPLOAD_MAX_MEMORY_SIZE: RequestDataTooBig, a 413
        # DRF's own _stream (None: no body), which the stubs confuse with HttpRequest's.
        self._stream = io.BytesIO(body) if body else None  # type: ignore[assignment]


def declared_length(meta: Mapping[str, Any]) -> int | None:
    """The request's Content-Length as DRF reads it (0 when it is not a number), None without one."""
    value = meta.get("CONTENT_LENGTH", meta.get("HTTP_CONTENT_LENGTH"))
    if value is None:
        return None
    try:
        return int(value)
    except (ValueError, TypeError):
        return 0


def load_json(raw: bytes, encoding: str) -> Any:
    """Parse a request body (ParseError: 400 MALFORMED_JSON), for DRF and the fast path alike."""
    text = _decode(raw, _text_encoding(encoding))
    if nested_deeper_than(text, MAX_JSON_DEPTH):  # dtq_core's limit on a payload too
        raise ParseError(f"JSON nested too deeply: more than {MAX_JSON_DEPTH} levels")
    try:
        data = json.loads(text, parse_constant=strict_constant)
    except RecursionError:  # not for a body the depth check let through; kept so it is never a 500
        raise ParseError(f"JSON nested too deeply: more than {MAX_JSON_DEPTH} levels") from None
    except ValueError as exc:
        raise ParseError(f"JSON parse error - {exc}") from None
    if _SURROGATE_ESCAPE.search(raw) and _holds_lone_surrogate(data):
        raise ParseError("a string holds an unpaired surrogate escape (\\ud800-\\udfff), which is not Unicode")
    return data


def _text_encoding(encoding: str) -> str:
    """The charset if it decodes bytes to text, as DRF's get_encoding checks it (with its message).

    Django takes any name codecs knows, bz2_codec and hex_codec too: bytes to bytes, which
    bytes.decode refuses (a 500), and a tiny compressed body could expand without bound."""
    try:
        "".encode(encoding)  # unlike codecs.lookup, str.encode refuses codecs that are not text
    except (LookupError, UnicodeError):
        raise ParseError(f'Unsupported charset "{encoding}" in request Content-Type header.') from None
    return encoding


def _decode(raw: bytes, encoding: str) -> str:
    # The whole body, strictly: DRF's decoding reader drops an incomplete character at the end.
    try:
        return raw.decode(encoding)
    except ValueError as exc:  # UnicodeDecodeError, or a codec's own complaint
        raise ParseError(f"JSON parse error - {exc}") from None


def _holds_lone_surrogate(value: Any) -> bool:
    stack = [value]
    while stack:  # no recursion, though the value is at most MAX_JSON_DEPTH deep
        item = stack.pop()
        if isinstance(item, str):
            if _LONE_SURROGATE.search(item):
                return True
        elif isinstance(item, dict):
            stack.extend(item.keys())
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
    return False
