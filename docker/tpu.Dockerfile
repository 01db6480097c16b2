# xlabridge on a TPU VM: torch_xla with its TPU extra (libtpu), then xlabridge's tests.
#   docker build -f docker/tpu.Dockerfile -t xlabridge:tpu .
#   docker run --privileged --net=host xlabridge:tpu
FROM python:3.11-slim

RUN apt-get update \
    && apt-get install -y --no-install-recommends g++ make \
    && rm -rf /var/lib/apt/lists/*

WORKDIR /src
COPY requirements/ requirements/
# torch_xla[tpu] 2.9.0 pins libtpu 0.0.21, the runtime it was built with: it replaces the compile-
# only libtpu 0.0.23 of requirements/dev.txt, so on this image xlabridge.tpu compiles plain XLA
# graphs but not jax 0.7.1's Pallas TPU kernels (their tests skip, saying so).
RUN pip install --no-cache-dir -r requirements/dev.txt \
    && pip install --no-cache-dir "torch_xla[tpu]==2.9.0"

COPY . .
RUN pip install --no-cache-dir --no-deps --no-build-isolation -e .

ENV PJRT_DEVICE=TPU
CMD ["python", "-m", "pytest", "-q", "tests"]
