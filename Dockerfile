# The serving image: `parpo serve` on port 8000, the registry and the logs as volumes.
#   CPU (default):  docker build -t parpo:0.1.0 .
#   CUDA variant:   docker build -t parpo:0.1.0-cuda --build-arg TORCH_INDEX=https://download.pytorch.org/whl/cu128 .
# (the CUDA wheels bundle their runtime; the host needs the NVIDIA driver and container toolkit).
# deploy/README.md explains the volumes, the probes and the Kubernetes example in deploy/k8s/.
FROM python:3.11-slim

# Where pip looks for torch besides PyPI: the same pin (constraints.txt) resolves to the +cpu
# or the +cuXXX build of that version, so both variants run the same torch release.
ARG TORCH_INDEX=https://download.pytorch.org/whl/cpu

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    MPLCONFIGDIR=/tmp/matplotlib

WORKDIR /opt/parpo
COPY pyproject.toml constraints.txt README.md LICENSE ./
COPY configs ./configs
COPY parpo_core ./parpo_core
COPY data_pipelines ./data_pipelines
COPY reward_models ./reward_models
COPY parpo ./parpo
COPY serving ./serving
RUN pip install --no-cache-dir --extra-index-url "${TORCH_INDEX}" -c constraints.txt .

# A fixed non-root uid, so volumes can be prepared for it (Kubernetes: fsGroup 10001).
RUN useradd --system --uid 10001 --create-home --home-dir /home/parpo parpo \
    && mkdir -p /registry /events \
    && chown parpo /events
USER 10001

VOLUME ["/registry", "/events"]
EXPOSE 8000

# /livez answers as soon as the server listens; readiness (/readyz: a policy loaded, both logs
# writable) is the orchestrator's probe, not the container's health.
HEALTHCHECK --interval=30s --timeout=5s --start-period=30s --retries=3 \
    CMD ["python", "-c", "import urllib.request; urllib.request.urlopen('http://127.0.0.1:8000/livez', timeout=4)"]

ENTRYPOINT ["parpo", "serve", "--registry", "/registry", "--events", "/events", "--host", "0.0.0.0", "--port", "8000"]
CMD ["--policy", "production"]
