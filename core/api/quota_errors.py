"""Quota rejections as API answers: 429 with ``Retry-After`` and the error body code "rate_limited"."""

from rest_framework import exceptions

from tenants.quotas import QuotaExceeded


class QuotaThrottled(exceptions.Throttled):
    """DRF's 429: its ``wait`` becomes the ``Retry-After`` header and ends the message."""

    default_code = QuotaExceeded.code

    def __init__(self, exceeded: QuotaExceeded) -> None:
        super().__init__(wait=exceeded.retry_after_seconds, detail=exceeded.message, code=exceeded.code)
