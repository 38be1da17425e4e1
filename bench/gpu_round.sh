#!/usr/bin/env bash
# The GPU figures of docs/RESULTS.md that a CPU cannot give, section by section, each
# written under $OUT (default runs/gpu-round) as it lands, so that a call cut short keeps
# what finished. Run from the checkout on a GPU machine, KernelBench next to it
# (../shared/kernelbench), Ray, DEAP and litellm importable:
#
#   bash bench/gpu_round.sh tests attacks          # the GPU tests, then the attack suite
#   bash bench/gpu_round.sh confine-honest         # the suite's honest kernels under the confinement (needs numpy<2.4)
#   bash bench/gpu_round.sh coverage               # level 1 prepared at own shapes: footprint and slots a problem
#   bash bench/gpu_round.sh seeds sol-sweep        # kevo seed + verify at own shapes (SEED_PROBLEMS: those only); a sweep that stops at SOL
#   bash bench/gpu_round.sh fixtures               # Inductor's GPU output under each configuration; seed --all
#   bash bench/gpu_round.sh stream real-size       # a 48-variant cold stream; 23_Softmax at its own shapes (RS_PROBLEM, RS_SLOTS, RS_COMPILE_S,
#                                                  # RS_PROFILE_SHARE, RS_PROFILER=off, RS_EVALS (24); RS_AHEAD=false: no compiling ahead; RS_NAME: the run dir)
#   bash bench/gpu_round.sh spy-stream spy-real    # the cold stream, and 23_Softmax at its own shapes, sampled by py-spy:
#                                                  # where every process's threads wait
#   bash bench/gpu_round.sh sol30 sol-extra        # kevo's best at own shapes on 33 (and 5 more) level-1 problems (resumable)
#   bash bench/gpu_round.sh models                 # extract, sweep and apply five level-3 models (MODELS, MODEL_EVALS, MODEL_WALL, MODEL_SIDE)
#   bash bench/gpu_round.sh extract                # kevo extract over every level-3 model
#   bash bench/gpu_round.sh gemm                   # levels 1 and 2's GEMMs from compile seeds: the precision table
#   bash bench/gpu_round.sh vs-compile             # bench/kernelbench_vs_compile.yaml: best and seed over torch.compile, clean clock
#   bash bench/gpu_round.sh seed-gap               # the seed's time four ways at own shapes; torch.compile dynamic and default
#   bash bench/gpu_round.sh level1-seeds           # seeds: compile over all of level 1 at own shapes (runs/kb-level1, resumable;
#                                                  # L1_PROBLEMS="31 34-100": those only; L1_DIR=runs/NAME: another run dir;
#                                                  # L1_SIDE: runs side by side, default 4; L1_WALL: a run's wall limit, default 90 s)
#
# Every section's device busy share is sampled by nvidia-smi and summarised in round.log (bench/util_summary.py).
# SECTION_S (default 540) bounds each section; ROUND_S (default 580) the whole call. PACK=FILE.tgz
# packs $OUT into one archive after every section (a device call brings back only a few files;
# with OUT outside the folder it brings back and PACK inside it, a call cut short keeps the archive):
#
#   OUT=/tmp/round PACK=$OUT_OF_THE_CALL/round.tgz bash bench/gpu_round.sh coverage stream
set -u
OUT=${OUT:-runs/gpu-round}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}
# KernelBench: $KB, else a copy carried to the device in build/kb (git-ignored), else ../shared/kernelbench
if [[ -z ${KB:-} ]]; then
    if [[ -d build/kb/level1 ]]; then KB=$PWD/build/kb; else KB=$(cd .. && pwd)/shared/kernelbench; fi
fi
export KB KEVO_KERNELBENCH=$KB  # the tests find it there too
# numpy as kevo declares it (<2.4: Triton 3.6's interpreter, which the CPU-platform tests run, fails under 2.4):
# a wheel carried in build/np (git-ignored), installed under NP_DIR (default $TMPDIR/kevo-np), goes first on the path
if ls build/np/numpy-*.whl > /dev/null 2>&1; then
    NP_DIR=${NP_DIR:-${TMPDIR:-/tmp}/kevo-np}
    python3 -m pip install -q --no-index --no-deps --target "$NP_DIR" build/np/numpy-*.whl 2> /dev/null
    export PYTHONPATH=$NP_DIR:$PYTHONPATH
