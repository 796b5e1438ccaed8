from typing import Any

from django import forms

from agents.models import Agent
from files.models import KnowledgeBase


class KnowledgeBaseForm(forms.Form):
    name = forms.CharField(max_length=100)
    description = forms.CharField(
        max_length=1000,
        required=False,
        widget=forms.Textarea(attrs={"rows": 2}),
        help_text="What the documents are about; agents see only the passages they find.",
    )
    agents = forms.ModelMultipleChoiceField(
        queryset=Agent.objects.none(),
        required=False,
        widget=forms.CheckboxSelectMultiple,
        help_text="These agents can search it with the file_search tool.",
    )

    def __init__(self, *args: Any, agents: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        agent_field = self.fields["agents"]
        assert isinstance(agent_field, forms.ModelMultipleChoiceField)
        agent_field.queryset = agents

    @classmethod
    def initial_for(cls, knowledge_base: KnowledgeBase) -> dict[str, Any]:
        return {
            "name": knowledge_base.name,
            "description": knowledge_base.description,
            "agents": [agent.pk for agent in knowledge_base.agents.all()],
        }

    def service_fields(self) -> dict[str, Any]:
        data = self.cleaned_data
        return {
            "name": data["name"],
            "description": data["description"],
            "agent_ids": [agent.pk for agent in data["agents"]],
        }


class DocumentUploadForm(forms.Form):
    file = forms.FileField(
        label="Document",
        help_text="PDF, DOCX, HTML, Markdown, CSV, JSON or text; it is read and indexed in the background.",
    )


class KnowledgeSearchForm(forms.Form):
    q = forms.CharField(label="Search", max_length=500, required=False)
