"""Model clients for the hosted providers, each implementing ``agents.runtime.types.ModelClient``.

Each lives in its own module (``anthropic_client``, ``openai_client``) and is imported where it
is used: importing this package does not load the providers' SDKs.
"""