fi
L1=$KB/level1 L3=$KB/level3
# Ray, DEAP and litellm come from the bundle (.devbundle/activate.sh): a PYTHONPATH set after the activation
# hides them, and every section would fail one by one; say so once, at the start
if ! python3 -c "import ray, deap, litellm" 2> "$OUT/imports.txt"; then
    echo "gpu_round: Ray, DEAP or litellm cannot be imported (source .devbundle/activate.sh, and keep its" \
         "PYTHONPATH): $(tail -1 "$OUT/imports.txt")" | tee -a "$OUT/round.log" >&2
    exit 2
fi
start=$(date +%s)
{ nvidia-smi -L; python3 -c "import torch, triton; print(torch.__version__, triton.__version__)"; git rev-parse HEAD 2>/dev/null || cat COMMIT 2>/dev/null; } > "$OUT/env.txt" 2>&1

left() {  # seconds this section may take: its own bound, and what the call has left
    local used=$(( $(date +%s) - start )) round=${ROUND_S:-580} own=${SECTION_S:-540}
    local rest=$(( round - used ))
    (( rest < own )) && own=$rest
    (( own < 1 )) && own=1
    echo "$own"
}

device_use() {  # what holds the device now: its processes and their memory, and kevo's processes
    # (a section that finds memory taken by a call before's processes says so in round.log)
    nvidia-smi --query-gpu=memory.used,memory.total --format=csv,noheader 2> /dev/null | sed 's/^/   device memory: /'
    nvidia-smi --query-compute-apps=pid,used_memory --format=csv,noheader 2> /dev/null | while IFS=, read -r pid mem; do
        echo "   on the device: pid $pid,$mem: $(ps -o etimes=,args= -p "$pid" 2> /dev/null | cut -c1-150)"
    done
    # the timed-window lock (platforms.device_lock, a flock): who holds it now
    lslocks -n -o PID,PATH 2> /dev/null | grep 'kevo/locks' | sed 's/^/   device lock held: /'
}

section() {  # name: runs the section, logs its time and exit code
    local name=$1 t0 rc
    t0=$(date +%s)
    echo "== $name (up to $(left) s)" >> "$OUT/round.log"
    device_use >> "$OUT/round.log"
    # while it runs, what holds the device every ${SAMPLE_S:-20} s (a section that stalls shows what held it)
    ( while sleep "${SAMPLE_S:-20}"; do echo "-- $name +$(( $(date +%s) - t0 )) s"; device_use; done \
        >> "$OUT/$name.device.log" 2>&1 ) &
    local sampler=$! util=
    # the device's busy share (a kernel running) and its memory traffic's, every ${UTIL_MS:-250} ms
    if command -v nvidia-smi > /dev/null; then
        nvidia-smi --query-gpu=timestamp,utilization.gpu,utilization.memory,memory.used --format=csv,noheader,nounits \
            -lms "${UTIL_MS:-250}" > "$OUT/$name.util.csv" 2> /dev/null &
        util=$!
    fi
    "sec_${name//-/_}" > "$OUT/$name.log" 2>&1
    rc=$?
    kill "$sampler" $util 2> /dev/null
    wait "$sampler" $util 2> /dev/null
    [[ -n $util ]] && python3 bench/util_summary.py "$OUT/$name.util.csv" >> "$OUT/round.log" 2>&1
    echo "== $name rc=$rc in $(( $(date +%s) - t0 )) s" >> "$OUT/round.log"
    device_use >> "$OUT/round.log"
    pack
}

pack() {  # $OUT as one archive at $PACK, replaced whole (never half written)
    [[ -n ${PACK:-} ]] || return 0
    tar czf "$PACK.part" -C "$OUT" . 2> /dev/null && mv "$PACK.part" "$PACK"
}

