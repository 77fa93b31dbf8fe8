"""The domain raises DomainError kinds without HTTP; the API layer answers each with its status and the
one error shape, details included."""

import pytest
from rest_framework.test import APIRequestFactory

from memoryhub import domain
from memoryhub.errors import HTTP_STATUS, api_exception_handler


def test_every_kind_of_domain_error_has_a_status():
    kinds = {kind for kind in vars(domain).values() if isinstance(kind, type) and issubclass(kind, domain.DomainError)}
    assert kinds - {domain.DomainError} == set(HTTP_STATUS)


@pytest.mark.parametrize(
    "error, status",
    [
        (domain.InvalidInput("bad path", code="invalid_path"), 400),
        (domain.NotFound("No file 'x'.", code="not_found"), 404),
        (domain.PreconditionFailed("stale", code="hash_mismatch", current_hash="abc"), 412),
        (domain.TooLarge("too big", code="file_too_large"), 413),
        (domain.UnsupportedContent("binary", code="binary_content"), 415),
        (domain.Inconsistent("session is for jsonl", code="inconsistent_source"), 422),
        (domain.Busy("try again", code="write_conflict"), 503),
    ],
)
def test_the_api_answers_a_domain_error_with_its_status_and_body(error, status):
    response = api_exception_handler(error, {"request": APIRequestFactory().get("/api/v1/x")})
    assert response.status_code == status
    assert response.data["error"]["code"] == error.code and response.data["error"]["message"] == error.message
    for key, value in error.details.items():
        assert response.data["error"][key] == value
    assert (response.get("Retry-After") == "1") == (status == 503)
