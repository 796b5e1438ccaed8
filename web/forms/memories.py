from typing import Any

from django import forms
from django.contrib.auth.models import User

from agents.models import Agent
from memory.models import MAX_MEMORY_CHARACTERS, Memory, MemoryStatus, MemoryType
from web.forms.common import RangeInput


def importance_field() -> forms.FloatField:
    return forms.FloatField(
        initial=0.5,
        help_text="How much it matters when the agent recalls memories.",
        widget=RangeInput(attrs={"min": 0, "max": 1, "step": 0.05}),
    )


class MemberChoiceField(forms.ModelChoiceField):
    def label_from_instance(self, obj: Any) -> str:
        return str(obj.email or obj.username)


class MemoryForm(forms.Form):
    agent = forms.ModelChoiceField(queryset=Agent.objects.none(), empty_label=None)
    type = forms.ChoiceField(choices=MemoryType.choices, initial=MemoryType.FACT)
    content = forms.CharField(max_length=MAX_MEMORY_CHARACTERS, widget=forms.Textarea(attrs={"rows": 4}))
    importance = importance_field()
    subject_user = MemberChoiceField(
        label="About",
        queryset=User.objects.none(),
        required=False,
        empty_label="Everyone (general knowledge)",
        help_text="A memory about one person is only recalled in their sessions.",
    )

    def __init__(self, *args: Any, agents: Any, members: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        agent_field, subject_field = self.fields["agent"], self.fields["subject_user"]
        assert isinstance(agent_field, forms.ModelChoiceField)
        assert isinstance(subject_field, forms.ModelChoiceField)
        agent_field.queryset = agents
        subject_field.queryset = members


class MemoryEditForm(forms.Form):
    type = forms.ChoiceField(choices=MemoryType.choices)
    content = forms.CharField(max_length=MAX_MEMORY_CHARACTERS, widget=forms.Textarea(attrs={"rows": 4}))
    importance = importance_field()
    status = forms.ChoiceField(
        choices=[(MemoryStatus.ACTIVE, "Active"), (MemoryStatus.ARCHIVED, "Archived")],
        required=False,
    )

    @classmethod
    def initial_for(cls, memory: Memory) -> dict[str, Any]:
        return {
            "type": memory.type,
            "content": memory.content,
            "importance": memory.importance,
            "status": memory.status,
        }


class MemoryApproveForm(forms.Form):
    """Approve a suggestion as it is, or after editing it."""

    type = forms.ChoiceField(choices=MemoryType.choices, required=False)
    content = forms.CharField(
        max_length=MAX_MEMORY_CHARACTERS, required=False, widget=forms.Textarea(attrs={"rows": 3})
    )
    importance = forms.FloatField(required=False, min_value=0, max_value=1)

    def approve_fields(self) -> dict[str, Any]:
        data = self.cleaned_data
        return {
            name: data[name] for name in ("type", "content", "importance") if data.get(name) not in (None, "")
        }