sec_tests() {
    timeout "$(left)" python3 -m pytest -q -p no:cacheprovider tests/test_gpu.py tests/test_lane.py \
        tests/test_gpu_profile.py tests/test_confine.py
}

sec_confine_honest() {  # the suite's honest kernels under the guard and the confinement (CPU platform)
    timeout "$(left)" python3 -m pytest -q -p no:cacheprovider tests/test_confine.py -k honest
}

sec_coverage() {  # level 1 at its own shapes prepared: each problem's footprint and the evaluations at once (of 3)
    timeout "$(left)" python3 bench/kernelbench_coverage.py "$L1" --slots 3 --out "$OUT/coverage.jsonl"
}

sec_attacks() {
    timeout "$(left)" python3 -m pytest -q -p no:cacheprovider tests/test_attacks.py
}

sec_seeds() {  # strong first kernels: kevo seed + verify at each problem's own shapes, and past 2^31 elements
    mkdir -p "$OUT/seeds"
    local p
    for p in ${SEED_PROBLEMS:-19_ReLU 23_Softmax 25_Swish 40_LayerNorm 48_Mean_reduction_over_a_dimension \
             2_Standard_matrix_multiplication_ 50_conv_standard_2D__square_input__square_kernel}; do
        timeout "$(left)" python3 -m evolve.cli seed "$L1/$p.py" -o "$OUT/seeds/$p.py" || continue
        timeout "$(left)" python3 -m evolve.cli verify "$L1/$p.py" "$OUT/seeds/$p.py" --device cuda --json \
            > "$OUT/seeds/$p.json"
    done
    [[ -n ${SEED_PROBLEMS:-} ]] && return  # the problems named only
    # 143 x 4867 x 4801: 3.3 billion elements, past 32-bit indexing
    timeout "$(left)" python3 -m evolve.cli verify "$L1/48_Mean_reduction_over_a_dimension.py" \
        "$OUT/seeds/48_Mean_reduction_over_a_dimension.py" --device cuda --json \
        --shape batch_size=143 --shape dim1=4867 --shape dim2=4801 > "$OUT/seeds/48_Mean_past_2e31.json"
}

sec_fixtures() {  # what a GPU's Inductor writes under each configuration (to set beside the CPU's recordings)
    local p
    for p in softmax/reference gelu/reference matmul/reference; do
        timeout "$(left)" python3 tests/fixtures/seed_variants/record.py problems "$p" --device cuda \
            --out "$OUT/seed_variants_cuda.jsonl"
    done
    for p in 50_conv_standard_2D__square_input__square_kernel 40_LayerNorm; do
        timeout "$(left)" python3 tests/fixtures/seed_variants/record.py "$L1" "$p" --device cuda \
            --out "$OUT/seed_variants_cuda.jsonl"
    done
    mkdir -p "$OUT/seeds-all"
    timeout "$(left)" python3 -m evolve.cli seed "$KB/level2/1_Conv2D_ReLU_BiasAdd.py" --all -o "$OUT/seeds-all/conv_bias"
}

sec_sol_sweep() {  # a sweep that stops problems at the speed of light and hands their budget on
    cat > "$OUT/sol_sweep.yaml" <<EOF
defaults:
  search: {population_size: 4, max_evaluations: 12, seed: 0, stop_at_sol: 0.85}
  operators: {weights: {parametric_mutation: 0.7, parametric_crossover: 0.3}}
  platform: cuda
problems:
  - {reference: $L1/19_ReLU.py, seeds: compile}
  - {reference: $L1/25_Swish.py, seeds: compile}
  - {reference: $L1/23_Softmax.py, seeds: compile}
  - {reference: $L1/2_Standard_matrix_multiplication_.py, seeds: compile}
  - {reference: $L1/1_Square_matrix_multiplication_.py, seeds: compile}
EOF
    timeout "$(left)" python3 -m evolve.cli sweep "$OUT/sol_sweep.yaml" --run-dir "$OUT/sol-sweep" --json \
        > "$OUT/sol_sweep.json"
    cp "$OUT/sol-sweep/summary.json" "$OUT/sol_sweep_summary.json" 2>/dev/null
    # where each run stands, from the stores: there even when the section's limit cut the sweep off
    timeout 60 python3 -m evolve.cli report "$OUT/sol-sweep" > "$OUT/sol_sweep_report.md" 2>&1
}

