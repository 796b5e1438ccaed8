"""The API's JSON parser: DRF's, with a body nested too deep for Python's decoder refused as a 400."""

from typing import Any

from rest_framework import parsers
from rest_framework.exceptions import ParseError


class JSONParser(parsers.JSONParser):
    def parse(self, stream: Any, media_type: str | None = None, parser_context: Any = None) -> Any:
        try:
            return super().parse(stream, media_type, parser_context)
        except RecursionError as error:
            # The decoder gives up past a depth of about a thousand: such a body is no request.
            raise ParseError("The request body is nested too deeply.") from error
