"""Published list prices of the models agents use when no model is named (``DEFAULT_MODEL_NAMES``),
so that a tenant with credits can use its agents' defaults.

Claude Sonnet 5 at its standard rate (from 1 September 2026), with Anthropic's usual cache
rates (a five-minute cache write at 1.25 times input, a cache read at 0.1 times); GPT-5.4 mini
at OpenAI's standard rate (cached input at 0.075; OpenAI charges nothing to write its cache).
A price an operator already set is kept.
"""

from datetime import date
from decimal import Decimal

from django.db import migrations

AS_OF = date(2026, 12, 8)

# provider, model, input, output, cache read, cache write (credits, i.e. USD, per million tokens)
DEFAULT_MODEL_PRICES = [
    ("anthropic", "claude-sonnet-5", "3", "15", "0.30", "3.75"),
    ("openai", "gpt-5.4-mini", "0.75", "4.50", "0.075", "0"),
]


def add_prices_of_the_default_models(apps, schema_editor):
    model_price = apps.get_model("billing", "ModelPrice")
    for provider, model, input_price, output_price, cache_read, cache_write in DEFAULT_MODEL_PRICES:
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
    dependencies = [("billing", "0003_creditaccount_is_enabled")]

    operations = [migrations.RunPython(add_prices_of_the_default_models, migrations.RunPython.noop)]
