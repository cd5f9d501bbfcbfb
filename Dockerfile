# The llm-scheduler image: the package installed from its wheel (not editable), so the runtime
# templates and flag lists come from the package data, as on any pip install. Only `scheduler`
# is copied: the stand-ins (llm_scheduler_standins, the `standins` extra) stay out of the image.
#
#   docker build -t registry.example.com/llm-scheduler:0.1.0 .
#   nomad job run -var image=registry.example.com/llm-scheduler:0.1.0 jobspecs/llm-scheduler.nomad.hcl
#
# The same image runs the GPU reporter's Docker variant (`reporter` instead of `run`).
#
# Python 3.11, the version the test suite runs on: the compiled decision core executes 21% more
# instructions a pass on 3.12 and 3.13 (473 M against 573 M and 570 M at 1,000 nodes, valgrind,
# bench/pass_compare's fleet). The official images build libpython as a shared library, and
# from 3.12 CPython keeps the current thread state in a thread-local variable there: reading it
# is a call to __tls_get_addr, in many of the C API calls the compiled core makes (7% of the
# instructions of a 3.12 pass). Another base:
#   docker build --build-arg PYTHON_IMAGE=python:3.13-slim ...
ARG PYTHON_IMAGE=python:3.11-slim

FROM ${PYTHON_IMAGE} AS build
# A C compiler for the decision core's compiled modules (setup.py, mypyc); without one the
# wheel still builds, with the pure-Python core.
RUN apt-get update && apt-get install -y --no-install-recommends gcc libc6-dev \
    && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY pyproject.toml setup.py README.md ./
COPY scheduler ./scheduler
RUN pip wheel --no-cache-dir --no-deps --wheel-dir /dist .

FROM ${PYTHON_IMAGE}
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
