from rest_framework import serializers

from core.api.serializers import StrictModelSerializer
from tenants.models import KeyProvider, ProviderKey
from tenants.provider_keys.services import MAX_API_KEY_LENGTH, MAX_BASE_URL_LENGTH


class ProviderKeySerializer(StrictModelSerializer):
    """``api_key`` is write-only: no response carries it, nor any part of it."""

    provider = serializers.ChoiceField(choices=KeyProvider.choices)
    api_key = serializers.CharField(
        write_only=True,
        max_length=MAX_API_KEY_LENGTH,
        trim_whitespace=True,
        help_text="The provider's API key. Write-only: it is stored encrypted and never returned.",
    )
    base_url = serializers.CharField(
        required=False,
        allow_blank=True,
        max_length=MAX_BASE_URL_LENGTH,
        help_text=(
            "Where the provider's API is (an OpenAI-compatible server, a proxy). Empty: the platform's "
            "default endpoint. Must be a public https:// URL unless the operator allowed its host."
        ),
    )

    class Meta:
        model = ProviderKey
        fields = ["id", "provider", "api_key", "base_url", "created_at", "updated_at"]
        read_only_fields = ["id", "created_at", "updated_at"]
        # One key per provider and tenant is a business rule checked by the service.
        validators: list[object] = []


class ProviderKeyUpdateSerializer(ProviderKeySerializer):
    """Replace the key, the base URL or both. The provider of a key does not change."""

    provider = serializers.ChoiceField(choices=KeyProvider.choices, read_only=True)


class ProviderKeyCheckSerializer(serializers.Serializer):
    is_working = serializers.BooleanField(help_text="Whether the provider accepted the key.")
    message = serializers.CharField(
        help_text="What happened, in general terms: the provider's own answer is never echoed."
    )
