"""Token-balanced split-KV decoding for gqa_paged_decode_h32_kv4_d128_ps1 (family token_chunks).

Knobs: BLOCK_N=64, PROGRAMS_PER_SM=2, MIN_CHUNK=64,
NUM_WARPS=4, NUM_STAGES=2, MERGE=kernel, MERGE_SPLIT=4,
CACHED_LAUNCH=True, WHOLE_SHORT=0, MERGE_FIT=True.

Why: a per-sequence split does not balance a batch where one sequence holds most of the tokens. Here
the batch's KV tokens, as one list (kv_indices), are cut into equal chunks of CHUNK tokens whatever
sequence they belong to; the host knows only the shapes (batch, total tokens), so the partition needs
no device-to-host copy and a CUDA graph can hold the call. Program (chunk c, kv head) finds the
sequences overlapping [c*CHUNK, (c+1)*CHUNK) by scanning kv_indptr, and walks each overlap (a chunk
that crosses a sequence boundary is split at it) in BLOCK_N-token tiles: the 8 query heads of its group
(padded to 16 rows for tl.dot) share every K/V tile, online softmax in base 2. A sequence that lies in
one chunk is written straight to the output; for the others each overlap stores a normalised partial and
its lse at slot c + b (unique: c and b both grow along the token list, so the slots of sequence b are
contiguous), merged per (sequence, kv head) by log-sum-exp: with MERGE=kernel by a second small kernel
(one program per (sequence, kv head, MERGE_SPLIT-th of the head dimension): a sequence spread over hundreds
of chunks is merged by MERGE_SPLIT programs reading wider steps, not one walking them 4 at a time),
with MERGE=last_program by whichever chunk program finishes the sequence's last partial (a per-(sequence,
kv head) arrival counter, put back to 0 by the merger, so a CUDA graph replays it as it ran). Empty
sequences (output 0, lse -inf) are written by the chunk program their start falls in. With WHOLE_SHORT > 0, a
sequence of at most WHOLE_SHORT x CHUNK tokens is not cut at chunk edges: the program whose chunk holds its
first token runs it whole and writes the answer (no partials, nothing to merge), at the cost of up to
(1 + WHOLE_SHORT) x CHUNK tokens for that program (256 x 2048 tokens in chunks of ~2000 otherwise cut nearly
every sequence in two). With MERGE_FIT the merge kernel's grid fits the batch: MERGE_SPLIT is the most slices
per (sequence, kv head), and a plan takes the fewest (a power of two) that still give MERGE_FIT_PER_SM programs
per SM; without it a batch of 256 launches 256 x 4 x MERGE_SPLIT merge programs of a few dependent loads each.

Host path: per call, shapes are read, two outputs allocated and one or two kernels launched. Chunk length and
grids are cached per (device, batch, total tokens), partial buffers per device (grown, never freed, so a
captured CUDA graph never points at freed memory), and with CACHED_LAUNCH the compiled kernels are
launched directly on later calls with the same shapes, skipping Triton's argument binding (every
integer argument is unspecialised and every stride a compile-time constant, so only pointer alignment
could change what Triton would compile: it is part of the cache key).
"""

import torch
import triton
import triton.language as tl

NUM_QO_HEADS = 32
NUM_KV_HEADS = 4
GROUP = NUM_QO_HEADS // NUM_KV_HEADS
HEAD_DIM = 128
ROWS = 16                                   # tl.dot needs 16 rows: the 8 heads of a group, padded
LOG2E = 1.4426950408889634

