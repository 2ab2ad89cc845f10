"""MLA paged decode (token_chunks): token-balanced split-KV, 16 heads as the MMA M dimension.

Knobs: BLOCK_N=32, PROGRAMS_PER_SM=2, MIN_CHUNK=64,
VALUE_SPLIT=1, NUM_WARPS=4, NUM_STAGES=3,
MERGE=kernel, MERGE_HEADS=4, MERGE_SPLIT=8, CACHED_LAUNCH=True,
WHOLE_SHORT=0, MERGE_FIT=True.

Why: a per-sequence split does not balance a batch where one sequence holds most of the tokens. Here
the batch's KV tokens, as one list (kv_indices), are cut into equal chunks of CHUNK tokens whatever
sequence they belong to; CHUNK comes from the shapes alone (batch, total tokens), so there is no
device-to-host copy and a CUDA graph can hold the call. Program (chunk c, value part v) finds the
sequences overlapping [c*CHUNK, (c+1)*CHUNK) by scanning kv_indptr and walks each overlap (a chunk that
crosses a sequence boundary is split at it) in BLOCK_N-row tiles: all 16 heads score one shared latent
tile at once (q [16, 512 + 64] x rows^T on tensor cores), base-2 online softmax, and accumulate
p x rows into a [16, 512 / VALUE_SPLIT] fp32 accumulator: with VALUE_SPLIT > 1 the value dimension is
split over adjacent programs (each scores the whole tile, so the tile's second read comes from L2) to
keep the accumulator small. A sequence that lies in one chunk is written straight to the output; for
the others every overlap stores a normalised partial and its lse at slot c + b (unique, and contiguous
per sequence), merged by log-sum-exp: with MERGE=kernel by a second small kernel per (sequence, head
block, 512 / MERGE_SPLIT value columns: a few long sequences spread over a hundred chunks each are merged
by many programs at once, not one per head block walking every partial), with MERGE=last_program by whichever chunk program finishes the sequence's last partial of its
value part (an arrival counter per (sequence, part), put back to 0 by the merger, so a CUDA graph replays
it as it ran). Empty sequences (output 0, lse -inf) are written by the chunk program their start falls in.
With WHOLE_SHORT > 0, a sequence of at most WHOLE_SHORT x CHUNK tokens is not cut at chunk edges: the program
whose chunk holds its first token runs it whole and writes the answer (no partials, nothing to merge), at the
cost of up to (1 + WHOLE_SHORT) x CHUNK tokens for that program. A batch of many short sequences (256 x 512
tokens in chunks of ~500) otherwise cuts nearly every sequence in two. With MERGE_FIT the merge kernel's grid
fits the batch: MERGE_SPLIT is the most column slices per (sequence, head block), and a plan takes the fewest
(a power of two) that still give MERGE_FIT_PER_SM programs per SM; without it a batch of 256 launches 256 x 4 x 8
merge programs, each a few dependent loads, far more than the GPU holds at once.

Host path: per call, shapes are read, two outputs allocated and one or two kernels launched. Chunk length and
grids are cached per (device, batch, total tokens), partial buffers per device (grown, never freed, so a
captured CUDA graph never points at freed memory), and with CACHED_LAUNCH the compiled kernels are
launched directly on later calls with the same shapes, skipping Triton's argument binding (integer
arguments are unspecialised and strides compile-time constants; pointer alignment is in the key).
"""

import torch
import triton
import triton.language as tl

H, DC, DP = 16, 512, 64
LOG2E = 1.4426950408889634

