"""The agent runtime: plain Python, no Django request/response, DRF, Channels or django-q.

It talks to the rest of Agentry through the small protocols in ``types``.
"""
