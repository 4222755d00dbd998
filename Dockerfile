# The WorkTrain image: one image for both tiers (`worktrain web`, `worktrain worker`) and the
# fake model. Dependencies at the versions of requirements.lock (./scripts/lock), as the run
# and test commands install them.
FROM python:3.11-slim

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    WORKTRAIN_DATA_DIR=/data

# git: agents work in repositories; their Bash tool runs in the workspace. util-linux and
# mount (unshare, setpriv, mount): each agent command in a PID namespace of its own.
RUN apt-get update \
    && apt-get install -y --no-install-recommends git ca-certificates util-linux mount \
    && rm -rf /var/lib/apt/lists/*

WORKDIR /app
# The dependencies first, at the lock's versions: a layer rebuilt only when pyproject.toml or
# the lock changes (a change of WorkTrain's code reinstalls WorkTrain alone, below).
COPY pyproject.toml requirements.lock ./
RUN python -c "import tomllib; print('\n'.join(tomllib.load(open('pyproject.toml', 'rb'))['project']['dependencies']))" > /tmp/dependencies.txt \
    && pip install -c requirements.lock -r /tmp/dependencies.txt \
    && rm /tmp/dependencies.txt
COPY README.md ./
COPY daemon ./daemon
COPY web ./web
COPY worker ./worker
COPY cli ./cli
COPY workflows ./workflows
RUN pip install -c requirements.lock .

# Run as an unprivileged user; the volumes mounted on /data and /workspaces start out
# owned by it (Docker copies a fresh named volume's ownership from the image).
RUN useradd --create-home --uid 10001 worktrain \
    && mkdir -p /data /workspaces \
    && chown worktrain:worktrain /data /workspaces
USER worktrain

EXPOSE 3456
CMD ["worktrain", "web", "--bind", "0.0.0.0"]