BLOCK_N = 32
PROGRAMS_PER_SM = 2
MIN_CHUNK = 64
VALUE_SPLIT = 1
DV = DC // VALUE_SPLIT
NUM_WARPS = 4
NUM_STAGES = 3
MERGE_HEADS = 4
MERGE_SPLIT = 8
MERGE_FIT = True
MERGE_FIT_PER_SM = 4        # merge programs per SM a fitted grid aims for (MERGE_FIT)
MERGE_WARPS = 4
CACHED_LAUNCH = True
WHOLE_SHORT = 0      # sequences up to this many chunks long run whole in one program (0: none)
# Who merges the partials of a sequence spread over several chunks: a second small kernel, or the last
# chunk program to finish one (an atomic counter per (sequence, value part)): one launch per call.
LAST_MERGES = False
CHUNK_MERGE_SLOTS = max(1, 8192 // (H * DV))   # partials merged per step by a chunk program (its H x DV columns)
SCAN = 256                                  # kv_indptr entries read per step of a program's sequence lookup


@triton.jit
def _merge_partials(po_ptr, plse_ptr, out_ptr, lse_ptr, b, first, n, offs_h, offs_c, lse_part, write_lse,
                    H: tl.constexpr, DC: tl.constexpr, VALUE_SPLIT: tl.constexpr, MERGE_SLOTS: tl.constexpr):
    """Log-sum-exp merge of the n partials of sequence b at slots first..first+n-1, for heads offs_h and value
    columns offs_c, into the output (lse where write_lse), with the partial lse that value part lse_part
    wrote. Partials are read through L2 (.cg): they may have been written by other SMs moments ago. One pass
    with a running maximum (the sums rescaled when it grows): the loads of one step wait on the step before,
    and a separate pass for the maximum doubled those waits for a sequence spread over many chunks."""
    j = tl.arange(0, MERGE_SLOTS)
    m = tl.zeros(offs_h.shape, dtype=tl.float32) - float("inf")
    acc = tl.zeros([offs_h.shape[0], offs_c.shape[0]], dtype=tl.float32)
    den = tl.zeros(offs_h.shape, dtype=tl.float32)
    for j0 in range(0, n, MERGE_SLOTS):
        live = (j0 + j) < n
        slot = (first + j0 + j).to(tl.int64)
        part = tl.load(plse_ptr + (slot[:, None] * VALUE_SPLIT + lse_part) * H + offs_h[None, :],
                       mask=live[:, None], other=float("-inf"), cache_modifier=".cg")
        o = tl.load(po_ptr + (slot[:, None, None] * H + offs_h[None, :, None]) * DC + offs_c[None, None, :],
                    mask=live[:, None, None], other=0.0, cache_modifier=".cg")
        grown = tl.maximum(m, tl.max(part, 0))
        scale = tl.where(grown == m, 1.0, tl.math.exp2(m - grown))      # 1 while nothing grew (or -inf)
        w = tl.where(live[:, None], tl.math.exp2(part - grown[None, :]), 0.0)     # [MERGE_SLOTS, heads]
        acc = acc * scale[:, None] + tl.sum(w[:, :, None] * o, 0)
        den = den * scale + tl.sum(w, 0)
        m = grown
    b64 = tl.full([], 0, tl.int64) + b
    tl.store(out_ptr + b64 * (H * DC) + offs_h[:, None] * DC + offs_c[None, :],
             (acc / den[:, None]).to(out_ptr.dtype.element_ty))
    tl.store(lse_ptr + b64 * H + offs_h, m + tl.math.log2(den), mask=write_lse)


@triton.jit
def _runs_whole(seq_start, seq_end, chunk, WHOLE_SHORT: tl.constexpr):
    """Whether a non-empty sequence is short enough (WHOLE_SHORT chunks at most) to run whole in the program
    holding its first token: the chunk kernel runs it so and the merge kernel skips it, by this one rule."""
    return (seq_end > seq_start) & (seq_end - seq_start <= WHOLE_SHORT * chunk)


@triton.jit(do_not_specialize=["batch", "total", "chunk"])
def _chunk_kernel(qn_ptr, qp_ptr, ckv_ptr, kpe_ptr, indptr_ptr, indices_ptr, out_ptr, lse_ptr, po_ptr, plse_ptr,
                  count_ptr, qk_scale, batch, total, chunk,
                  H: tl.constexpr, DC: tl.constexpr, DP: tl.constexpr, DV: tl.constexpr,
                  VALUE_SPLIT: tl.constexpr, BLOCK_N: tl.constexpr, SCAN: tl.constexpr,
                  LAST_MERGES: tl.constexpr, MERGE_SLOTS: tl.constexpr, WHOLE_SHORT: tl.constexpr):
    pid = tl.program_id(0)
    part = pid % VALUE_SPLIT                # the programs of one chunk are adjacent: its rows stay in L2
    c = pid // VALUE_SPLIT
    lo = c * chunk
    hi = tl.minimum(lo + chunk, total)

    # The sequences this program visits, [b_first, b_stop): those overlapping [lo, hi), plus the empty ones
    # that start in it (at `total` for the last chunk): b_first = how many end before lo, b_stop = how many
    # start before hi (at or before it for the last chunk). Every empty sequence is visited by one chunk.
    b_first = tl.zeros([], dtype=tl.int32)
    b_stop = tl.zeros([], dtype=tl.int32)
    for s0 in range(0, batch, SCAN):
        offs = s0 + tl.arange(0, SCAN)
        live = offs < batch
        starts = tl.load(indptr_ptr + offs, mask=live, other=0)
        ends = tl.load(indptr_ptr + offs + 1, mask=live, other=0)
        b_first += tl.sum((live & (ends < lo)).to(tl.int32), 0)
        b_stop += tl.sum((live & ((starts < hi) | ((starts == hi) & (hi == total)))).to(tl.int32), 0)

    offs_h = tl.arange(0, H)
    offs_c = tl.arange(0, DC)
    offs_p = tl.arange(0, DP)
    offs_v = part * DV + tl.arange(0, DV)   # this program's columns of the value dimension
    first_part = (offs_h * 0 + part) == 0   # lse is the same in every part: part 0 writes it
    for b in range(b_first, b_stop):
        seq_start = tl.load(indptr_ptr + b)
        seq_end = tl.load(indptr_ptr + b + 1)
        # A short sequence runs whole in the program holding its first token; the others are cut at chunk edges.
        whole = _runs_whole(seq_start, seq_end, chunk, WHOLE_SHORT)
        seg_lo = tl.where(whole, seq_start, tl.maximum(seq_start, lo))
        seg_hi = tl.where(whole, seq_end, tl.minimum(seq_end, hi))
        mine = (seq_start >= lo) | (whole == 0)     # (an empty sequence: its own branch below)
        b64 = tl.full([], 0, tl.int64) + b          # (the interpreter iterates plain ints)
        if mine & (seg_lo < seg_hi):
            qn = tl.load(qn_ptr + b64 * (H * DC) + offs_h[:, None] * DC + offs_c[None, :])
            qp = tl.load(qp_ptr + b64 * (H * DP) + offs_h[:, None] * DP + offs_p[None, :])
            m_i = tl.full([H], float("-inf"), tl.float32)
            l_i = tl.zeros([H], tl.float32)
            acc = tl.zeros([H, DV], tl.float32)
            for n0 in range(seg_lo, seg_hi, BLOCK_N):
                offs_n = n0 + tl.arange(0, BLOCK_N)
                valid = offs_n < seg_hi
                rows = tl.load(indices_ptr + offs_n, mask=valid, other=0).to(tl.int64)
                kc = tl.load(ckv_ptr + rows[:, None] * DC + offs_c[None, :], mask=valid[:, None], other=0.0)
                kp = tl.load(kpe_ptr + rows[:, None] * DP + offs_p[None, :], mask=valid[:, None], other=0.0)
                s = tl.dot(qn, tl.trans(kc))
                s = tl.dot(qp, tl.trans(kp), s)
                s = tl.where(valid[None, :], s * qk_scale, float("-inf"))   # base-2 logits
                m_new = tl.maximum(m_i, tl.max(s, 1))       # finite: every tile holds a valid row
                alpha = tl.math.exp2(m_i - m_new)
                p = tl.math.exp2(s - m_new[:, None])
                l_i = l_i * alpha + tl.sum(p, 1)
                if VALUE_SPLIT == 1:
                    v = kc
                else:
                    v = tl.load(ckv_ptr + rows[:, None] * DC + offs_v[None, :], mask=valid[:, None], other=0.0)
                acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v)
                m_i = m_new
            o = acc / l_i[:, None]
            lse = m_i + tl.math.log2(l_i)
            if whole | ((seq_start >= lo) & (seq_end <= hi)):
                # The whole sequence ran in this program: the final answer.
                tl.store(out_ptr + b64 * (H * DC) + offs_h[:, None] * DC + offs_v[None, :],
                         o.to(out_ptr.dtype.element_ty))
                tl.store(lse_ptr + b64 * H + offs_h, lse, mask=first_part)
            else:
                first = seq_start // chunk + b           # slot of the sequence's first chunk (slot = c + b)
                slot = (c + b).to(tl.int64)
                tl.store(po_ptr + slot * (H * DC) + offs_h[:, None] * DC + offs_v[None, :], o)
                tl.store(plse_ptr + (slot * VALUE_SPLIT + part) * H + offs_h, lse)   # every part its own copy
                if LAST_MERGES:
                    # The last program to finish a partial of (sequence, value part) merges its columns, then
                    # resets the counter for the next call (so a captured graph replays it as it ran).
                    n = (seq_end - 1) // chunk - seq_start // chunk + 1
                    tl.debug_barrier()                  # every thread's partial stores before the release
                    done = tl.atomic_add(count_ptr + b64 * VALUE_SPLIT + part, 1, sem="acq_rel", scope="gpu")
                    if done == n - 1:
                        # Each part merges its columns with its own lse copies; part 0 writes the lse.
                        _merge_partials(po_ptr, plse_ptr, out_ptr, lse_ptr, b, first, n, offs_h, offs_v, part,
                                        first_part, H, DC, VALUE_SPLIT, MERGE_SLOTS)
                        tl.atomic_xchg(count_ptr + b64 * VALUE_SPLIT + part, 0, sem="relaxed", scope="gpu")
        elif seq_start == seq_end:
            # An empty sequence that starts in this chunk: output 0, lse -inf.
            tl.store(out_ptr + b64 * (H * DC) + offs_h[:, None] * DC + offs_v[None, :],
                     tl.zeros([H, DV], dtype=out_ptr.dtype.element_ty))
            tl.store(lse_ptr + b64 * H + offs_h, tl.zeros([H], dtype=tl.float32) - float("inf"), mask=first_part)


