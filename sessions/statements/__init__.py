"""The run's and the post's most frequent statements, as SQL written once for both databases.

Why by hand: Django builds every ORM statement anew from its queryset, about half a millisecond
of Python per UPDATE or INSERT on the machines we measure on, more for a query with joins or
``Exists``, and a run makes dozens (its claim, its transitions, its steps' ends, its counters, its
events, its transcript, the reads that set it up and end it); a post authenticates its API key,
reads its session, its conversation's tree and its author's quotas. The writes are built once
from the models' metadata and cached, the reads are SQL text; either costs a fraction of the
ORM's statement. Each is here because ``bench/compare.py`` showed it pays (docs/benchmarks.md,
"Hot statements as SQL written once" and "The reads too"); everything else is the ORM's.

- ``sql``: building statements from the models' metadata, converting values both ways;
- ``writes``: updates, inserts and counters;
- ``run_reads``: what a run's claim, set-up and end read;
- ``post_reads``: what a post reads.

The SQL is the same on PostgreSQL and SQLite (UPDATE … RETURNING needs SQLite ≥ 3.35). Values
go through each field's own conversion (``get_db_prep_save``), so they are stored and compared
exactly as the ORM would, and rows come back through ``Model.objects.raw``, or, for a row of
several models joined, through each field's converters: either way converted as the ORM converts
them. Nothing here sends signals or runs ``save()``: like ``QuerySet.update`` and
``bulk_create``, which these statements replace.
"""