sec_sol30() {  # kevo's best at own shapes over 33 level-1 problems: SOL beside eager's and torch.compile's.
    sol_sweep sol30 "4_Matrix_vector_multiplication_ 5_Matrix_scalar_multiplication 12_Matmul_with_diagonal_matrices_
        19_ReLU 20_LeakyReLU 21_Sigmoid 22_Tanh 23_Softmax 25_Swish 27_SELU_ 28_HardSigmoid 29_Softplus 30_Softsign
        31_ELU 32_HardTanh 33_BatchNorm 40_LayerNorm 41_Max_Pooling_1D 42_Max_Pooling_2D 44_Average_Pooling_1D
        48_Mean_reduction_over_a_dimension 49_Max_reduction_over_a_dimension 51_Argmax_over_a_dimension
        53_Min_reduction_over_a_dimension 88_MinGPTNewGelu 89_cumsum 93_masked_cumsum 94_MSELoss 98_KLDivLoss
        100_HingeLoss 1_Square_matrix_multiplication_ 6_Matmul_with_large_K_dimension_
        9_Tall_skinny_matrix_multiplication_"
}

sec_sol_extra() {  # the same over five more level-1 problems (runs/sol-extra)
    sol_sweep sol-extra "37_FrobeniusNorm_ 38_L1Norm_ 39_L2Norm_ 52_Argmin_over_a_dimension 34_InstanceNorm"
}

sweep_or_resume() {  # run dir, sweep file: the sweep into the run dir (under runs/, kept between calls on a
    # warm machine, or carried), or its resume where a call before began it; the run dir comes back packed in
    # $OUT/NAME.tgz, so that a call on a machine gone cold can carry it (untar into runs/, carry runs/NAME)
    local rc
    mkdir -p runs
    if [[ -f $1/sweep.json ]]; then
        timeout "$(left)" python3 -m evolve.cli resume "$1"
    else
        timeout "$(left)" python3 -m evolve.cli sweep "$2" --run-dir "$1"
    fi
    rc=$?
    tar czf "$OUT/$(basename "$1").tgz" -C "$(dirname "$1")" "$(basename "$1")" 2> /dev/null
    return $rc
}

sol_sweep() {  # name, problems: the sweep lives in runs/NAME (kept between calls on a warm machine, or
    # carried): a later call resumes it
    local name=$1 p
    {
        echo "defaults:"
        echo "  search: {population_size: 3, max_evaluations: 4, seed: 0, stop_at_sol: 0.9}"
        echo "  operators: {weights: {parametric_mutation: 0.7, parametric_crossover: 0.3}}"
        echo "  platform: cuda"
        echo "side_by_side: 2"
        echo "problems:"
        for p in $2; do echo "  - {reference: $L1/$p.py, seeds: compile}"; done
    } > "$OUT/$name.yaml"
    sweep_or_resume "runs/$name" "$OUT/$name.yaml" > "$OUT/$name.txt"
    cp "runs/$name/summary.json" "$OUT/${name}_summary.json" 2> /dev/null
    timeout 60 python3 -m evolve.cli report "runs/$name" >> "$OUT/$name.txt" 2>&1
}

sec_stream() {  # 48 distinct softmax variants, Triton's cache emptied first, 1 actor x 12 slots, then x 4 (warm)
    TRITON_CACHE_DIR=$(mktemp -d) timeout "$(left)" python3 bench/throughput_bench.py --config configs/softmax.yaml \
        --shape batch_size=4096 --shape dim=8192 --candidates 48 --plans 1x12 1x4 --fresh 0 --out "$OUT/stream.json"
}

