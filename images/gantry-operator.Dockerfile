# syntax=docker/dockerfile:1.7
# gantry-operator: the TrainingJob controller, on an empty base (no shell, no package manager).
#
#   docker build -f images/gantry-operator.Dockerfile -t registry.example.com/gantry-operator:0.1.0 .
#
# Build stage: Debian bookworm with the project's own dependency list (hack/install-deps.sh), a
# Release build, then images/rootfs.sh copies the binary, its shared libraries (ldd) and a
# non-root user into /rootfs. Final stage: that /rootfs on scratch, user 65532.
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
 && cmake --build /build --target gantry-operator \
 && images/rootfs.sh --out /rootfs /build/operator/gantry-operator

FROM scratch
COPY --from=build /rootfs/ /
USER 65532:65532
WORKDIR /home/nonroot
ENTRYPOINT ["/usr/bin/gantry-operator"]
LABEL org.opencontainers.image.title="gantry-operator" \
      org.opencontainers.image.description="Gantry operator: runs TrainingJobs (gantry.dev/v1alpha1)" \
      org.opencontainers.image.licenses="Apache-2.0"
