"""A tenant's own model-provider keys: added, replaced, deleted and tested by its owners and admins.

The key itself is write-only: it is stored encrypted (``ProviderKey.api_key``), used by the
runtime (``agents.model_clients``) and never returned, shown or logged.
"""
