"""The house rules of the codebase that a test can hold (docs/architecture.md): raw SQL names its
tables through the models, the domain raises domain errors, and the engine does not import the agent
integrations or the benchmark harness."""

import re
from pathlib import Path

BASE_DIR = Path(__file__).resolve().parents[2]
APPS = ("agents", "indexing", "search", "integrations", "memoryhub")
# A table named in SQL: after FROM, JOIN, INTO, UPDATE, TABLE, COPY or ON (admin URL names do not count).
TABLES = re.compile(r"\b(FROM|JOIN|INTO|UPDATE|TABLE|COPY|ON)\s+(indexing|search|agents|usage)_[a-z]+\b")


def runtime_modules():
    for app in APPS:
        for path in sorted((BASE_DIR / app).rglob("*.py")):
            if "migrations" not in path.parts:
                yield path


def test_raw_sql_names_tables_through_the_models():
    found = [
        f"{path.relative_to(BASE_DIR)}:{number}: {line.strip()}"
        for path in runtime_modules() if path.name != "tables.py"
        for number, line in enumerate(path.read_text().splitlines(), 1)
        if TABLES.search(line) and not line.lstrip().startswith("#")
    ]
    assert not found, "\n".join(found)


def test_domain_modules_do_not_speak_http():
    domain = [BASE_DIR / "indexing" / name for name in ("writes.py", "services.py", "maintenance.py", "paths.py", "selectors.py", "attributes.py", "export.py")]
    domain += [BASE_DIR / "search" / name for name in ("services.py", "keyword.py", "vector.py", "deadline.py")]
    domain += [BASE_DIR / "integrations" / "tools.py"]
    offenders = [str(p.relative_to(BASE_DIR)) for p in domain if "ApiError(" in p.read_text() or "status_code=" in p.read_text()]
    assert not offenders, offenders


def test_the_engine_imports_neither_the_integrations_nor_the_benchmarks():
    offenders = [
        str(path.relative_to(BASE_DIR))
        for app in ("search", "indexing")
        for path in (BASE_DIR / app).rglob("*.py")
        if re.search(r"^\s*(from|import) (integrations|benchmarks)\b", path.read_text(), flags=re.M)
    ]
    assert not offenders, offenders