sec_real_size() {  # a row reduction at its own shapes (RS_PROBLEM, default 23_Softmax: 4096 x 393216 fp32;
    # the KernelBench copy here has no 24_LogSoftmax), profiler on: evaluations/s of kevo run
    cat > "$OUT/softmax.yaml" <<EOF
problem: {reference: $L1/${RS_PROBLEM:-23_Softmax}.py, seeds: compile}
search: {population_size: 4, max_evaluations: ${RS_EVALS:-24}, seed: 0}
operators: {weights: {parametric_mutation: 0.7, parametric_crossover: 0.3}}
platform: cuda
cluster: {slots: ${RS_SLOTS:-null}}
EOF
    echo "fitness: {compile_timeout_s: ${RS_COMPILE_S:-60}, compile_ahead: ${RS_AHEAD:-true}}" >> "$OUT/softmax.yaml"
    [[ -n ${RS_PROFILE_SHARE:-} ]] && echo "profiler: {max_device_share: $RS_PROFILE_SHARE}" >> "$OUT/softmax.yaml"
    [[ ${RS_PROFILER:-} == off ]] && echo "profiler: {enabled: false}" >> "$OUT/softmax.yaml"
    local t0=$(date +%s) run=$OUT/${RS_NAME:-softmax}  # RS_NAME: another run dir, for a second run in one call
    cp "$OUT/softmax.yaml" "$run.yaml"
    timeout "$(left)" python3 -m evolve.cli run "$run.yaml" --run-dir "$run"
    echo "kevo run wall $(( $(date +%s) - t0 )) s"
    timeout 60 python3 -m evolve.cli report "$run" > "${run}_report.txt"
    python3 - "$run/run.sqlite" <<'EOF'  # the pace once evaluations land: first to last result
import sqlite3, sys
db = sqlite3.connect(sys.argv[1])
n, first, last, made = db.execute("SELECT count(*), min(finished_at), max(finished_at), min(created_at)"
                                  " FROM individuals WHERE finished_at IS NOT NULL").fetchone()
print(f"{n} results; first {first - made:.1f} s after the first candidate; "
      f"then {(n - 1) / max(last - first, 1e-9):.2f} evaluations/s over {last - first:.1f} s")
print("profiles", db.execute("SELECT count(*) FROM profiles").fetchone()[0])
import json, statistics
walls = [json.loads(r)["walls_s"] for (r,) in db.execute("SELECT result FROM individuals WHERE result IS NOT NULL")]
walls = [w for w in walls if w and "window" in w]
for part in ("total", "ahead", "ahead: compile", "wait: memory plan", "wait: an evaluator", "worker start", "wait: lane", "step call", "compile", "reference outputs", "compare", "window",
             "time: warm-up", "time: hand-over", "time: prepare", "time: input check"):
    seen = [w[part] for w in walls if part in w]
    if seen:
        print(f"median {part}: {statistics.median(seen):.3f} s over {len(seen)} evaluations")
costs = [json.loads(r).get("cost") or {} for (r,) in db.execute("SELECT record FROM profiles")]
print("profiles' device s:", [round(c.get("device_s") or 0.0, 2) for c in costs],
      "tool runs:", [c.get("tool_runs") for c in costs], "replay passes:", [c.get("replay_passes") for c in costs])
# when each evaluation held its place under the memory plan, and each profile run the device: how many at once
spans = sorted(json.loads(r).get("admitted_s") or [] for (r,) in db.execute("SELECT result FROM individuals WHERE result IS NOT NULL"))
spans = [s for s in spans if s]
turns = sorted(t for c in costs for t in c.get("device_turns") or [])
from evolve.report_time import at_once  # kevo report's own count
counted = at_once(spans)
if counted is not None:
    t0 = spans[0][0]
    print(f"admitted: {counted[0]:.2f} evaluations at once on average, {counted[1]} at most, "
          f"none for {counted[2]:.1f} s, over {counted[3]:.1f} s")
    print("admitted spans (s from the first):", [(round(a - t0, 2), round(b - t0, 2)) for a, b in spans])
    print("profile turns (asked, let on, done; s from the first admission):",
          [tuple(round(x - t0, 2) for x in t) for t in turns])
EOF
}

