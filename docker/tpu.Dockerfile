# xlabridge on a TPU VM: torch_xla with its TPU extra (libtpu), then xlabridge's tests.
#   docker build -f docker/tpu.Dockerfile -t xlabridge:tpu .
#   docker run --privileged --net=host xlabridge:tpu
FROM python:3.11-slim

RUN apt-get update \
    && apt-get install -y --no-install-recommends g++ make \
    && rm -rf /var/lib/apt/lists/*

WORKDIR /src
COPY requirements/ requirements/
RUN pip install --no-cache-dir -r requirements/dev.txt \
    && pip install --no-cache-dir "torch_xla[tpu]==2.9.0"

COPY . .
RUN pip install --no-cache-dir --no-deps --no-build-isolation -e .

ENV PJRT_DEVICE=TPU
CMD ["python", "-m", "pytest", "-q", "tests"]
