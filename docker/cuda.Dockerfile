# xlabridge on a CUDA machine: no torch_xla; the backend compiles through inductor and the
# MX cast uses its CUDA kernel. XLA tests skip themselves.
#   docker build -f docker/cuda.Dockerfile -t xlabridge:cuda .
#   docker run --gpus all xlabridge:cuda
FROM nvidia/cuda:12.8.1-cudnn-devel-ubuntu24.04

RUN apt-get update \
    && apt-get install -y --no-install-recommends python3 python3-venv python3-dev g++ make \
    && rm -rf /var/lib/apt/lists/*

ENV VIRTUAL_ENV=/opt/venv
RUN python3 -m venv $VIRTUAL_ENV
ENV PATH="$VIRTUAL_ENV/bin:$PATH"

WORKDIR /src
COPY . .
RUN pip install --no-cache-dir "torch==2.9.0" "torchvision==0.24.0" \
    && pip install --no-cache-dir --no-build-isolation -e ".[cuda,test]"

CMD ["python", "-m", "pytest", "-q", "tests"]
