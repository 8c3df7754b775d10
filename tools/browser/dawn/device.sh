for f in .gl/*.deb; do dpkg -x $f /; done; ldconfig; export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json XDG_RUNTIME_DIR=/tmp
# On the GPU machine (NVIDIA, Vulkan loader from the carried .gl/, the .dawn/ folder that
# tools/browser/dawn/stage.sh made, no Node, no network), in one call, from the repository
# root: what Dawn offers, native `wgemma bench` (the E2B shape, tg @ d512), the same with
# --webgpu-limits, native `wgemma demo`, then the wasm package on Dawn: the demo on the
# shipped pair and the same bench, its greedy tokens checked against the native ones.
#   bash tools/browser/dawn/device.sh [WGEMMA_BINARY]   (default: the staged .dawn/wgemma.xz)
# Writes $OUT/summary.md (tables), $OUT/results.json (every report), $OUT/log.txt. Each
# step's failure is logged and the others still run. REPS (3) timed runs per test, SHAPE
# (e2b), DAWN_DIAG=1 adds a Dawn bench with robustness and workgroup zeroing off.
set -u
wgemma="$(readlink -f "${1:-.dawn/wgemma.xz}")"
out="${OUT:-/tmp/dawn-out}"
mkdir -p "$out"
work=/tmp/dawn
rm -rf "$work"
mkdir -p "$work/webgpu/dist/linux-x64" "$work/lib"
log="$out/log.txt"
: > "$log"
reps="${REPS:-3}"
shape="${SHAPE:-e2b}"
note() { echo "== $(date -u +%H:%M:%S) $*" | tee -a "$log" >&2; }

# step NAME TIMEOUT_S STDOUT_FILE COMMAND...: runs it bounded, stderr to the log.
step() {
    local name=$1 limit=$2 stdout=$3
    shift 3
    note "$name: $*"
    local t0=$SECONDS
    timeout --kill-after=10 "$limit" "$@" > "$stdout" 2>> "$log"
    local rc=$?
    note "$name: exit $rc after $((SECONDS - t0)) s$([ $rc -eq 124 ] && echo " (timed out at $limit s)")"
    echo "$name $rc $((SECONDS - t0))" >> "$work/steps"
    return $rc
}

note "unpacking .dawn into $work"
python3 - "$work" <<'PY' >> "$log" 2>&1
import lzma, shutil, sys, tarfile
work = sys.argv[1]
def unxz(src, dst):
    with lzma.open(src) as s, open(dst, "wb") as d:
        shutil.copyfileobj(s, d)
unxz(".dawn/node.xz", f"{work}/node")
unxz(".dawn/libstdc++.so.6.xz", f"{work}/lib/libstdc++.so.6")
unxz(".dawn/webgpu/dawn.node.xz", f"{work}/webgpu/dist/linux-x64/dawn.node")
for name in ("index.js", "package.json"):
    shutil.copy(f".dawn/webgpu/{name}", f"{work}/webgpu/{name}")
with tarfile.open(".dawn/pkg.tar.xz") as t:
    t.extractall(work)
print("unpacked:", open(".dawn/STAGED").read())
PY
chmod +x "$work/node"
if [ "${wgemma%.xz}" != "$wgemma" ]; then
    python3 -c 'import lzma, shutil, sys; shutil.copyfileobj(lzma.open(sys.argv[1]), open(sys.argv[2], "wb"))' \
        "$wgemma" "$work/wgemma" >> "$log" 2>&1
    chmod +x "$work/wgemma"
    wgemma="$work/wgemma"
fi
node=("$work/node")
if ! "$work/node" -e 0 2>> "$log"; then
    note "node does not start with this machine's libraries: using the staged libstdc++"
    node=(env LD_LIBRARY_PATH="$work/lib" "$work/node")
fi
run=(tools/browser/dawn/run.mjs --dawn "$work/webgpu" --pkg "$work/pkg")
bench=(bench --synthetic "$shape" -p 512 -n 128 -d 512 -r "$reps" --json)
options="{\"nPrompt\":512,\"nGen\":128,\"nDepth\":512,\"repetitions\":$reps}"

step adapter 60 "$work/adapter.txt" "${node[@]}" "${run[@]}" --adapter-only --json "$work/dawn-adapter.json"
cat "$work/adapter.txt" >> "$log"
step native-bench 90 "$work/native.json" "$wgemma" "${bench[@]}"
step native-webgpu-limits 90 "$work/native-webgpu-limits.json" "$wgemma" "${bench[@]}" --webgpu-limits
step native-demo 60 "$work/native-demo.json" "$wgemma" demo --json -r "$reps"
step dawn-demo 90 "$work/dawn-demo.txt" "${node[@]}" "${run[@]}" --demo models/kjv-pair.wgemma \
    --demo-runs "$reps" --native-demo "$work/native-demo.json" --json "$work/dawn-demo.json"
step dawn-bench 240 "$work/dawn-bench.txt" "${node[@]}" "${run[@]}" --bench-synthetic "$shape" \
    --bench-options "$options" --native-bench "$work/native.json" --json "$work/dawn-bench.json"
if [ "${DAWN_DIAG:-0}" = 1 ]; then
    step dawn-bench-no-robustness 180 "$work/dawn-diag.txt" "${node[@]}" "${run[@]}" \
        --toggle enable-dawn-features=disable_robustness,disable_workgroup_init \
        --bench-synthetic "$shape" --bench-options "$options" --json "$work/dawn-diag.json"
fi
cat "$work"/dawn-*.txt >> "$log" 2>/dev/null
step summary 30 "$out/summary.md" "${node[@]}" tools/browser/dawn/summary.mjs "$work" "$out/results.json"
if [ ! -s "$out/summary.md" ]; then
    # Without a working node: the steps' exit codes and the raw reports.
    { echo "summary.mjs did not run; steps (name, exit, seconds):"; cat "$work/steps"; } > "$out/summary.md"
    python3 -c 'import json,glob,sys; json.dump({p: open(p).read() for p in glob.glob(sys.argv[1] + "/*.json")}, open(sys.argv[2], "w"))' \
        "$work" "$out/results.json"
fi
cat "$out/summary.md"
