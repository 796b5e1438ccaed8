"""Model clients for the hosted providers, each implementing ``agents.runtime.types.ModelClient``."""

from agents.runtime.providers.anthropic_client import AnthropicModelClient
from agents.runtime.providers.common import RAW_ARGUMENTS_KEY
from agents.runtime.providers.openai_client import OpenAIModelClient

__all__ = ["RAW_ARGUMENTS_KEY", "AnthropicModelClient", "OpenAIModelClient"]
