"""OpenAPI 3 at /api/schema/ and the docs page at /api/docs/: the schema says what the API does, and
schemathesis, generating valid and invalid requests from it, never gets a 500 nor an answer (status,
content type, body) that the schema does not describe."""

import pytest
import yaml
from django.core.signals import request_finished, request_started
from django.core.wsgi import get_wsgi_application
from django.db import close_old_connections
from hypothesis import HealthCheck, given, settings as hypothesis_settings
from rest_framework.test import APIClient

API_OPERATIONS = {
    ("/api/v1/status", "get"),
    ("/api/v1/files", "get"),
    ("/api/v1/files/{path}", "get"),
    ("/api/v1/files/{path}", "put"),
    ("/api/v1/files/{path}", "delete"),
    ("/api/v1/sync", "post"),
    ("/api/v1/jobs/{job_id}", "get"),
    ("/api/v1/search", "post"),
    ("/api/v1/tools", "get"),
    ("/api/v1/tools/{name}", "post"),
}


@pytest.fixture(scope="module")
def schema() -> dict:
    response = APIClient().get("/api/schema/")
    assert response.status_code == 200
    return yaml.safe_load(response.content)


def operations(schema):
    return {(path, method) for path, item in schema["paths"].items() for method in item}


def test_the_schema_needs_no_token_and_lists_every_api_operation(schema):
    assert schema["openapi"].startswith("3.")
    assert API_OPERATIONS <= operations(schema)


def test_json_is_available_too():
    response = APIClient().get("/api/schema/?format=json")
    assert response.status_code == 200
    assert response.json()["info"]["title"] == "MemoryHub API"


def test_every_operation_needs_the_agent_token(schema):
    assert schema["components"]["securitySchemes"]["agentToken"] == {
        "type": "http",
        "scheme": "bearer",
        "description": schema["components"]["securitySchemes"]["agentToken"]["description"],
    }
    for path, method in API_OPERATIONS:
        assert schema["paths"][path][method]["security"] == [{"agentToken": []}], (path, method)


def test_memory_get_documents_from_and_lines_with_their_bounds(schema):
    operation = schema["paths"]["/api/v1/files/{path}"]["get"]
    parameters = {parameter["name"]: parameter for parameter in operation["parameters"]}
    assert set(parameters) == {"path", "from", "lines"}
    assert parameters["from"]["schema"] == {"type": "integer", "minimum": 1, "maximum": 100_000_000, "default": 1}
    assert parameters["lines"]["schema"] == {"type": "integer", "minimum": 1, "maximum": 1000, "default": 50}
    answer = schema["components"]["schemas"]["MemoryGet"]
    assert set(answer["properties"]) == {"path", "from", "lines", "total_lines", "content", "source", "owner"}
    assert "owner" not in answer.get("required", [])  # only when read through a grant


def test_the_file_list_is_documented_as_a_page(schema):
    operation = schema["paths"]["/api/v1/files"]["get"]
    assert {parameter["name"] for parameter in operation["parameters"]} == {"limit", "offset", "prefix", "source"}
    page_ref = operation["responses"]["200"]["content"]["application/json"]["schema"]["$ref"]
    page = schema["components"]["schemas"][page_ref.rsplit("/", 1)[1]]
    assert set(page["properties"]) == {"count", "next", "previous", "results"}


def test_errors_are_documented_with_their_one_shape(schema):
    error = schema["components"]["schemas"]["Error"]
    assert error["required"] == ["error"]
    assert set(schema["components"]["schemas"]["ErrorBody"]["properties"]) == {"code", "message"}
    error_ref = {"$ref": "#/components/schemas/Error"}
    upload = schema["paths"]["/api/v1/files/{path}"]["put"]["responses"]
    assert {"400", "401", "403", "404", "413", "415", "422"} <= set(upload)
    for path, method in API_OPERATIONS:
        responses = schema["paths"][path][method]["responses"]
        assert responses["401"]["content"]["application/json"]["schema"] == error_ref, (path, method)


def test_deleting_a_file_is_documented_with_its_answer(schema):
    responses = schema["paths"]["/api/v1/files/{path}"]["delete"]["responses"]
    assert "204" not in responses
    assert "chunks_removed" in str(schema["components"]["schemas"]["FileDeleteOutput"])


def test_a_raw_upload_body_is_documented_alongside_json(schema):
    content = schema["paths"]["/api/v1/files/{path}"]["put"]["requestBody"]["content"]
    assert {"application/json", "text/plain", "text/markdown", "application/octet-stream"} <= set(content)
    assert "*/*" not in content


def test_the_docs_page_serves_swagger_ui_from_this_server():
    response = APIClient().get("/api/docs/")
    assert response.status_code == 200
    page = response.content.decode()
    assert "swagger-ui" in page and "/api/schema/" in page
    assert "cdn" not in page.lower() and "unpkg" not in page.lower()  # works offline (sidecar)


# --- schemathesis ------------------------------------------------------------------------------

EXAMPLES_PER_OPERATION = 12


@pytest.fixture
def wsgi_app():
    """Django's WSGI app in this thread and this test's transaction. Like Django's test client, keep
    the request signals from closing the connection (it is not in autocommit inside a test)."""
    request_started.disconnect(close_old_connections)
    request_finished.disconnect(close_old_connections)
    yield get_wsgi_application()
    request_started.connect(close_old_connections)
    request_finished.connect(close_old_connections)


def test_generated_requests_never_get_a_500(alice, index_files, wsgi_app):
    """Positive and negative cases for every operation, with a real token and a few indexed files.
    (Not checked: that every schema-violating request is refused; DRF's paginator ignores a bad offset.)"""
    import schemathesis
    from schemathesis.checks import not_a_server_error
    from schemathesis.specs.openapi.checks import content_type_conformance, response_schema_conformance, status_code_conformance
    from schemathesis.generation import GenerationMode

    index_files(alice, {"MEMORY.md": "I prefer tea.\n", "memory/2026-03-01.md": "# 1 March\n\nCalled the bank.\n"})
    api = schemathesis.openapi.from_wsgi("/api/schema/", wsgi_app)
    headers = {"Authorization": f"Bearer {alice.raw_token}"}
    checks = [not_a_server_error, status_code_conformance, content_type_conformance, response_schema_conformance]
    tested = set()
    for result in api.get_all_operations():
        operation = result.ok()
        tested.add((operation.path, operation.method.lower()))
        for mode in (GenerationMode.POSITIVE, GenerationMode.NEGATIVE):

            @given(case=operation.as_strategy(generation_mode=mode))
            @hypothesis_settings(
                max_examples=EXAMPLES_PER_OPERATION,
                deadline=None,
                database=None,
                derandomize=True,
                suppress_health_check=list(HealthCheck),
            )
            def no_server_error(case):
                case.call_and_validate(headers=headers, checks=checks)

            no_server_error()
    assert API_OPERATIONS <= tested
