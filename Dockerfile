# The clawpod sidecar image: `python -m clawpod.sidecar --build OUT` (see docs/contract.md §4).
# On a normal machine the base is the official slim image; where no registry is reachable, pass a
# locally built Python 3.11 image: --build-arg BASE_IMAGE=... (scripts/provision-docker.sh does).
ARG BASE_IMAGE=python:3.11-slim

# The project's wheel: pure Python (py3-none-any), built with nothing but Python; the build
# fails if it is not, since a platform wheel would need a compiler somewhere.
FROM ${BASE_IMAGE} AS wheel
COPY pyproject.toml README.md /tmp/claw/
COPY cli /tmp/claw/cli
COPY compiler /tmp/claw/compiler
COPY sidecar /tmp/claw/sidecar
RUN pip wheel --no-deps --no-cache-dir -w /wheels /tmp/claw \
 && ls /wheels/clawpod-*-py3-none-any.whl

FROM ${BASE_IMAGE}

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PIP_ROOT_USER_ACTION=ignore

# Dependencies first, from pyproject.toml alone, so editing the code reuses this (largest) layer.
COPY pyproject.toml /tmp/claw/pyproject.toml
RUN python -c 'import tomllib; p = tomllib.load(open("/tmp/claw/pyproject.toml", "rb"))["project"]; print("\n".join(p["dependencies"] + p["optional-dependencies"]["otel"]))' \
        > /tmp/claw/requirements.txt \
 && pip install -r /tmp/claw/requirements.txt \
 && rm -rf /tmp/claw

# The project itself, from its wheel; the source tree does not stay in the image.
COPY --from=wheel /wheels /tmp/wheels
COPY scripts/sidecar-entrypoint.sh /usr/local/bin/sidecar-entrypoint
RUN pip install --no-deps /tmp/wheels/*.whl \
 && rm -rf /tmp/wheels \
 && useradd --system --uid 10001 --user-group --home-dir /var/lib/claw --no-create-home claw \
 && install -d -o claw -g claw -m 0750 /var/lib/claw

USER claw
WORKDIR /var/lib/claw
VOLUME ["/var/lib/claw"]
EXPOSE 8080

HEALTHCHECK --interval=5s --timeout=3s --start-period=5s --retries=3 \
    CMD ["python", "-c", "import sys, urllib.request; sys.exit(urllib.request.urlopen('http://127.0.0.1:8080/healthz', timeout=2).status != 200)"]

# Effectively `python -m clawpod.sidecar`; see scripts/sidecar-entrypoint.sh for why it is a shim.
ENTRYPOINT ["sidecar-entrypoint"]
CMD ["--build", "/claw/build", "--state-dir", "/var/lib/claw"]
