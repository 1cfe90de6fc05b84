# syntax=docker/dockerfile:1.7
# gantry-worker-cuda: the training runtime built with CUDA 13 + NCCL, on NVIDIA's CUDA runtime
# base (which carries cudart, cuBLAS and NCCL; the driver's libcuda comes from the NVIDIA
# container runtime on the node).
#
#   docker build -f images/gantry-worker-cuda.Dockerfile -t registry.example.com/gantry-worker-cuda:0.1.0 .
#
# Build stage: the CUDA devel image (nvcc, headers) plus the project's C dependencies; the
# binaries and the libraries they need that the runtime base lacks (images/rootfs.sh with the
# CUDA and glibc libraries excluded) go onto the runtime base. Nothing runs a shell: the
# entrypoint is exec form. Pin both bases by digest for a reproducible build:
#   --build-arg CUDA_DEVEL=nvidia/cuda:13.0.2-devel-ubuntu24.04@sha256:...
#   --build-arg CUDA_RUNTIME=nvidia/cuda:13.0.2-runtime-ubuntu24.04@sha256:...
# The image tag and CUDA version match hack/versions.env (CUDA 13.0, NCCL 2.28).
ARG CUDA_DEVEL=nvidia/cuda:13.0.2-devel-ubuntu24.04
ARG CUDA_RUNTIME=nvidia/cuda:13.0.2-runtime-ubuntu24.04

FROM ${CUDA_DEVEL} AS build
ENV DEBIAN_FRONTEND=noninteractive
RUN apt-get update -qq \
 && apt-get install -y -qq --no-install-recommends build-essential cmake ninja-build pkg-config \
      libcurl4-openssl-dev libjansson-dev libyaml-dev libssl-dev libopenblas-dev \
      libmicrohttpd-dev libisal-dev libnccl-dev ca-certificates \
 && rm -rf /var/lib/apt/lists/*
COPY . /src
WORKDIR /src
RUN cmake -S . -B /build -G Ninja -DCMAKE_BUILD_TYPE=Release -DGANTRY_CUDA=ON \
      -DGANTRY_CUDA_ROOT=/usr/local/cuda \
 && cmake --build /build --target gantry-worker gantry-run gantry-predict \
 && images/rootfs.sh --out /rootfs \
      --exclude '(^|/)(ld-linux[^/]*|lib(c|m|dl|rt|pthread|gcc_s|stdc\+\+|cuda|cudart|cublas|cublasLt|nccl|nvidia-[a-z-]*)\.so[^/]*)$' \
      /build/worker/gantry-worker /build/worker/gantry-run /build/worker/gantry-predict \
 && rm -rf /rootfs/lib /rootfs/bin /rootfs/lib64 /rootfs/etc/nsswitch.conf /rootfs/etc/ssl \
      /rootfs/proc /rootfs/sys /rootfs/dev /rootfs/tmp /rootfs/var

FROM ${CUDA_RUNTIME}
# The base's own user database gets the nonroot user (uid/gid 65532) the Kubernetes pod asks for.
COPY --from=build /rootfs/usr/ /usr/
COPY --from=build /rootfs/home/ /home/
RUN ["/usr/sbin/useradd", "--uid", "65532", "--user-group", "--no-create-home", "--home-dir", "/home/nonroot", "--shell", "/usr/sbin/nologin", "nonroot"]
ENV OMP_WAIT_POLICY=passive \
    NVIDIA_VISIBLE_DEVICES=all \
    NVIDIA_DRIVER_CAPABILITIES=compute,utility
USER 65532:65532
WORKDIR /home/nonroot
ENTRYPOINT ["/usr/bin/gantry-worker"]
LABEL org.opencontainers.image.title="gantry-worker-cuda" \
      org.opencontainers.image.description="Gantry training worker (CUDA 13, NCCL, bf16)" \
      org.opencontainers.image.licenses="Apache-2.0"
