# syntax=docker/dockerfile:1.7
# gantry-worker (CPU): the training runtime (gantry-worker, gantry-run, gantry-predict) on an empty base.
#
#   docker build -f images/gantry-worker.Dockerfile -t registry.example.com/gantry-worker:0.1.0 .
#
# Same shape as gantry-operator.Dockerfile: a bookworm build stage, then the binaries with their
# shared libraries (OpenBLAS, libmicrohttpd, ISA-L, ...) and user 65532 on scratch.
# Pin the base by digest for a reproducible build: --build-arg DEBIAN=debian:12.12-slim@sha256:...
# Without Docker (the local cluster): hack/images.sh makes the same image from build/.
ARG DEBIAN=debian:12.12-slim

FROM ${DEBIAN} AS build
ENV DEBIAN_FRONTEND=noninteractive
COPY hack/install-deps.sh hack/versions.env /src/hack/
RUN /src/hack/install-deps.sh && rm -rf /var/lib/apt/lists/*
COPY . /src
WORKDIR /src
RUN cmake -S . -B /build -G Ninja -DCMAKE_BUILD_TYPE=Release -DGANTRY_CUDA=OFF \
 && cmake --build /build --target gantry-worker gantry-run gantry-predict \
 && images/rootfs.sh --out /rootfs /build/worker/gantry-worker /build/worker/gantry-run \
      /build/worker/gantry-predict

FROM scratch
COPY --from=build /rootfs/ /
# The worker would otherwise re-execute itself once to set this (kernels/cpu.c).
ENV OMP_WAIT_POLICY=passive
USER 65532:65532
WORKDIR /home/nonroot
ENTRYPOINT ["/usr/bin/gantry-worker"]
LABEL org.opencontainers.image.title="gantry-worker" \
      org.opencontainers.image.description="Gantry training worker (CPU: OpenBLAS, TCP ring all-reduce)" \
      org.opencontainers.image.licenses="Apache-2.0"