@triton.jit(do_not_specialize=["chunk"])
def _merge_kernel(po_ptr, plse_ptr, indptr_ptr, out_ptr, lse_ptr, chunk,
                  H: tl.constexpr, DC: tl.constexpr, VALUE_SPLIT: tl.constexpr, HB: tl.constexpr,
                  MERGE_COLS: tl.constexpr, MERGE_SLOTS: tl.constexpr, WHOLE_SHORT: tl.constexpr):
    b = tl.program_id(0)
    h0 = tl.program_id(1) * HB
    c0 = tl.program_id(2) * MERGE_COLS      # this program's value columns
    seq_start = tl.load(indptr_ptr + b)
    seq_end = tl.load(indptr_ptr + b + 1)
    n = tl.where(seq_end > seq_start, (seq_end - 1) // chunk - seq_start // chunk + 1, 0)
    n = tl.where(_runs_whole(seq_start, seq_end, chunk, WHOLE_SHORT), 0, n)     # the chunk kernel wrote it
    if n > 1:           # n == 1: the chunk kernel wrote the answer; n == 0: it wrote 0 and -inf
        offs_h = h0 + tl.arange(0, HB)
        # every column slice computes the same lse; the first one writes it
        _merge_partials(po_ptr, plse_ptr, out_ptr, lse_ptr, b, seq_start // chunk + b, n, offs_h,
                        c0 + tl.arange(0, MERGE_COLS), 0, (offs_h * 0 + c0) == 0, H, DC, VALUE_SPLIT,
                        MERGE_SLOTS)


_SMS = {}
_SCRATCH = {}       # device -> (slots, partial outputs, partial lse); grown, the old ones kept alive
_COUNTS = {}        # device -> per-(sequence, value part) arrival counters (LAST_MERGES); grown, zeroed once
_KEEP = []          # every scratch buffer ever handed out (a captured graph may still point at one)
_PLANS = {}         # (device, batch, total) -> launch plan
_DIRECT = [CACHED_LAUNCH]    # direct launches allowed (off for good if the launcher refuses them)
_LAUNCH = {}        # (which kernel, (device, batch, total)) -> a direct launcher of the compiled kernel


def _num_sms(device):
    if device.type != "cuda":
        return 132          # an H200; off the GPU (interpreter) this only shapes the schedule
    index = device.index if device.index is not None else torch.cuda.current_device()
    if index not in _SMS:
        _SMS[index] = torch.cuda.get_device_properties(index).multi_processor_count
    return _SMS[index]


def _scratch(device, slots):
    have = _SCRATCH.get(device)
    if have is None or have[0] < slots:
        size = max(slots, 2 * have[0] if have else 0)
        have = (size,
                torch.empty((size, H, DC), dtype=torch.float32, device=device),
                torch.empty((size, VALUE_SPLIT, H), dtype=torch.float32, device=device))
        _SCRATCH[device] = have
        _KEEP.append(have)
    return have[1], have[2]


def _counters(device, batch):
    have = _COUNTS.get(device)
    if have is None or have.shape[0] < batch * VALUE_SPLIT:
        # Zeroed once; every merge puts its counter back to 0.
        have = torch.zeros(max(batch * VALUE_SPLIT, 2 * have.shape[0] if have is not None else 0),
                           dtype=torch.int32, device=device)
        _COUNTS[device] = have
        _KEEP.append(have)
    return have


def _merge_split(sms, batch):
    """Column slices per (sequence, head block) of the merge kernel: MERGE_SPLIT, or with MERGE_FIT the fewest
    (a power of two, at most MERGE_SPLIT) whose grid still has MERGE_FIT_PER_SM programs per SM."""
    if not MERGE_FIT:
        return MERGE_SPLIT
    split = 1
    while split < MERGE_SPLIT and batch * (H // MERGE_HEADS) * split < MERGE_FIT_PER_SM * sms:
        split *= 2
    return split


def _merge_consts(split):
    """The merge kernel's compile-time arguments for `split` column slices, by name (for the JIT) and as the
    positional tail a direct launch of the compiled kernel takes."""
    cols = DC // split                                      # value columns per merge-kernel program
    slots = max(1, 8192 // (MERGE_HEADS * cols))            # partials merged per step ([slots, heads, cols] fp32)
    consts = dict(H=H, DC=DC, VALUE_SPLIT=VALUE_SPLIT, HB=MERGE_HEADS, MERGE_COLS=cols, MERGE_SLOTS=slots,
                  WHOLE_SHORT=WHOLE_SHORT)
    return consts, tuple(consts.values())


def _plan(device, batch, total):
    """Chunk length, grids and partial buffers for one (device, batch, total tokens); shapes only."""
    sms = _num_sms(device)
    chunks_wanted = max(1, PROGRAMS_PER_SM * sms // VALUE_SPLIT)
    chunk = max(MIN_CHUNK, -(-total // chunks_wanted))
    chunks = max(1, -(-total // chunk))         # one chunk even with no tokens: it writes the empty sequences
    po, plse = _scratch(device, chunks + batch)
    counts = _counters(device, batch) if LAST_MERGES else plse
    if len(_PLANS) > 4096:      # a serving loop sees a new total every step: keep the table bounded
        _PLANS.clear()
        _LAUNCH.clear()
    split = _merge_split(sms, batch)
    plan = (chunk, (chunks * VALUE_SPLIT,), (batch, H // MERGE_HEADS, split), po, plse, counts,
            _MERGE_BY_SPLIT[split])
    _PLANS[(device, batch, total)] = plan
    return plan


# Compile-time arguments of each kernel, by name for the JIT and in parameter order (they are the last
# parameters) for a direct launch of the compiled kernel, which takes every argument positionally.
_CHUNK_CONSTS = dict(H=H, DC=DC, DP=DP, DV=DV, VALUE_SPLIT=VALUE_SPLIT, BLOCK_N=BLOCK_N, SCAN=SCAN,
                     LAST_MERGES=LAST_MERGES, MERGE_SLOTS=CHUNK_MERGE_SLOTS, WHOLE_SHORT=WHOLE_SHORT)
_CHUNK_CONST_VALUES = tuple(_CHUNK_CONSTS.values())
_MERGE_BY_SPLIT = {s: _merge_consts(s) for s in (1, 2, 4, 8) if s <= MERGE_SPLIT}


def _launch(kernel, grid, key, args, consts, const_values, num_warps, num_stages):
    """Launch through Triton's JIT once per key, then straight through the compiled kernel."""
    direct = _LAUNCH.get(key)
    if direct is not None:
        try:
            direct(*args, *const_values)
            return
        except (TypeError, IndexError):
            # A Triton whose launcher takes another argument list or grid (raised before anything is
            # launched): the JIT path from now on.
            _DIRECT[0] = False
            _LAUNCH.clear()
    compiled = kernel[grid](*args, **consts, num_warps=num_warps, num_stages=num_stages)
    # Under the interpreter there is no compiled kernel to keep.
    if _DIRECT[0] and key is not None and getattr(compiled, "__getitem__", None) is not None:
        # The compiled kernel's launcher reads three grid dimensions (Triton 3.6: an IndexError on a 1-D grid).
        _LAUNCH[key] = compiled[tuple(grid) + (1,) * (3 - len(grid))]


def run(q_nope, q_pe, ckv_cache, kpe_cache, kv_indptr, kv_indices, sm_scale):
    batch = q_nope.shape[0]
    total = kv_indices.shape[0]
    device = q_nope.device
    output = torch.empty((batch, H, DC), dtype=torch.bfloat16, device=device)
    lse = torch.empty((batch, H), dtype=torch.float32, device=device)
    if batch == 0:
        return output, lse
    # The kernels take strides as compile-time constants: contiguous tensors (the workloads' layout).
    if not q_nope.is_contiguous():
        q_nope = q_nope.contiguous()
    if not q_pe.is_contiguous():
        q_pe = q_pe.contiguous()
    if not ckv_cache.is_contiguous():
        ckv_cache = ckv_cache.contiguous()
    if not kpe_cache.is_contiguous():
        kpe_cache = kpe_cache.contiguous()
    plan = _PLANS.get((device, batch, total)) or _plan(device, batch, total)
    chunk, grid, merge_grid, po, plse, counts, (merge_consts, merge_const_values) = plan
    # Triton compiles for 16-byte aligned pointers when they are: a misaligned input takes the JIT path.
    aligned = ((q_nope.data_ptr() | q_pe.data_ptr() | ckv_cache.data_ptr() | kpe_cache.data_ptr()
                | kv_indptr.data_ptr() | kv_indices.data_ptr()) & 15) == 0
    key = (device, batch, total) if aligned else None
    _launch(_chunk_kernel, grid, ("chunk", key) if key else None,
            (q_nope, q_pe, ckv_cache, kpe_cache, kv_indptr, kv_indices, output, lse, po, plse, counts,
             float(sm_scale) * LOG2E, batch, total, chunk),
            _CHUNK_CONSTS, _CHUNK_CONST_VALUES, NUM_WARPS, NUM_STAGES)
    if not LAST_MERGES:
        _launch(_merge_kernel, merge_grid, ("merge", key) if key else None,
                (po, plse, kv_indptr, output, lse, chunk),
                merge_consts, merge_const_values, MERGE_WARPS, 1)
    return output, lse