spy() {  # name, then a command: run it under py-spy (every process under it, waiting threads too), then summarise
    local name=$1; shift
    # py-spy: pip download py-spy --no-deps -d .devbundle (activate.sh installs every wheel there)
    if ! command -v py-spy > /dev/null; then echo "py-spy is not installed"; return 1; fi
    # where py-spy may not read other processes (no ptrace in the container), the command runs plain
    if ! timeout 60 py-spy record --rate 10 --duration 1 --format raw -o "$OUT/spy_probe.txt" -- \
            python3 -c "import time; time.sleep(3)" > /dev/null 2>&1; then
        echo "py-spy cannot sample here: running the command without it"
        timeout "$(left)" "$@"
        return
    fi
    # py-spy starts the command (its descendants may be traced where ptrace is limited to them); at the
    # section's limit the command is stopped, and py-spy writes what it has once it exits
    py-spy record --subprocesses --idle --threads --rate 50 --format raw -o "$OUT/spy_$name.txt" -- "$@" &
    local spy=$! dog
    ( sleep "$(left)"; pkill -TERM -P "$spy" ) &
    dog=$!
    wait "$spy"
    kill "$dog" 2> /dev/null
    python3 bench/spy_summary.py "$OUT/spy_$name.txt" --rate 50 --top 25 > "$OUT/spy_$name.summary.txt"
    python3 bench/spy_summary.py "$OUT/spy_$name.txt" --rate 50 --top 60 --json > "$OUT/spy_$name.summary.json"
    # the raw stacks, compressed, where they leave the packed archive under a device call's 16 MiB a file
    gzip -9f "$OUT/spy_$name.txt"
    (( $(stat -c %s "$OUT/spy_$name.txt.gz") < 6000000 )) || rm -f "$OUT/spy_$name.txt.gz"
}

sec_spy_stream() {  # the cold stream (36 variants, 1 actor x 12 slots) sampled: where each process's threads wait
    TRITON_CACHE_DIR=$(mktemp -d) spy stream python3 bench/throughput_bench.py --config configs/softmax.yaml \
        --shape batch_size=4096 --shape dim=8192 --candidates 36 --plans 1x12 --fresh 0 --out "$OUT/spy_stream.json"
}

sec_spy_real() {  # 23_Softmax at its own shapes, 12 evaluations, profiler off, sampled
    cat > "$OUT/spy_real.yaml" <<EOF
problem: {reference: $L1/23_Softmax.py, seeds: [$PWD/problems/softmax/seed.py]}
search: {population_size: 4, max_evaluations: 12, seed: 0}
operators:
  space: {softmax_kernel.BLOCK_SIZE: [2048, 4096, 8192, 16384], softmax_kernel.num_warps: [4, 8, 16]}
  weights: {parametric_mutation: 0.7, parametric_crossover: 0.3}
profiler: {enabled: false}
platform: cuda
EOF
    spy real python3 -m evolve.cli run "$OUT/spy_real.yaml" --run-dir "$OUT/spy-real"
    timeout 60 python3 -m evolve.cli report "$OUT/spy-real" > "$OUT/spy_real_report.txt" 2>&1
}

