"""Existing conversations become one branch: each message's parent is the one before it.

A queued message follows the last placed one (its run's start moves it after that run's
answer, sessions.lane). Executors' messages stay outside the conversation's tree. A compaction
snapshot that replaced up to an executor's message now names the conversation message before it,
as the branch-aware context matches snapshots by a position on the path (sessions.compaction).
Reversing clears the parents, which the schema migration before this one then drops.
"""

from django.db import migrations


def _conversation(Message, session_id):
    return Message.objects.filter(session_id=session_id).exclude(run__parent_run__isnull=False)


def link_messages(apps, schema_editor):
    Message = apps.get_model("agent_sessions", "Message")
    Session = apps.get_model("agent_sessions", "Session")
    CompactionSnapshot = apps.get_model("agent_sessions", "CompactionSnapshot")
    for session_id in Session.objects.values_list("id", flat=True).iterator():
        conversation = _conversation(Message, session_id)
        placed = list(conversation.filter(position__isnull=False).order_by("position").values_list("id", "position"))
        queued = conversation.filter(position__isnull=True).order_by("created_at").values_list("id", flat=True)
        previous = None
        for message_id, _position in placed:
            if previous is not None:
                Message.objects.filter(pk=message_id).update(parent_id=previous)
            previous = message_id
        if previous is not None:
            Message.objects.filter(pk__in=list(queued)).update(parent_id=previous)
        positions = [position for _id, position in placed]
        snapshots = CompactionSnapshot.objects.filter(session_id=session_id, replaces_up_to_position__gt=0)
        for snapshot in snapshots.exclude(replaces_up_to_position__in=positions):
            earlier = [position for position in positions if position <= snapshot.replaces_up_to_position]
            snapshot.replaces_up_to_position = earlier[-1] if earlier else 0
            snapshot.save(update_fields=["replaces_up_to_position"])


def unlink_messages(apps, schema_editor):
    apps.get_model("agent_sessions", "Message").objects.update(parent_id=None)


class Migration(migrations.Migration):
    dependencies = [("agent_sessions", "0011_message_parent_and_shown_branch")]

    operations = [migrations.RunPython(link_messages, unlink_messages)]
