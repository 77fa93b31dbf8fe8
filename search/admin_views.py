"""The admin's search playground: one agent, one query, the ranked results with their explain fields.

It calls ``search.services.memory_search`` exactly as the API does, so what an operator sees here is
what the agent gets.
"""

from django import forms
from django.shortcuts import render

from agents.models import Agent
from indexing.models import MemoryFile
from memoryhub.errors import CLIENT_ERRORS, error_message
from search.types import SearchFilters


class PlaygroundForm(forms.Form):
    query = forms.CharField(max_length=10_000, widget=forms.TextInput(attrs={"size": 70, "autofocus": True}))
    mode = forms.ChoiceField(
        choices=[("", "default"), ("hybrid", "hybrid"), ("vector", "vector"), ("keyword", "keyword")], required=False
    )
    max_results = forms.IntegerField(required=False, min_value=1, widget=forms.NumberInput(attrs={"style": "width: 5em"}))
    min_score = forms.FloatField(required=False, min_value=0, max_value=1, widget=forms.NumberInput(attrs={"step": "0.01", "style": "width: 5em"}))
    sources = forms.MultipleChoiceField(choices=MemoryFile.Source.choices, required=False, widget=forms.CheckboxSelectMultiple)
    path_prefix = forms.CharField(max_length=1024, required=False)


def search_playground(request, *, agent: Agent, admin_site, model_admin):
    from search.services import memory_search

    form = PlaygroundForm(request.GET or None)
    response, error, file_ids = None, "", {}
    if form.is_bound and form.is_valid():
        data = form.cleaned_data
        try:
            response = memory_search(
                agent=agent,
                query=data["query"],
                max_results=data["max_results"],
                min_score=data["min_score"],
                mode=data["mode"] or None,
                filters=SearchFilters(sources=tuple(data["sources"]), path_prefix=data["path_prefix"]),
                explain=True,
            )
        except CLIENT_ERRORS as exc:
            error = error_message(exc)
        else:
            # Link every result to its file's admin page (one query for the page).
            paths = {result.path for result in response.results}
            file_ids = dict(MemoryFile.objects.filter(agent=agent, path__in=paths).values_list("path", "id"))
    rows = [
        {"rank": rank, "result": result, "file_id": file_ids.get(result.path),
         "explain": list((result.explain or {}).items())}
        for rank, result in enumerate(response.results if response else [], 1)
    ]
    context = {
        **admin_site.each_context(request),
        "opts": model_admin.model._meta,
        "original": agent,
        "title": f"Search {agent.slug}'s memory",
        "form": form,
        "response": response,
        "rows": rows,
        "error": error,
    }
    return render(request, "admin/search/playground.html", context)
