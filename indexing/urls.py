from django.http import JsonResponse
from django.urls import path, register_converter
from django.views.decorators.csrf import csrf_exempt

from indexing import apis
from memoryhub.errors import error_body


class AnyPathConverter:
    """Like <path:…> but also matches control characters, so a bad path gets a 400 invalid_path
    from the view instead of a 404 from the resolver."""

    regex = r"[\s\S]+"

    def to_python(self, value: str) -> str:
        return value

    def to_url(self, value: str) -> str:
        return value


register_converter(AnyPathConverter, "anypath")


def by_method(**views):
    """One URL, one APIView per HTTP method (STYLE: one view per operation)."""
    handlers = {method.upper(): view.as_view() for method, view in views.items()}
    allowed = ", ".join(sorted(handlers))

    @csrf_exempt
    def dispatch(request, *args, **kwargs):
        handler = handlers.get(request.method)
        if handler is None:
            response = JsonResponse(
                error_body("method_not_allowed", f"Method {request.method} not allowed; use {allowed}."), status=405
            )
            response["Allow"] = allowed
            return response
        return handler(request, *args, **kwargs)

    dispatch.method_views = handlers  # lets the OpenAPI generator document each method's view
    return dispatch


file_view = by_method(get=apis.FileGetApi, put=apis.FileUploadApi, delete=apis.FileDeleteApi)
file_append_view = by_method(post=apis.FileAppendApi)


@csrf_exempt
def file_append_or_file(request, path):
    """``POST files/<path>/append`` appends; any other method on that URL is about a file whose own
    path ends in ``/append`` (files have no POST, so the two never collide)."""
    if request.method == "POST":
        return file_append_view(request, path=path)
    return file_view(request, path=f"{path}/append")


file_append_or_file.method_views = file_append_view.method_views

urlpatterns = [
    path("status", apis.AgentStatusApi.as_view(), name="api-status"),
    path("files", apis.FileListApi.as_view(), name="api-files"),
    path("files/<anypath:path>/append", file_append_or_file, name="api-file-append"),
    path("files/<anypath:path>", file_view, name="api-file"),
    path("sync", apis.WorkspaceSyncApi.as_view(), name="api-sync"),
    path("jobs/<int:job_id>", apis.JobGetApi.as_view(), name="api-job"),
    path("export", apis.AgentExportApi.as_view(), name="api-export"),
]
