# One image for web, worker and beat (docker-compose.yml picks the command).
FROM python:3.11-slim

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    DEBUG=0 \
    PORT=8000 \
    MEMORYHUB_WEB_WORKERS=2 \
    MEMORYHUB_WEB_THREADS=8

WORKDIR /app
COPY pyproject.toml README.md ./
COPY memoryhub ./memoryhub
COPY agents ./agents
COPY indexing ./indexing
COPY search ./search
COPY integrations ./integrations
RUN pip install .
COPY manage.py ./
COPY templates ./templates
# collectstatic needs settings but no database: give it a throwaway key and a dummy URL.
RUN SECRET_KEY=collectstatic DATABASE_URL=postgres://unused@localhost/unused python manage.py collectstatic --noinput

RUN useradd --create-home --uid 1000 memoryhub
USER memoryhub
EXPOSE 8000
CMD ["sh", "-c", "python manage.py migrate --noinput && exec gunicorn -c python:memoryhub.gunicorn_conf --bind 0.0.0.0:${PORT} memoryhub.wsgi:application"]
