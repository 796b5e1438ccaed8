"""Credit amounts as people type them: the ASCII digits 0-9 with an optional point and up to six
places. Python's ``\\d`` and ``Decimal`` also take other scripts' digits (Arabic-Indic five is 5), which a
ledger must not (what was typed and what was stored would read differently)."""

import re

from django.core.validators import RegexValidator

CREDITS_PATTERN = re.compile(r"\A[0-9]{1,10}(\.[0-9]{1,6})?\Z")
CREDITS_MESSAGE = "Enter a number of credits with the digits 0-9 and an optional point, such as 10 or 2.50."
CREDITS_MAX_LENGTH = 17

credits_input_validator = RegexValidator(CREDITS_PATTERN, message=CREDITS_MESSAGE)


def is_credits_text(text: str) -> bool:
    return CREDITS_PATTERN.match(text) is not None