BLOCK_N = 64
PROGRAMS_PER_SM = 2
MIN_CHUNK = 64
NUM_WARPS = 4
# K and V tiles staged per pipeline stage: 2 x BLOCK_N x 128 bf16; keep them within 128 KiB.
NUM_STAGES = max(1, min(2, (128 * 1024) // (2 * BLOCK_N * HEAD_DIM * 2)))
CACHED_LAUNCH = True
WHOLE_SHORT = 0      # sequences up to this many chunks long run whole in one program (0: none)
# Who merges the partials of a sequence spread over several chunks: a second small kernel, or the last
# chunk program to finish one (an atomic counter per (sequence, kv head)): one launch per call.
LAST_MERGES = False
SCAN = 256                                  # kv_indptr entries read per step of a program's sequence lookup
MERGE_SPLIT = 4               # merge-kernel programs per (sequence, kv head), each HEAD_DIM / MERGE_SPLIT wide
MERGE_SLOTS = 4                             # partials merged per step by a last program (the whole head dimension)
MERGE_FIT = True
MERGE_FIT_PER_SM = 4        # merge programs per SM a fitted grid aims for (MERGE_FIT)
MERGE_WARPS = 4


@triton.jit
def _merge_partials(po_ptr, plse_ptr, out_ptr, lse_ptr, b, kvh, first, n, d0, write_lse,
                    NUM_KV_HEADS: tl.constexpr, GROUP: tl.constexpr, HEAD_DIM: tl.constexpr, WIDTH: tl.constexpr,
                    MERGE_SLOTS: tl.constexpr):
    """Log-sum-exp merge of the n partials of (sequence b, kv head) at slots first..first+n-1 into the output's
    columns d0..d0+WIDTH-1 (and the lse where write_lse is 1). Partials are read through L2 (.cg): they may have
    been written by other SMs moments ago. One pass with a running maximum (the sums rescaled when it grows):
    a few long sequences leave ~90 partials each, and the loads of one step wait on the step before, so a
    separate pass for the maximum doubled the waits (the merge was the gap on b3_l6000 and b2_l24000)."""
    r = tl.arange(0, GROUP)
    d = d0 + tl.arange(0, WIDTH)
    j = tl.arange(0, MERGE_SLOTS)
    m = tl.zeros([GROUP], dtype=tl.float32) - float("inf")
    acc = tl.zeros([GROUP, WIDTH], dtype=tl.float32)
    den = tl.zeros([GROUP], dtype=tl.float32)
    for j0 in range(0, n, MERGE_SLOTS):
        live = (j0 + j) < n
        slot = ((first + j0 + j).to(tl.int64) * NUM_KV_HEADS + kvh) * GROUP
        part = tl.load(plse_ptr + slot[:, None] + r[None, :], mask=live[:, None], other=float("-inf"),
                       cache_modifier=".cg")
        o = tl.load(po_ptr + (slot[:, None, None] + r[None, :, None]) * HEAD_DIM + d[None, None, :],
                    mask=live[:, None, None], other=0.0, cache_modifier=".cg")
        grown = tl.maximum(m, tl.max(part, 0))
        scale = tl.where(grown == m, 1.0, tl.math.exp2(m - grown))      # 1 while nothing grew (or -inf)
        w = tl.where(live[:, None], tl.math.exp2(part - grown[None, :]), 0.0)     # [MERGE_SLOTS, GROUP]
        acc = acc * scale[:, None] + tl.sum(w[:, :, None] * o, 0)
        den = den * scale + tl.sum(w, 0)
        m = grown
    head = kvh * GROUP + r
    b64 = tl.full([], 0, tl.int64) + b
    tl.store(out_ptr + (b64 * (NUM_KV_HEADS * GROUP) + head[:, None]) * HEAD_DIM + d[None, :],
             (acc / den[:, None]).to(out_ptr.dtype.element_ty))
    tl.store(lse_ptr + b64 * (NUM_KV_HEADS * GROUP) + head, m + tl.math.log2(den), mask=r < GROUP * write_lse)


@triton.jit
def _runs_whole(seq_start, seq_end, chunk, WHOLE_SHORT: tl.constexpr):
    """Whether a non-empty sequence is short enough (WHOLE_SHORT chunks at most) to run whole in the program
    holding its first token: the chunk kernel runs it so and the merge kernel skips it, by this one rule."""
    return (seq_end > seq_start) & (seq_end - seq_start <= WHOLE_SHORT * chunk)


@triton.jit(do_not_specialize=["batch", "total", "chunk"])
def _chunk_kernel(q_ptr, k_ptr, v_ptr, indptr_ptr, indices_ptr, out_ptr, lse_ptr, po_ptr, plse_ptr, count_ptr,
                  qk_scale, batch, total, chunk,
                  NUM_KV_HEADS: tl.constexpr, GROUP: tl.constexpr, ROWS: tl.constexpr,
                  HEAD_DIM: tl.constexpr, BLOCK_N: tl.constexpr, SCAN: tl.constexpr,
                  LAST_MERGES: tl.constexpr, MERGE_SLOTS: tl.constexpr, WHOLE_SHORT: tl.constexpr):
    pid = tl.program_id(0)
    kvh = pid % NUM_KV_HEADS
    c = pid // NUM_KV_HEADS
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

    r = tl.arange(0, ROWS)
    d = tl.arange(0, HEAD_DIM)
    row_mask = r < GROUP
    head = kvh * GROUP + r
    k_base = k_ptr + kvh * HEAD_DIM
    v_base = v_ptr + kvh * HEAD_DIM
    for b in range(b_first, b_stop):
        seq_start = tl.load(indptr_ptr + b)
        seq_end = tl.load(indptr_ptr + b + 1)
        # A short sequence runs whole in the program holding its first token; the others are cut at chunk edges.
        whole = _runs_whole(seq_start, seq_end, chunk, WHOLE_SHORT)
        seg_lo = tl.where(whole, seq_start, tl.maximum(seq_start, lo))
        seg_hi = tl.where(whole, seq_end, tl.minimum(seq_end, hi))
        mine = (seq_start >= lo) | (whole == 0)     # (an empty sequence: its own branch below)
        b64 = tl.full([], 0, tl.int64) + b          # (the interpreter iterates plain ints)
        out_rows = b64 * (NUM_KV_HEADS * GROUP) + head
        if mine & (seg_lo < seg_hi):
            q = tl.load(q_ptr + out_rows[:, None] * HEAD_DIM + d[None, :], mask=row_mask[:, None], other=0.0)
            m_i = tl.zeros([ROWS], dtype=tl.float32) - float("inf")
            l_i = tl.zeros([ROWS], dtype=tl.float32)
            acc = tl.zeros([ROWS, HEAD_DIM], dtype=tl.float32)
            for n0 in range(seg_lo, seg_hi, BLOCK_N):
                offs_n = n0 + tl.arange(0, BLOCK_N)
                n_mask = offs_n < seg_hi
                rows = tl.load(indices_ptr + offs_n, mask=n_mask, other=0).to(tl.int64)
                k = tl.load(k_base + rows[:, None] * (NUM_KV_HEADS * HEAD_DIM) + d[None, :],
                            mask=n_mask[:, None], other=0.0)
                v = tl.load(v_base + rows[:, None] * (NUM_KV_HEADS * HEAD_DIM) + d[None, :],
                            mask=n_mask[:, None], other=0.0)
                s = tl.dot(q, tl.trans(k)) * qk_scale
                s = tl.where(n_mask[None, :], s, float("-inf"))
                m_new = tl.maximum(m_i, tl.max(s, 1))       # finite: every tile holds a valid token
                alpha = tl.math.exp2(m_i - m_new)
                p = tl.math.exp2(s - m_new[:, None])
                l_i = l_i * alpha + tl.sum(p, 1)
                acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v)
                m_i = m_new
            o = acc / l_i[:, None]
            lse = m_i + tl.math.log2(l_i)
            if whole | ((seq_start >= lo) & (seq_end <= hi)):
                # The whole sequence ran in this program: the final answer.
                tl.store(out_ptr + out_rows[:, None] * HEAD_DIM + d[None, :], o.to(out_ptr.dtype.element_ty),
                         mask=row_mask[:, None])
                tl.store(lse_ptr + out_rows, lse, mask=row_mask)
            else:
                first = seq_start // chunk + b           # slot of the sequence's first chunk (slot = c + b)
                slot = ((c + b).to(tl.int64) * NUM_KV_HEADS + kvh) * GROUP
                tl.store(po_ptr + (slot + r[:, None]) * HEAD_DIM + d[None, :], o, mask=row_mask[:, None])
                tl.store(plse_ptr + slot + r, lse, mask=row_mask)
                if LAST_MERGES:
                    # The last program to finish a partial of (sequence, kv head) merges them all, then
                    # resets the counter for the next call (so a captured graph replays as it ran).
                    n = (seq_end - 1) // chunk - seq_start // chunk + 1
                    tl.debug_barrier()                  # every thread's partial stores before the release
                    done = tl.atomic_add(count_ptr + b64 * NUM_KV_HEADS + kvh, 1, sem="acq_rel", scope="gpu")
                    if done == n - 1:
                        _merge_partials(po_ptr, plse_ptr, out_ptr, lse_ptr, b, kvh, first, n, 0, 1,
                                        NUM_KV_HEADS, GROUP, HEAD_DIM, HEAD_DIM, MERGE_SLOTS)
                        tl.atomic_xchg(count_ptr + b64 * NUM_KV_HEADS + kvh, 0, sem="relaxed", scope="gpu")
        elif seq_start == seq_end:
            # An empty sequence that starts in this chunk: output 0, lse -inf.
            tl.store(out_ptr + out_rows[:, None] * HEAD_DIM + d[None, :],
                     tl.zeros([ROWS, HEAD_DIM], dtype=out_ptr.dtype.element_ty), mask=row_mask[:, None])
            tl.store(lse_ptr + out_rows, tl.zeros([ROWS], dtype=tl.float32) - float("inf"), mask=row_mask)


@triton.jit(do_not_specialize=["chunk"])
def _merge_kernel(po_ptr, plse_ptr, indptr_ptr, out_ptr, lse_ptr, chunk,
                  NUM_KV_HEADS: tl.constexpr, GROUP: tl.constexpr, HEAD_DIM: tl.constexpr,
                  MERGE_SPLIT: tl.constexpr, SPLIT_SLOTS: tl.constexpr, WHOLE_SHORT: tl.constexpr):
    b = tl.program_id(0)
    kvh = tl.program_id(1) // MERGE_SPLIT
    part = tl.program_id(1) % MERGE_SPLIT
    seq_start = tl.load(indptr_ptr + b)
    seq_end = tl.load(indptr_ptr + b + 1)
    n = tl.where(seq_end > seq_start, (seq_end - 1) // chunk - seq_start // chunk + 1, 0)
    n = tl.where(_runs_whole(seq_start, seq_end, chunk, WHOLE_SHORT), 0, n)     # the chunk kernel wrote it
    if n > 1:           # n == 1: the chunk kernel wrote the answer; n == 0: it wrote 0 and -inf
        _merge_partials(po_ptr, plse_ptr, out_ptr, lse_ptr, b, kvh, seq_start // chunk + b, n,
                        part * (HEAD_DIM // MERGE_SPLIT), (part == 0).to(tl.int32),
                        NUM_KV_HEADS, GROUP, HEAD_DIM, HEAD_DIM // MERGE_SPLIT, SPLIT_SLOTS)


_SMS = {}
_SCRATCH = {}       # device -> (slots, partial outputs, partial lse); grown, the old ones kept alive
_COUNTS = {}        # device -> per-(sequence, kv head) arrival counters (LAST_MERGES); grown, zeroed once
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
                torch.empty((size, NUM_KV_HEADS, GROUP, HEAD_DIM), dtype=torch.float32, device=device),
                torch.empty((size, NUM_KV_HEADS, GROUP), dtype=torch.float32, device=device))
        _SCRATCH[device] = have
        _KEEP.append(have)
    return have[1], have[2]


def _counters(device, batch):
    have = _COUNTS.get(device)
    if have is None or have.shape[0] < batch * NUM_KV_HEADS:
        # Zeroed once; every merge puts its counter back to 0.
        have = torch.zeros(max(batch * NUM_KV_HEADS, 2 * have.shape[0] if have is not None else 0),
                           dtype=torch.int32, device=device)
        _COUNTS[device] = have
        _KEEP.append(have)
    return have


def _merge_split(sms, batch):
    """Slices of the head dimension per (sequence, kv head) in the merge kernel: MERGE_SPLIT, or with MERGE_FIT
    the fewest (a power of two, at most MERGE_SPLIT) whose grid still has MERGE_FIT_PER_SM programs per SM."""
    if not MERGE_FIT:
        return MERGE_SPLIT
    split = 1
    while split < MERGE_SPLIT and batch * NUM_KV_HEADS * split < MERGE_FIT_PER_SM * sms:
        split *= 2
    return split


def _merge_consts(split):
    """The merge kernel's compile-time arguments for `split` slices, by name (for the JIT) and as the
    positional tail a direct launch of the compiled kernel takes. A program reads 4 x split partials a step
    ([slots, GROUP, HEAD_DIM / split])."""
    consts = dict(NUM_KV_HEADS=NUM_KV_HEADS, GROUP=GROUP, HEAD_DIM=HEAD_DIM, MERGE_SPLIT=split,
                  SPLIT_SLOTS=4 * split, WHOLE_SHORT=WHOLE_SHORT)
    return consts, tuple(consts.values())


def _plan(device, batch, total):
    """Chunk length, grids and partial buffers for one (device, batch, total tokens); shapes only."""
    sms = _num_sms(device)
    chunks_wanted = max(1, PROGRAMS_PER_SM * sms // NUM_KV_HEADS)
    chunk = max(MIN_CHUNK, -(-total // chunks_wanted))
    chunks = max(1, -(-total // chunk))         # one chunk even with no tokens: it writes the empty sequences
    po, plse = _scratch(device, chunks + batch)
    counts = _counters(device, batch) if LAST_MERGES else plse
    if len(_PLANS) > 4096:      # a serving loop sees a new total every step: keep the table bounded
        _PLANS.clear()
        _LAUNCH.clear()
    split = _merge_split(sms, batch)
    plan = (chunk, (chunks * NUM_KV_HEADS,), (batch, NUM_KV_HEADS * split), po, plse, counts, _MERGE_BY_SPLIT[split])
    _PLANS[(device, batch, total)] = plan
    return plan


# Compile-time arguments of each kernel, by name for the JIT and in parameter order (they are the last
# parameters) for a direct launch of the compiled kernel, which takes every argument positionally.
_CHUNK_CONSTS = dict(NUM_KV_HEADS=NUM_KV_HEADS, GROUP=GROUP, ROWS=ROWS, HEAD_DIM=HEAD_DIM, BLOCK_N=BLOCK_N, SCAN=SCAN,
                     LAST_MERGES=LAST_MERGES, MERGE_SLOTS=MERGE_SLOTS, WHOLE_SHORT=WHOLE_SHORT)
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


def run(q, k_cache, v_cache, kv_indptr, kv_indices, sm_scale):
    batch = q.shape[0]
    total = kv_indices.shape[0]
    device = q.device
    output = torch.empty((batch, NUM_QO_HEADS, HEAD_DIM), dtype=torch.bfloat16, device=device)
    lse = torch.empty((batch, NUM_QO_HEADS), dtype=torch.float32, device=device)
    if batch == 0:
        return output, lse
    # The kernels take strides as compile-time constants: contiguous tensors (the workloads' layout).
    if not q.is_contiguous():
        q = q.contiguous()
    if not k_cache.is_contiguous():
        k_cache = k_cache.contiguous()
    if not v_cache.is_contiguous():
        v_cache = v_cache.contiguous()
    plan = _PLANS.get((device, batch, total)) or _plan(device, batch, total)
    chunk, grid, merge_grid, po, plse, counts, (merge_consts, merge_const_values) = plan
    # Triton compiles for 16-byte aligned pointers when they are: a misaligned input takes the JIT path.
    aligned = ((q.data_ptr() | k_cache.data_ptr() | v_cache.data_ptr() | kv_indptr.data_ptr()
                | kv_indices.data_ptr()) & 15) == 0
    key = (device, batch, total) if aligned else None
    _launch(_chunk_kernel, grid, ("chunk", key) if key else None,
            (q, k_cache, v_cache, kv_indptr, kv_indices, output, lse, po, plse, counts,
             float(sm_scale) * LOG2E, batch, total, chunk),
            _CHUNK_CONSTS, _CHUNK_CONST_VALUES, NUM_WARPS, NUM_STAGES)
    if not LAST_MERGES:
        _launch(_merge_kernel, merge_grid, ("merge", key) if key else None,
                (po, plse, kv_indptr, output, lse, chunk),
                merge_consts, merge_const_values, MERGE_WARPS, 1)
    return output, lse