sec_models() {  # whole models: extract at own shapes, sweep the regions (MODEL_EVALS each, at most MODEL_WALL s
    # a region), put the best kernels back under torch.compile (and write the module). Default: those not yet taken end to end on the H200 (1_MLP and
    # 3_DeepNarrowMLP were, on 2026-12-03)
    local m
    for m in ${MODELS:-2_ShallowWideMLP 17_SqueezeNetFireModule 28_VisionTransformer 19_MobileNetV1 11_VGG16}; do
        timeout "$(left)" python3 -m evolve.cli extract "$L3/$m.py" -o "$OUT/models/$m" --device cuda --json \
            > "$OUT/models_$m.extract.json" || continue
        sed -i -E "s/population_size: [0-9]+/population_size: 4/; s/max_evaluations: [0-9]+/max_evaluations: ${MODEL_EVALS:-12}, max_wall_time_s: ${MODEL_WALL:-60}/" \
            "$OUT/models/$m/sweep.yaml"
        echo "side_by_side: ${MODEL_SIDE:-3}" >> "$OUT/models/$m/sweep.yaml"  # a model's regions are small: several at once
        timeout "$(left)" python3 -m evolve.cli sweep "$OUT/models/$m/sweep.yaml" --run-dir "$OUT/models/$m/sweep" \
            --json > "$OUT/models_$m.sweep.json"
        timeout 60 python3 -m evolve.cli report "$OUT/models/$m/sweep" > "$OUT/models_$m.sweep.md" 2>&1
        timeout "$(left)" python3 -m evolve.cli apply "$L3/$m.py" "$OUT/models/$m/sweep" --device cuda --json \
            --module "$OUT/models/$m/module" > "$OUT/models_$m.apply.json"
        # the module as a user takes it: a fresh process imports it and compiles the model
        for pkg in "$OUT/models/$m/module"/kevo_*; do
            [[ -d $pkg ]] || continue
            PYTHONPATH=$(dirname "$pkg"):$PYTHONPATH timeout 300 python3 - "$L3/$m.py" "$(basename "$pkg")" \
                > "$OUT/models_$m.module.txt" 2>&1 <<'EOF'
import importlib, importlib.util, sys
import torch
spec = importlib.util.spec_from_file_location("user_model", sys.argv[1])
user = importlib.util.module_from_spec(spec)
spec.loader.exec_module(user)
torch.manual_seed(0)
model = user.Model(*user.get_init_inputs()).cuda()
inputs = [x.cuda() if isinstance(x, torch.Tensor) else x for x in user.get_inputs()]
module = importlib.import_module(sys.argv[2])
backend = module.backend(model)
compiled = torch.compile(model, backend=backend, dynamic=False)
with torch.no_grad():
    want, got = model(*inputs), compiled(*inputs)
print("max |patched - eager|", (got - want).abs().max().item(), "regions matched", backend.found())
EOF
        done
        pack
    done
}

sec_gemm() {  # the GEMMs of levels 1 and 2 at own shapes from compile seeds (precision twins included); the
    # table of best against eager and torch.compile, and the precision that passed (runs/kb-gemm: resumable)
    python3 - "$OUT/gemm_sweep.yaml" <<'EOF'
import os, sys, pathlib, yaml
sweep = yaml.safe_load(open("bench/kernelbench_gemm_sweep.yaml"))
for p in sweep["problems"]:  # the same files, read from $KB
    level, name = pathlib.Path(p["reference"]).parts[-2:]
    p["reference"] = str(pathlib.Path(os.environ["KB"], level, name))
yaml.safe_dump(sweep, open(sys.argv[1], "w"))
EOF
    sweep_or_resume runs/kb-gemm "$OUT/gemm_sweep.yaml" > "$OUT/gemm.txt"
    timeout 120 python3 bench/compile_sweep_table.py runs/kb-gemm --json "$OUT/gemm_table.json" > "$OUT/gemm_table.md"
}

