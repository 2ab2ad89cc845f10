#!/usr/bin/env bash
# Add the serving-engine peers of the FP8 MoE task to an existing GPU bundle (made by bundle.sh):
# the sglang package's Python files (SGLang's Triton fused MoE and its tuned configs), without its
# compiled extensions (Rust front-end modules, unused here). The wheel is ~39 MB; its Python tree,
# xz-compressed, ~11.5 MB, so bundle + peers stay under the 64 MiB that travels with a command.
#
#   usage: scripts/gpu_bundle_extra.sh OUTDIR        e.g. scripts/gpu_bundle_extra.sh .gpu
#
# Writes OUTDIR/sglang.tar.xz and OUTDIR/activate_extra.sh, and makes OUTDIR/activate.sh (the bundle's
# own copy, not /work/shared's) source activate_extra.sh at its end, so `source OUTDIR/activate.sh OUTDIR`
# installs both. activate.sh installs its wheels only on a machine that lacks them; activate_extra.sh
# checks for sglang on its own, so a machine that already had the bundle still gets the peer.
# Needs PyPI access here, none on the GPU host. Why not vLLM: its wheel is 227 MB with a compiled _C that
# fused_moe needs; nor sgl-kernel (510 MB).
set -euo pipefail
out=${1:?usage: gpu_bundle_extra.sh OUTDIR}
SGLANG_VERSION=${SGLANG_VERSION:-0.5.23}
py=${PYTHON:-python3}
[ -f "$out/activate.sh" ] || { echo "gpu_bundle_extra.sh: $out has no activate.sh (run bundle.sh first)" >&2; exit 1; }
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
"$py" -m pip download -q --no-deps -d "$tmp" "sglang==$SGLANG_VERSION" 2>&1 | grep -vE '^WARNING|^$' || true
wheel=$(ls "$tmp"/sglang-*.whl)
(cd "$tmp" && "$py" -m zipfile -e "$wheel" x >/dev/null)
(cd "$tmp/x" && tar --exclude='*.so' -cf "$tmp/sglang.tar" sglang "sglang-$SGLANG_VERSION.dist-info")
xz -T0 -6 -f "$tmp/sglang.tar" && mv "$tmp/sglang.tar.xz" "$out/sglang.tar.xz"
cat > "$out/activate_extra.sh" <<'SH'
# Sourced by activate.sh: unpack the sglang peer into the bundle's site folder once per machine.
_extra_bundle=${1:-.gpu}
_extra_site=/tmp/ksearch-site
if [ ! -d "$_extra_site/sglang" ] && [ -f "$_extra_bundle/sglang.tar.xz" ]; then
  mkdir -p "$_extra_site" && tar -xJf "$_extra_bundle/sglang.tar.xz" -C "$_extra_site" ||
    echo "activate_extra.sh: unpacking sglang failed" >&2
fi
case ":${PYTHONPATH:-}:" in *":$_extra_site:"*) ;; *) export PYTHONPATH="$_extra_site${PYTHONPATH:+:$PYTHONPATH}" ;; esac
unset _extra_bundle _extra_site
SH
hook='[ -f "${1:-.gpu}/activate_extra.sh" ] && source "${1:-.gpu}/activate_extra.sh" "${1:-.gpu}"'
if ! grep -qF "activate_extra.sh" "$out/activate.sh"; then
  chmod u+w "$out/activate.sh"
  printf '%s\n' "$hook" >> "$out/activate.sh"
fi
du -sh "$out/sglang.tar.xz" "$out"
