# The twin and its agents (twin serve, twin play, python -m twin_agents). The model server's
# image has a file of its own (Dockerfile.llm), so that building this one, with BuildKit or the
# classic builder, never builds llama.cpp. No `# syntax=` line: the builder's own Dockerfile
# frontend is enough, and none is fetched from a registry.
#
# PYTHON is the base image: any Debian bookworm with Python 3.11 as `python` and python3-venv.
# Where python:3.11-slim-bookworm cannot be pulled, `sh compose/base-image.sh` makes one with
# debootstrap (cluster-twin-base:bookworm); then `--build-arg PYTHON=cluster-twin-base:bookworm`,
# or TWIN_BASE_IMAGE=cluster-twin-base:bookworm for docker compose.
ARG PYTHON=python:3.11-slim-bookworm

# -- the twin ------------------------------------------------------------------------------
FROM ${PYTHON} AS twin-build
WORKDIR /src
# The runtime dependencies exactly as locked (versions and hashes), then the project alone.
COPY requirements.lock ./
RUN python -m venv /opt/venv \
    && /opt/venv/bin/pip install --no-cache-dir --upgrade pip==25.3 \
    && /opt/venv/bin/pip install --no-cache-dir --require-hashes --no-deps -r requirements.lock
COPY pyproject.toml README.md LICENSE ./
COPY twin ./twin
COPY twin_agents ./twin_agents
# The traces install as the package twin.traces (pyproject.toml maps it to traces/).
COPY traces ./traces
RUN /opt/venv/bin/pip install --no-cache-dir --no-deps .

FROM ${PYTHON} AS twin
RUN useradd --create-home --uid 10001 twin && mkdir /runs && chown twin /runs
COPY --from=twin-build /opt/venv /opt/venv
COPY compose/entrypoint.sh /usr/local/bin/twin-entrypoint
ENV PATH=/opt/venv/bin:$PATH PYTHONUNBUFFERED=1
USER 10001
WORKDIR /home/twin
# Compile the kernel ahead, into this user's cache: first use then loads it in milliseconds.
RUN python -c "from twin.kernel import jit; jit.warm()"
EXPOSE 8000
HEALTHCHECK --interval=2s --timeout=2s --retries=30 \
    CMD ["python", "-c", "import urllib.request; urllib.request.urlopen('http://127.0.0.1:8000/health', timeout=1)"]
# The entrypoint starts as root only to make the log directory (/runs) writable, whoever owns
# the host directory mounted there, then runs every command as uid 10001 (see the script).
# hadolint ignore=DL3002
USER 0
ENTRYPOINT ["/usr/local/bin/twin-entrypoint", "twin"]
CMD ["serve", "--host", "0.0.0.0", "--port", "8000"]
