"""DRF's JSON parser, refusing the two kinds of valid JSON that Python cannot take further.

- A string with an unpaired surrogate escape ("\\ud800") parses, but is not Unicode: encoding it
  for Redis would fail later, after part of a request had been acted on.
- Nesting about a thousand deep exhausts the recursion limit in the parser (or later, when the
  payload is written back out).
Both are a 400 MALFORMED_JSON, like any other body that is not JSON the API can use.
"""

from __future__ import annotations

import io
import re
from collections.abc import Mapping
from typing import Any

from rest_framework import parsers
from rest_framework.exceptions import ParseError

# A \uD800-\uDFFF escape in the raw body: the only way a surrogate gets into parsed JSON (UTF-8
# bytes cannot encode one). A pair is fine; the exact check below runs only when this matches.
_SURROGATE_ESCAPE = re.compile(rb"\\u[dD][89abcdefABCDEF]")
_LONE_SURROGATE = re.compile("[\ud800-\udfff]")


class JSONParser(parsers.JSONParser):
    def parse(self, stream: Any, media_type: str | None = None, parser_context: Mapping[str, Any] | None = None) -> Any:
        raw = stream.read() if stream is not None else b""
        try:
            data = super().parse(io.BytesIO(raw), media_type, parser_context)
        except RecursionError:
            raise ParseError("JSON nested too deeply") from None
        if _SURROGATE_ESCAPE.search(raw) and _holds_lone_surrogate(data):
            raise ParseError("a string holds an unpaired surrogate escape (\\ud800-\\udfff), which is not Unicode")
        return data


def _holds_lone_surrogate(value: Any) -> bool:
    stack = [value]
    while stack:  # no recursion: the value may be nested as deep as the parser allowed
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
