"""Exceptions shared across apps."""


class ToolError(Exception):
    """A failure the model should see as the tool's error result (bad input, refused URL…).

    Lives in core because the outbound-request guard (core.ssrf) raises it too.
    """
