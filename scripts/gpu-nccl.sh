#!/usr/bin/env bash
# gpu-nccl.sh: the NCCL transport's checks on a machine with a GPU and NCCL
# (runtime/transport/nccl; docs/internals.md, "The NCCL transport").
#
#   scripts/gpu-nccl.sh          on a GPU machine: the CUDA runtime and NCCL
#                                from the loader's search path, or from
#                                PPGEN_CUDART_LIB and PPGEN_NCCL_LIB
#   scripts/gpu-nccl.sh --stub   the same against the test double
#                                (testdata/ncclstub, built with cc): checks
#                                the script itself on a machine without a GPU
#
# 1. A world of one rank sends tensors to itself through the device and
#    receives them (one at a time and as one NCCL group), and times a 64 MiB
#    round trip: go test -run TestGPUSelf with PPGEN_NCCL_GPU=1.
# 2. NCCL's collectives (the transport's groups): a world of one rank with a
#    group of one runs every collective on the device; with 2 GPUs or more,
#    a world of up to 4 ranks (one GPU each) runs every collective on the
#    world and on a subset of it, directly and through runtime/collective,
#    against a sequential reference (NCCL's sums within 1e-12 float64, 1e-5
#    float32 of the magnitudes): go test -run TestGPUCollectives.
# 3. examples/mlp over NCCL (built with -tags nccl), -check against
#    sequential training: its schedules have 4 ranks, and NCCL refuses two
#    ranks of a communicator on one GPU, so it needs 4 GPUs (skipped, and said
#    so, with fewer). MLP_SCHEDULES overrides the schedules run (default
#    "1f1b zbv").
# 4. examples/mlp -dp 2 over NCCL (8 ranks: 8 GPUs, else skipped and said
#    so), -check: FSDP (1f1b-fsdp-swap, NCCL's all-to-all and all-gather
#    with member-order sums) and plain data parallelism on 1f1b (NCCL's own
#    all-reduce, -collectives native).
set -euo pipefail
cd "$(dirname "$0")/.."

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

gpus=0
if [ "${1:-}" = --stub ]; then
	echo "gpu-nccl: against the test double (no GPU is used)"
	"${CC:-cc}" -shared -fPIC -O1 -o "$tmp/libncclstub.so" \
		runtime/transport/nccl/testdata/ncclstub/cudart.c runtime/transport/nccl/testdata/ncclstub/nccl.c -lpthread
	export PPGEN_CUDART_LIB="$tmp/libncclstub.so" PPGEN_NCCL_LIB="$tmp/libncclstub.so"
	export NCCLSTUB_DEVICES=8 # the test double reports 8 "devices", one per rank
	gpus=8
else
	if ! command -v nvidia-smi >/dev/null 2>&1 || ! nvidia-smi -L; then
		echo "gpu-nccl: no GPU (nvidia-smi lists none): run this on a machine with an NVIDIA GPU, its driver, the CUDA runtime and NCCL" >&2
		exit 1
	fi
	gpus=$(nvidia-smi -L | grep -c '^GPU ' || true)
fi
go version

echo "== 1. world of one rank: self send and receive through the device"
PPGEN_NCCL_GPU=1 go test -count=1 -run '^TestGPUSelf$' -v ./runtime/transport/nccl/

echo "== 2. NCCL's collectives: a group of one, then up to 4 ranks (this machine: $gpus GPUs)"
PPGEN_NCCL_GPU=1 PPGEN_NCCL_GPUS=$gpus go test -count=1 -run '^TestGPUCollectives$' -v ./runtime/transport/nccl/

CGO_ENABLED=0 go build -tags nccl -o "$tmp/mlp" ./examples/mlp
echo "== 3. examples/mlp over NCCL"
if [ "$gpus" -lt 4 ]; then
	echo "skipped: examples/mlp runs 4 ranks, one GPU each (NCCL refuses two ranks on one GPU); this machine has $gpus"
else
	for s in ${MLP_SCHEDULES:-1f1b zbv}; do
		echo "-- $s"
		PPGEN_TIMEOUT=${PPGEN_TIMEOUT:-2m} "$tmp/mlp" -transport nccl -schedule "$s" -check
	done
fi

echo "== 4. examples/mlp -dp 2 over NCCL: NCCL's collectives in training"
if [ "$gpus" -lt 8 ]; then
	echo "skipped: -dp 2 runs 4 pipeline ranks x 2 replicas = 8 ranks, one GPU each; this machine has $gpus"
else
	echo "-- 1f1b-fsdp-swap (member-order sums)"
	PPGEN_TIMEOUT=${PPGEN_TIMEOUT:-2m} "$tmp/mlp" -transport nccl -dp 2 -schedule 1f1b-fsdp-swap -check
	echo "-- 1f1b (NCCL's own all-reduce)"
	PPGEN_TIMEOUT=${PPGEN_TIMEOUT:-2m} "$tmp/mlp" -transport nccl -dp 2 -schedule 1f1b -collectives native -check
fi
echo "gpu-nccl: all passed"