sec_level1_seeds() {  # seeds: compile over the whole of level 1 at its own shapes: which problems get an accepted
    # seed, and why the others get none (runs/kb-level1: resumable; L1_SIDE runs side by side, default 4: eight captures at own shapes got no seed in 235 s on an H100).
    # L1_PROBLEMS="31 34-100": only the problems with those leading numbers (copied into runs/l1-part)
    local folder=$L1
    if [[ -n ${L1_PROBLEMS:-} ]]; then
        folder=$PWD/runs/l1-part
        rm -rf "$folder"  # the problems named this time, not those of a call before
        python3 - "$L1" "$folder" "$L1_PROBLEMS" <<'EOF' || return 1
import pathlib, re, shutil, sys
source, folder, spec = pathlib.Path(sys.argv[1]), pathlib.Path(sys.argv[2]), sys.argv[3].split()
wanted = set()
for part in spec:
    low, _, high = part.partition("-")
    wanted.update(range(int(low), int(high or low) + 1))
folder.mkdir(parents=True, exist_ok=True)
for f in source.glob("*.py"):
    number = re.match(r"(\d+)_", f.name)
    if number and int(number.group(1)) in wanted:
        shutil.copy(f, folder / f.name)
print(f"level1-seeds: {len(list(folder.glob('*.py')))} problems of {source}")
EOF
    fi
    cat > "$OUT/level1_seeds.yaml" <<EOF
defaults:
  search: {population_size: 4, max_evaluations: 4, seed: 0, max_wall_time_s: ${L1_WALL:-90}}
  operators: {weights: {parametric_mutation: 0.7, parametric_crossover: 0.3}}
  platform: cuda
side_by_side: ${L1_SIDE:-4}
problems:
  - {folder: $folder, seeds: compile}
EOF
    local dir=${L1_DIR:-runs/kb-level1}  # another run dir (runs/NAME): a sweep of its own beside it
    sweep_or_resume "$dir" "$OUT/level1_seeds.yaml" > "$OUT/level1_seeds.txt"
    timeout 120 python3 bench/compile_sweep_table.py "$dir" --json "$OUT/level1_seeds_table.json" \
        > "$OUT/level1_seeds_table.md"
}

sec_extract() {  # kevo extract alone over level-3 models at their own shapes (EXTRACT_MODELS: those only)
    local f m
    for f in ${EXTRACT_MODELS:-"$L3"/*.py}; do
        [[ -f $f ]] || f=$L3/$f.py
        m=$(basename "$f" .py)
        timeout "$(left)" python3 -m evolve.cli extract "$f" -o "$OUT/extract/$m" --device cuda --json \
            > "$OUT/extract_$m.json"
        # each model's exit code and seconds, apart from the section's log (which its stderr fills)
        echo "$m rc=$? $SECONDS" >> "$OUT/extract_rc.log"
    done
}

sec_vs_compile() {  # bench/kernelbench_vs_compile.yaml: level-1 problems at own shapes, the best and its seed
    # over torch.compile on the clean clock (the end-of-run rounds); VS_DIR: the run dir (runs/kb-vs-compile)
    local dir=${VS_DIR:-runs/kb-vs-compile}
    sed "s#\.\./\.\./shared/kernelbench#$KB#" bench/kernelbench_vs_compile.yaml > "$OUT/vs_compile.yaml"
    sweep_or_resume "$dir" "$OUT/vs_compile.yaml" > "$OUT/vs_compile.txt"
    timeout 120 python3 -m evolve.cli report "$dir" > "$OUT/vs_compile_report.txt"
    timeout 120 python3 bench/compile_sweep_table.py "$dir" --json "$OUT/vs_compile_table.json" \
        > "$OUT/vs_compile_table.md"
}

sec_seed_gap() {  # where a torch.compile seed's time goes at own shapes (bench/seed_gap.py over the vs-compile
    # problems; GAP_ONLY: name prefixes, default the first four)
    sed "s#\.\./\.\./shared/kernelbench#$KB#" bench/kernelbench_vs_compile.yaml > "$OUT/vs_compile.yaml"
    timeout "$(left)" python3 bench/seed_gap.py "$OUT/vs_compile.yaml" --only ${GAP_ONLY:-32_ 19_ 23_ 40_} \
        --out "$OUT/seed_gap.json" > "$OUT/seed_gap.md"
}

for name in "$@"; do
    if ! declare -F "sec_${name//-/_}" > /dev/null; then
        echo "unknown section $name" >&2
        exit 2
    fi
    section "$name"
done
echo "round done in $(( $(date +%s) - start )) s" >> "$OUT/round.log"
echo "kevo's temporary folders left (Ray's home kept on purpose): $(ls "${TMPDIR:-/tmp}" | grep '^kevo-' | grep -v '^kevo-ray-home-' | tr '\n' ' ')" >> "$OUT/round.log"
pack
