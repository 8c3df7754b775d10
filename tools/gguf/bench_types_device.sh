#!/usr/bin/env bash
# wgemma against llama.cpp Vulkan on E2B-shaped GGUF files of several ggml types, on the GPU
# machine, in one call from the project root with the side-by-side bundle staged in .peer
# (../shared/peer/stage.sh: the release wgemma, llama-bench Vulkan, the Q4_0 writer):
#     bash tools/gguf/bench_types_device.sh            # carry [".peer"], timeout_s 600
# Writes the Q4_0 E2B file (random weights), rewrites it per type with tools/gguf/retype.py
# (random blocks of Q8_0 / llama-quantize's Q4_K_M mix, ...), then on each file runs
# `wgemma bench -m FILE` and llama-bench Vulkan (-p 512 -n 128 -d 512 -fa 1); a Q8_0 file
# runs wgemma twice, with the context's default activations (int8 on a GPU with integer dot
# products: the Q8_0 matvecs take ggml_matvec_q8_0_int8) and with `--activations f32` (the
# f32 matvec). $OUT gets wgemma.TYPE.json (wgemma.Q8_0.f32.json), llama.TYPE.json, their
# stderr, memory.txt (each file's tensor bytes beside wgemma's weight bytes on the GPU,
# issue 45's 5% target) and log.txt. Knobs: TYPES (default "Q8_0 Q4_K_M"; also Q6_K,
# Q5_K_M, Q4_0), WGEMMA_ARGS, LLAMA_BENCH_ARGS.
set -u
ROOT=$(pwd)
P="$ROOT/.peer"
OUT=${OUT:-/tmp/types-out}
W=${PEER_WORK:-/tmp/peer-types}
TYPES=${TYPES:-"Q8_0 Q4_K_M"}
WGEMMA_ARGS=${WGEMMA_ARGS:-"--prompt-len 512 --gen 128 --draft-tokens 0 --json"}
LLAMA_BENCH_ARGS=${LLAMA_BENCH_ARGS:-"-p 512 -n 128 -d 512 -fa 1 -ngl 99 -r 3"}
mkdir -p "$OUT" "$W/src" "$W/vk"
LOG="$OUT/log.txt"
say() { echo "[$(date +%T)] $*" | tee -a "$LOG"; }
for f in "$P"/.gl/*.deb; do dpkg -x "$f" /; done
ldconfig
export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json
[ -d "$W/src/llama.cpp" ] || tar -xzf "$P/.devcarry/llamacpp.tar.gz" -C "$W/src"
for f in "$W"/src/vkdebs/*.deb; do dpkg -x "$f" "$W/vk"; done
VKLIB="$W/vk/usr/lib/x86_64-linux-gnu"
vkenv=()
LD_LIBRARY_PATH="$VKLIB" "$W/vk/usr/bin/glslc" --version >/dev/null 2>&1 && vkenv=(LD_LIBRARY_PATH="$VKLIB")
LB="$W/llama-bench"
[ -x "$LB" ] || { xz -dc "$P/.devcarry/llama-bench-vulkan.xz" >"$LB" && chmod +x "$LB"; }
GP="$W/src/llama.cpp/gguf-py"
if [ ! -f "$W/e2b.Q4_0.gguf" ]; then
  say "writing the Q4_0 E2B file"
  python3 "$P/barlib/make_gguf_e2b.py" "$W/e2b.Q4_0.gguf" --gguf-py "$GP" >>"$LOG" 2>&1
fi
tensor_bytes() {
  PYTHONPATH="$GP" python3 -c 'import sys, gguf; print(sum(int(t.n_bytes) for t in gguf.GGUFReader(sys.argv[1]).tensors))' "$1"
}
for t in $TYPES; do
  f="$W/e2b.$t.gguf"
  if [ "$t" != Q4_0 ] && [ ! -f "$f" ]; then
    say "retyping to $t"
    python3 tools/gguf/retype.py "$W/e2b.Q4_0.gguf" "$f.part" --recipe "$t" --gguf-py "$GP" >>"$LOG" 2>&1 && mv "$f.part" "$f"
  fi
  say "wgemma bench -m e2b.$t.gguf $WGEMMA_ARGS"
  timeout 200 "$P/.devcarry/wgemma" bench -m "$f" $WGEMMA_ARGS >"$OUT/wgemma.$t.json" 2>"$OUT/wgemma.$t.err"
  say "rc=$?; $(tail -n 3 "$OUT/wgemma.$t.err" | tr '\n' ' ')"
  if [ "$t" = Q8_0 ]; then
    say "wgemma --activations f32 bench -m e2b.$t.gguf $WGEMMA_ARGS"
    timeout 200 "$P/.devcarry/wgemma" --activations f32 bench -m "$f" $WGEMMA_ARGS >"$OUT/wgemma.$t.f32.json" 2>"$OUT/wgemma.$t.f32.err"
    say "rc=$?; $(tail -n 3 "$OUT/wgemma.$t.f32.err" | tr '\n' ' ')"
  fi
  gpu=$(python3 -c 'import json, sys; print(json.load(open(sys.argv[1]))["weight_bytes"])' "$OUT/wgemma.$t.json" 2>/dev/null)
  echo "$t: file tensor bytes $(tensor_bytes "$f"), wgemma weight bytes on the GPU ${gpu:-?}" | tee -a "$OUT/memory.txt"
  say "llama-bench vulkan -m e2b.$t.gguf $LLAMA_BENCH_ARGS"
  env "${vkenv[@]}" timeout 150 "$LB" -m "$f" $LLAMA_BENCH_ARGS -o json >"$OUT/llama.$t.json" 2>"$OUT/llama.$t.err"
  say "rc=$?"
done
