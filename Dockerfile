# The llm-scheduler image: the package installed from its wheel (not editable), so the runtime
# templates and flag lists come from the package data, as on any pip install. Only `scheduler`
# is copied: the stand-ins (llm_scheduler_standins, the `standins` extra) stay out of the image.
#
#   docker build -t registry.example.com/llm-scheduler:0.1.0 .
#   nomad job run -var image=registry.example.com/llm-scheduler:0.1.0 jobspecs/llm-scheduler.nomad.hcl
#
# The same image runs the GPU reporter's Docker variant (`reporter` instead of `run`).

FROM python:3.12-slim AS build
# A C compiler for the decision core's compiled modules (setup.py, mypyc); without one the
# wheel still builds, with the pure-Python core.
RUN apt-get update && apt-get install -y --no-install-recommends gcc libc6-dev \
    && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY pyproject.toml setup.py README.md ./
COPY scheduler ./scheduler
RUN pip wheel --no-cache-dir --no-deps --wheel-dir /dist .

FROM python:3.12-slim
COPY --from=build /dist/ /tmp/dist/
RUN pip install --no-cache-dir /tmp/dist/*.whl && rm -rf /tmp/dist \
    && useradd --system --uid 10001 --no-create-home llm
USER llm
# In a container: listen on all interfaces, log JSON lines (both can be overridden by env).
ENV LLM_SCHEDULER_LISTEN_ADDR=0.0.0.0:9464 \
    LLM_SCHEDULER_LOG_FORMAT=json \
    PYTHONUNBUFFERED=1
EXPOSE 9464
ENTRYPOINT ["llm-scheduler"]
CMD ["run"]
