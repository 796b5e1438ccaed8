"""Published list prices of well-known models, as read on the day in ``as_of``.

Models not listed here (newer ones included) have an unknown price until an operator adds it.
"""

from datetime import date
from decimal import Decimal

from django.db import migrations

AS_OF = date(2025, 6, 1)

# provider, model, input, output, cache read, cache write (credits, i.e. USD, per million tokens)
DEFAULT_PRICES = [
    ("offline", "offline-demo", "0", "0", "0", "0"),
    ("anthropic", "claude-opus-4-20250514", "15", "75", "1.50", "18.75"),
    ("anthropic", "claude-sonnet-4-20250514", "3", "15", "0.30", "3.75"),
    ("anthropic", "claude-3-7-sonnet-20250219", "3", "15", "0.30", "3.75"),
    ("anthropic", "claude-3-5-haiku-20241022", "0.80", "4", "0.08", "1"),
    ("openai", "gpt-4.1", "2", "8", "0.50", "0"),
    ("openai", "gpt-4.1-mini", "0.40", "1.60", "0.10", "0"),
    ("openai", "gpt-4.1-nano", "0.10", "0.40", "0.025", "0"),
    ("openai", "gpt-4o", "2.50", "10", "1.25", "0"),
    ("openai", "gpt-4o-mini", "0.15", "0.60", "0.075", "0"),
]


def add_default_prices(apps, schema_editor):
    model_price = apps.get_model("billing", "ModelPrice")
    for provider, model, input_price, output_price, cache_read, cache_write in DEFAULT_PRICES:
        model_price.objects.get_or_create(
            provider=provider,
            model=model,
            defaults={
                "input_per_million": Decimal(input_price),
                "output_per_million": Decimal(output_price),
                "cache_read_per_million": Decimal(cache_read),
                "cache_write_per_million": Decimal(cache_write),
                "as_of": AS_OF,
            },
        )


class Migration(migrations.Migration):
    dependencies = [("billing", "0001_initial")]

    operations = [migrations.RunPython(add_default_prices, migrations.RunPython.noop)]
