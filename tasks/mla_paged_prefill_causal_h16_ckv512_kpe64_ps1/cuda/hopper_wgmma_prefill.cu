// Causal MLA paged prefill (16 heads, 512 latent + 64 rope dims, page size 1) for Hopper (sm_90a): wgmma
// from shared memory, two warpgroups with different jobs, gathered K/V rows double-buffered by cp.async.
//
// Why this shape. The 16 heads share one latent K/V row per token, so a tile's MMA rows are (query token,
// head) pairs: 64 rows = 4 tokens x 16 heads, and every gathered row feeds all 16 heads. A KV step is 64
// gathered rows. q.k is one m64n64 product over 576 dims (8 latent blocks + 1 rope block of 64, 36 wgmma
// k-steps); p.v is m64n512 over 64 keys, whose fp32 accumulator (64 x 512) is too large for one warpgroup,
// so the value columns are split: warpgroup 1 computes q.k, the online softmax and p.v for columns
// 256..511; warpgroup 0 gathers the rows (cp.async, zero-filled past the sequence) and computes p.v for
// columns 0..255 with the P tile and row scales warpgroup 1 leaves in shared memory. While warpgroup 0
// runs p.v of step t, warpgroup 1 already runs q.k of step t+1 (the tensor cores stay busy through the
// softmax). Named barriers order the two: FULL (rows of a stage landed), PREADY (P and scales written),
// EMPTY (warpgroup 1 done reading a stage).
//
// Shared memory (1024-byte aligned, every operand tile in the 128-byte swizzle wgmma reads): the q tile
// (64 rows x 576: 72 KB) and two stages of gathered rows (64 x 512 latent + 64 x 64 rope: 72 KB each; the
// rope block is overwritten by the bf16 P tile once q.k has read it): 216 KB of the 227 KB.
//
// Causal, bottom-right aligned: query i of a sequence sits at KV position kv_len - q_len + i. Tiles are
// aligned to the end of each sequence (tile j holds queries [q_len - 4(j+1), q_len - 4j); the first tile
// of a sequence may be partial), so a tile's cost is its KV length kv_len - 4j. Work items are ranked by
// cost, longest first, by a binary search on the cost in every block (no host sync, no planning kernel):
// block u takes the u-th longest tile. Blocks past the last tile write the rows past qo_indptr[-1]
// (output 0, lse -inf).
#include <torch/extension.h>
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <cuda_bf16.h>
#include <cstdint>
#include <vector>

namespace {

constexpr int H = 16;                 // query heads
constexpr int DC = 512;               // latent (ckv) dims: keys and values
constexpr int DP = 64;                // rope (kpe) dims
constexpr int TOK = 4;                // query tokens per tile
constexpr int TILE_M = TOK * H;       // 64 MMA rows
constexpr int TILE_KV = 64;           // gathered rows per step
constexpr int THREADS = 256;          // two warpgroups
constexpr int NCB = DC / 64;          // 64-column blocks of the latent part
constexpr int BLK = TILE_KV * 128;    // one 64-column block of a 64-row tile, bytes (8 KB)
constexpr float LOG2E = 1.4426950408889634f;

struct Smem {
  uint8_t q_nope[NCB][BLK];           // 64 KB
  uint8_t q_pe[BLK];                  // 8 KB
  struct Stage {
    uint8_t ckv[NCB][BLK];            // 64 KB
    uint8_t kpe_p[BLK];               // 8 KB: rope rows for q.k, then P (64 x 64 bf16) for p.v
  } stage[2];
  float scale[2][TILE_M];             // per-row rescale of the accumulators for each stage's step
  float row_l[TILE_M];                // softmax denominators, from warpgroup 1 to warpgroup 0's epilogue
};
constexpr size_t SMEM_BYTES = sizeof(Smem) + 1024;   // + alignment slack

// Named barriers (0 is __syncthreads). The 256-thread ones pair an arrive of one warpgroup with a sync of the
// other; P_OWN gathers warpgroup 1's 128 threads once all of them have written their part of P.
enum Barrier : int { FULL0 = 1, FULL1 = 2, PREADY0 = 3, PREADY1 = 4, EMPTY0 = 5, EMPTY1 = 6, FINAL = 7, P_OWN = 8 };

// ---- PTX wrappers ---------------------------------------------------------------------------------------
__device__ __forceinline__ uint32_t smem_u32(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

// 16 bytes global -> shared, asynchronously; src_bytes 0 writes zeros.
__device__ __forceinline__ void cp_async_16(uint32_t dst, const void* src, int src_bytes) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src), "r"(src_bytes));
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int N>
__device__ __forceinline__ void cp_async_wait() { asm volatile("cp.async.wait_group %0;\n" ::"n"(N)); }

// Generic-proxy writes to shared memory (cp.async, st.shared) made visible to wgmma (the async proxy).
__device__ __forceinline__ void fence_async_shared() { asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory"); }

__device__ __forceinline__ void bar_sync(int id) { asm volatile("bar.sync %0, %1;\n" ::"r"(id), "n"(THREADS) : "memory"); }
__device__ __forceinline__ void bar_arrive(int id) {
  asm volatile("bar.arrive %0, %1;\n" ::"r"(id), "n"(THREADS) : "memory");
}
__device__ __forceinline__ void bar_sync_wg(int id) { asm volatile("bar.sync %0, 128;\n" ::"r"(id) : "memory"); }

__device__ __forceinline__ void wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void wgmma_commit() { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }
template <int N>
__device__ __forceinline__ void wgmma_wait() { asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory"); }

// Keep the compiler from moving accumulator reads/writes across the asynchronous MMA's issue and wait.
template <int N>
__device__ __forceinline__ void pin(float (&d)[N]) {
#pragma unroll
  for (int i = 0; i < N; ++i) asm volatile("" : "+f"(d[i])::"memory");
}

// Shared-memory matrix descriptor, 128-byte swizzle: start address, leading and stride byte offsets.
// K-major tiles (q, k, P): rows of 128 bytes, 8-row groups 1024 bytes apart (stride), leading offset unused.
// MN-major tile (V for p.v): 64-column blocks `lead` bytes apart, 8-row (key) groups 1024 bytes apart.
__device__ __forceinline__ uint64_t desc(uint32_t addr, uint32_t lead, uint32_t stride) {
  return static_cast<uint64_t>((addr & 0x3FFFF) >> 4) | (static_cast<uint64_t>((lead & 0x3FFFF) >> 4) << 16) |
         (static_cast<uint64_t>((stride & 0x3FFFF) >> 4) << 32) | (1ull << 62);
}

// Eight accumulator registers d[i .. i+7] as read-write asm operands.
#define KS_ACC8(d, i) \
  "+f"(d[i]), "+f"(d[i + 1]), "+f"(d[i + 2]), "+f"(d[i + 3]), "+f"(d[i + 4]), "+f"(d[i + 5]), "+f"(d[i + 6]), "+f"(d[i + 7])

// D[64 x 64] (+)= A[64 x 16] * B[16 x 64]; A and B from shared memory through descriptors; A K-major,
// B K-major. `accumulate` 0 overwrites D.
__device__ __forceinline__ void wgmma_qk(float (&d)[32], uint64_t desc_a, uint64_t desc_b, int accumulate) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, %32, %33, p, 1, 1, 0, 0;\n}\n"
      : KS_ACC8(d, 0), KS_ACC8(d, 8), KS_ACC8(d, 16), KS_ACC8(d, 24)
      : "l"(desc_a), "l"(desc_b), "r"(accumulate));
}

// D[64 x 256] (+)= A[64 x 16] * B[16 x 256]; A and B from shared memory through descriptors; A K-major,
// B MN-major (N contiguous). `accumulate` 0 overwrites D.
__device__ __forceinline__ void wgmma_pv(float (&d)[128], uint64_t desc_a, uint64_t desc_b, int accumulate) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %130, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n256k16.f32.bf16.bf16 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63, %64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, %80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95, %96, %97, %98, %99, %100, %101, %102, %103, %104, %105, %106, %107, %108, %109, %110, %111, %112, %113, %114, %115, %116, %117, %118, %119, %120, %121, %122, %123, %124, %125, %126, %127}, %128, %129, p, 1, 1, 0, 1;\n}\n"
      : KS_ACC8(d, 0), KS_ACC8(d, 8), KS_ACC8(d, 16), KS_ACC8(d, 24),
        KS_ACC8(d, 32), KS_ACC8(d, 40), KS_ACC8(d, 48), KS_ACC8(d, 56),
        KS_ACC8(d, 64), KS_ACC8(d, 72), KS_ACC8(d, 80), KS_ACC8(d, 88),
        KS_ACC8(d, 96), KS_ACC8(d, 104), KS_ACC8(d, 112), KS_ACC8(d, 120)
      : "l"(desc_a), "l"(desc_b), "r"(accumulate));
}

// Both warpgroups' p.v half: O (64 x 256) rescaled by each row's factor, then O += P . V over TILE_KV keys,
// issued (not waited for). P: K-major 64 x TILE_KV at p_addr; V: MN-major TILE_KV x 256 at v_addr (4 blocks).
__device__ __forceinline__ void rescale(float (&o)[128], float a0, float a1) {
#pragma unroll
  for (int i = 0; i < 32; ++i) {
    o[4 * i] *= a0; o[4 * i + 1] *= a0; o[4 * i + 2] *= a1; o[4 * i + 3] *= a1;
  }
}

__device__ __forceinline__ void issue_pv(float (&o)[128], uint32_t p_addr, uint32_t v_addr) {
  pin(o);
  wgmma_fence();
#pragma unroll
  for (int k = 0; k < TILE_KV / 16; ++k)
    wgmma_pv(o, desc(p_addr + 32 * k, 16, 1024), desc(v_addr + 2048 * k, BLK, 1024), 1);
  wgmma_commit();
}

// Byte offset of 16-byte chunk `c` (0..7) of row `r` in a 128-byte-swizzled block of 128-byte rows.
__device__ __forceinline__ uint32_t swz(int r, int c) { return r * 128 + ((c ^ (r & 7)) << 4); }

// ---- work items ---------------------------------------------------------------------------------------
struct Item {
  int b, j;                           // sequence, tile counted from the end of the sequence
};

__device__ __forceinline__ int tiles_of(int q_len) { return (q_len + TOK - 1) / TOK; }

// Number of tiles (over the batch) whose cost kv_len - 4j is >= c; every lane returns the same value.
__device__ int count_at_least(const int* qo, const int* kvp, int batch, int c, int lane) {
  int n = 0;
  for (int b0 = 0; b0 < batch; b0 += 32) {
    int b = b0 + lane;
    if (b < batch) {
      int kv_len = kvp[b + 1] - kvp[b];
      int d = kv_len - c;
      if (d >= 0) n += min(d / TOK + 1, tiles_of(qo[b + 1] - qo[b]));
    }
  }
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) n += __shfl_xor_sync(0xffffffffu, n, o);
  return n;
}

// The u-th tile by cost, longest first (ties: lower sequence first). Requires u < the number of tiles.
__device__ Item find_item(const int* qo, const int* kvp, int batch, int max_kv, int u, int lane) {
  int lo = 1, hi = max_kv;
  while (lo < hi) {
    int mid = (lo + hi + 1) >> 1;
    if (count_at_least(qo, kvp, batch, mid, lane) > u) lo = mid; else hi = mid - 1;
  }
  int k = u - count_at_least(qo, kvp, batch, lo + 1, lane);   // among tiles of cost exactly lo, the k-th
  for (int b0 = 0; b0 < batch; b0 += 32) {
    int b = b0 + lane;
    bool has = false;
    int d = 0;
    if (b < batch) {
      d = (kvp[b + 1] - kvp[b]) - lo;
      has = d >= 0 && d % TOK == 0 && d / TOK < tiles_of(qo[b + 1] - qo[b]);
    }
    unsigned mask = __ballot_sync(0xffffffffu, has);
    int n = __popc(mask);
    if (k < n) {
      unsigned rest = mask;
      for (int q = 0; q < k; ++q) rest &= rest - 1;           // drop the k lowest set bits
      const int pick = __ffs(rest) - 1;                       // lane of the k-th (from 0) set bit
      int jd = __shfl_sync(0xffffffffu, d, pick);
      return Item{b0 + pick, jd / TOK};
    }
    k -= n;
  }
  return Item{-1, 0};
}

// ---- loads ----------------------------------------------------------------------------------------------
// Warpgroup 0 (128 threads): 64 gathered rows x (8 latent blocks + 1 rope block) x 8 chunks of 16 bytes.
// Thread t copies chunk t % 8 of rows t / 8 + 16 i (i = 0..3) of every block.
__device__ __forceinline__ void load_rows(Smem::Stage& st, const __nv_bfloat16* ckv, const __nv_bfloat16* kpe,
                                          const int (&row_id)[4], const bool (&ok)[4], int t) {
  const int c = t & 7;
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const int r = (t >> 3) + 16 * i;
    const int bytes = ok[i] ? 16 : 0;
    const __nv_bfloat16* src = ckv + static_cast<int64_t>(row_id[i]) * DC + c * 8;
#pragma unroll
    for (int cb = 0; cb < NCB; ++cb) cp_async_16(smem_u32(&st.ckv[cb][swz(r, c)]), src + cb * 64, bytes);
    cp_async_16(smem_u32(&st.kpe_p[swz(r, c)]), kpe + static_cast<int64_t>(row_id[i]) * DP + c * 8, bytes);
  }
}

__device__ __forceinline__ void row_ids(const int* idx, int kv_hi, int step, int t, int (&row_id)[4], bool (&ok)[4]) {
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const int pos = step * TILE_KV + (t >> 3) + 16 * i;
    ok[i] = pos < kv_hi;
    row_id[i] = ok[i] ? __ldg(idx + pos) : 0;
  }
}

// ---- the kernel -----------------------------------------------------------------------------------------
__global__ void __launch_bounds__(THREADS, 1)
mla_prefill_kernel(const __nv_bfloat16* __restrict__ q_nope, const __nv_bfloat16* __restrict__ q_pe,
                   const __nv_bfloat16* __restrict__ ckv, const __nv_bfloat16* __restrict__ kpe,
                   const int* __restrict__ qo, const int* __restrict__ kvp, const int* __restrict__ kvi,
                   __nv_bfloat16* __restrict__ out, float* __restrict__ lse, int batch, int total_q, float scale2) {
  extern __shared__ uint8_t smem_raw[];
  Smem& sm = *reinterpret_cast<Smem*>((reinterpret_cast<uintptr_t>(smem_raw) + 1023) & ~uintptr_t(1023));
  const int tid = threadIdx.x;
  const int lane = tid & 31;
  const int wg = tid >> 7;                 // warpgroup
  const int t = tid & 127;                 // thread in the warpgroup
  const int warp = t >> 5;                 // warp in the warpgroup: its 16 rows are one query token
  const int u = blockIdx.x;

  // Tiles over the batch and the longest KV (every warp computes them: no shared state, no sync).
  int n_tiles = 0, max_kv = 0;
  for (int b0 = 0; b0 < batch; b0 += 32) {
    int b = b0 + lane;
    if (b < batch) {
      n_tiles += tiles_of(qo[b + 1] - qo[b]);
      max_kv = max(max_kv, kvp[b + 1] - kvp[b]);
    }
  }
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) {
    n_tiles += __shfl_xor_sync(0xffffffffu, n_tiles, o);
    max_kv = max(max_kv, __shfl_xor_sync(0xffffffffu, max_kv, o));
  }

  if (u >= n_tiles) {
    // Rows past qo_indptr[-1]: output 0, lse -inf, spread over the blocks without a tile.
    const int q_end = batch > 0 ? qo[batch] : 0;
    const int spare = gridDim.x - n_tiles;
    for (int tok = q_end + (u - n_tiles) * TOK; tok < total_q; tok += spare * TOK) {
      const int n = min(TOK, total_q - tok);
      uint4* o4 = reinterpret_cast<uint4*>(out + static_cast<int64_t>(tok) * H * DC);
      for (int i = tid; i < n * H * DC / 8; i += THREADS) o4[i] = make_uint4(0, 0, 0, 0);
      for (int i = tid; i < n * H; i += THREADS) lse[static_cast<int64_t>(tok) * H + i] = -INFINITY;
    }
    return;
  }

  const Item it = find_item(qo, kvp, batch, max_kv, u, lane);
  if (it.b < 0) return;                               // only with kv_len < q_len, which the task rules out
  const int q_start = qo[it.b], q_len = qo[it.b + 1] - q_start;
  const int kv_start = kvp[it.b], kv_len = kvp[it.b + 1] - kv_start;
  const int prefix = kv_len - q_len;
  const int row0 = q_len - TOK * (it.j + 1);          // first query of the tile (< 0: a partial tile)
  const int kv_hi = kv_len - TOK * it.j;              // keys [0, kv_hi) are seen by some row of the tile
  const int steps = (kv_hi + TILE_KV - 1) / TILE_KV;
  const int* idx = kvi + kv_start;

  // q tile: row m = token row0 + m / 16, head m % 16; rows of a partial tile's missing tokens are zeros.
  for (int k = tid; k < TILE_M * (NCB + 1) * 8; k += THREADS) {
    const int c = k & 7, m = (k >> 3) % TILE_M, cb = (k >> 3) / TILE_M;
    const int qi = row0 + m / H;
    const int64_t q_row = static_cast<int64_t>(q_start + max(qi, 0)) * H + m % H;
    const int bytes = qi >= 0 ? 16 : 0;
    if (cb < NCB) cp_async_16(smem_u32(&sm.q_nope[cb][swz(m, c)]), q_nope + q_row * DC + cb * 64 + c * 8, bytes);
    else cp_async_16(smem_u32(&sm.q_pe[swz(m, c)]), q_pe + q_row * DP + c * 8, bytes);
  }
  cp_async_commit();

  // Accumulator fragment (wgmma m64nN, f32): thread holds rows r0 = 16 warp + lane / 4 and r0 + 8, columns
  // 8 i + 2 (lane % 4) + {0, 1} of every 8-column group i: d[4i] (r0, c), d[4i+1] (r0, c+1), d[4i+2] (r0+8, c),
  // d[4i+3] (r0+8, c+1).
  const int r0 = 16 * warp + (lane >> 2);
  const int cq = 2 * (lane & 3);
  const int qi = row0 + warp;                         // this warp's query token (both rows)
  float o[128];
#pragma unroll
  for (int i = 0; i < 128; ++i) o[i] = 0.f;
  float l_fin0 = 1.f, l_fin1 = 1.f;                   // warpgroup 1: the rows' softmax denominators

  const uint32_t q_nope_a = smem_u32(&sm.q_nope[0][0]);
  const uint32_t q_pe_a = smem_u32(&sm.q_pe[0]);

  // Warpgroup 0 starts the gathers of steps 0 and 1 (warpgroup 1 commits empty groups); every thread then
  // waits for its own copies of the q tile (and step 0): after the block barrier all of them are visible.
  int row_id[4];
  bool ok[4];
  if (wg == 0) {
    row_ids(idx, kv_hi, 0, t, row_id, ok);
    load_rows(sm.stage[0], ckv, kpe, row_id, ok, t);
  }
  cp_async_commit();
  if (wg == 0 && steps > 1) {
    row_ids(idx, kv_hi, 1, t, row_id, ok);
    load_rows(sm.stage[1], ckv, kpe, row_id, ok, t);
  }
  cp_async_commit();
  cp_async_wait<1>();
  fence_async_shared();
  __syncthreads();

  if (wg == 0) {
    // ---------------- warpgroup 0: gathers rows, p.v for value columns 0..255 ----------------
    for (int s = 0; s < steps; ++s) {
      const int st = s & 1;
      if (s + 2 < steps) row_ids(idx, kv_hi, s + 2, t, row_id, ok);   // indices early: their latency hides
      bar_sync(st ? PREADY1 : PREADY0);
      const float a0 = sm.scale[st][r0], a1 = sm.scale[st][r0 + 8];
      rescale(o, a0, a1);
      issue_pv(o, smem_u32(&sm.stage[st].kpe_p[0]), smem_u32(&sm.stage[st].ckv[0][0]));
      if (s + 1 < steps) {                            // step s+1's rows: let warpgroup 1 start its q.k now
        cp_async_wait<0>();
        fence_async_shared();
        bar_arrive(st ? FULL0 : FULL1);
      }
      wgmma_wait<0>();
      pin(o);
      bar_sync(st ? EMPTY1 : EMPTY0);                 // warpgroup 1 is done with this stage
      if (s + 2 < steps) load_rows(sm.stage[st], ckv, kpe, row_id, ok, t);
      cp_async_commit();
    }
    bar_sync(FINAL);
  } else {
    // ---------------- warpgroup 1: q.k, online softmax, p.v for value columns 256..511 ----------------
    const int limit = prefix + max(qi, 0);            // last key this warp's token sees
    const int first_masked = (prefix + max(row0, 0) + 1) / TILE_KV;   // steps before it are seen whole
    float m0 = -INFINITY, m1 = -INFINITY, l0 = 0.f, l1 = 0.f;
    float sc[32];
    for (int s = 0; s < steps; ++s) {
      const int st = s & 1;
      if (s > 0) bar_sync(st ? FULL1 : FULL0);
      const uint32_t k_a = smem_u32(&sm.stage[st].ckv[0][0]);
      const uint32_t kp_a = smem_u32(&sm.stage[st].kpe_p[0]);
      pin(sc);
      wgmma_fence();
#pragma unroll
      for (int k = 0; k < DP / 16; ++k) wgmma_qk(sc, desc(q_pe_a + 32 * k, 16, 1024), desc(kp_a + 32 * k, 16, 1024), k > 0);
#pragma unroll
      for (int cb = 0; cb < NCB; ++cb)
#pragma unroll
        for (int k = 0; k < 4; ++k)
          wgmma_qk(sc, desc(q_nope_a + cb * BLK + 32 * k, 16, 1024), desc(k_a + cb * BLK + 32 * k, 16, 1024), 1);
      wgmma_commit();
      wgmma_wait<0>();
      pin(sc);

      if (s >= first_masked) {                        // the diagonal: keys past the token or the tile
        const int kv0 = s * TILE_KV + cq;
#pragma unroll
        for (int i = 0; i < 8; ++i) {
#pragma unroll
          for (int e = 0; e < 2; ++e) {
            const int key = kv0 + 8 * i + e;
            if (key > limit || key >= kv_hi) { sc[4 * i + e] = -INFINITY; sc[4 * i + 2 + e] = -INFINITY; }
          }
        }
      }
      float x0 = -INFINITY, x1 = -INFINITY;
#pragma unroll
      for (int i = 0; i < 8; ++i) {
        x0 = fmaxf(x0, fmaxf(sc[4 * i], sc[4 * i + 1]));
        x1 = fmaxf(x1, fmaxf(sc[4 * i + 2], sc[4 * i + 3]));
      }
      x0 = fmaxf(x0, __shfl_xor_sync(0xffffffffu, x0, 1));
      x0 = fmaxf(x0, __shfl_xor_sync(0xffffffffu, x0, 2));
      x1 = fmaxf(x1, __shfl_xor_sync(0xffffffffu, x1, 1));
      x1 = fmaxf(x1, __shfl_xor_sync(0xffffffffu, x1, 2));
      const float n0 = fmaxf(m0, x0 * scale2), n1 = fmaxf(m1, x1 * scale2);   // finite: key 0 is seen at step 0
      const float a0 = exp2f(m0 - n0), a1 = exp2f(m1 - n1);
      m0 = n0;
      m1 = n1;
      float s0 = 0.f, s1 = 0.f;
      uint8_t* p_tile = sm.stage[st].kpe_p;           // q.k has read the rope rows: P takes their place
#pragma unroll
      for (int i = 0; i < 8; ++i) {
        const float p00 = exp2f(fmaf(sc[4 * i], scale2, -n0)), p01 = exp2f(fmaf(sc[4 * i + 1], scale2, -n0));
        const float p10 = exp2f(fmaf(sc[4 * i + 2], scale2, -n1)), p11 = exp2f(fmaf(sc[4 * i + 3], scale2, -n1));
        s0 += p00 + p01;
        s1 += p10 + p11;
        const __nv_bfloat162 w0 = __floats2bfloat162_rn(p00, p01), w1 = __floats2bfloat162_rn(p10, p11);
        // P row r, keys 8 i + cq, +1: chunk i of the row, byte 2 cq inside it
        *reinterpret_cast<__nv_bfloat162*>(p_tile + swz(r0, i) + 2 * cq) = w0;
        *reinterpret_cast<__nv_bfloat162*>(p_tile + swz(r0 + 8, i) + 2 * cq) = w1;
      }
      l0 = l0 * a0 + s0;
      l1 = l1 * a1 + s1;
      if ((lane & 3) == 0) {
        sm.scale[st][r0] = a0;
        sm.scale[st][r0 + 8] = a1;
      }
      fence_async_shared();
      bar_arrive(st ? PREADY1 : PREADY0);
      bar_sync_wg(P_OWN);                             // every row of P is written before this warpgroup reads it

      rescale(o, a0, a1);
      issue_pv(o, smem_u32(p_tile), smem_u32(&sm.stage[st].ckv[NCB / 2][0]));
      wgmma_wait<0>();
      pin(o);
      bar_arrive(st ? EMPTY1 : EMPTY0);
    }
    l0 += __shfl_xor_sync(0xffffffffu, l0, 1);
    l0 += __shfl_xor_sync(0xffffffffu, l0, 2);
    l1 += __shfl_xor_sync(0xffffffffu, l1, 1);
    l1 += __shfl_xor_sync(0xffffffffu, l1, 2);
    if ((lane & 3) == 0) {
      sm.row_l[r0] = l0;                              // for warpgroup 0's normalisation
      sm.row_l[r0 + 8] = l1;
      if (qi >= 0) {
        lse[static_cast<int64_t>(q_start + qi) * H + (r0 & 15)] = m0 + log2f(l0);
        lse[static_cast<int64_t>(q_start + qi) * H + ((r0 + 8) & 15)] = m1 + log2f(l1);
      }
    }
    l_fin0 = l0;
    l_fin1 = l1;
    bar_arrive(FINAL);
  }

  // Both warpgroups: normalise and write their 256 value columns of this warp's token.
  if (qi >= 0) {
    const float inv0 = 1.f / (wg ? l_fin0 : sm.row_l[r0]), inv1 = 1.f / (wg ? l_fin1 : sm.row_l[r0 + 8]);
    __nv_bfloat16* o_row0 = out + (static_cast<int64_t>(q_start + qi) * H + (r0 & 15)) * DC + wg * 256 + cq;
    __nv_bfloat16* o_row1 = out + (static_cast<int64_t>(q_start + qi) * H + ((r0 + 8) & 15)) * DC + wg * 256 + cq;
#pragma unroll
    for (int i = 0; i < 32; ++i) {
      *reinterpret_cast<__nv_bfloat162*>(o_row0 + 8 * i) = __floats2bfloat162_rn(o[4 * i] * inv0, o[4 * i + 1] * inv0);
      *reinterpret_cast<__nv_bfloat162*>(o_row1 + 8 * i) =
          __floats2bfloat162_rn(o[4 * i + 2] * inv1, o[4 * i + 3] * inv1);
    }
  }
}

}  // namespace

std::vector<torch::Tensor> run(torch::Tensor q_nope, torch::Tensor q_pe, torch::Tensor ckv_cache, torch::Tensor kpe_cache,
                               torch::Tensor qo_indptr, torch::Tensor kv_indptr, torch::Tensor kv_indices,
                               double sm_scale) {
  TORCH_CHECK(q_nope.is_contiguous() && q_pe.is_contiguous() && ckv_cache.is_contiguous() &&
                  kpe_cache.is_contiguous() && kv_indices.is_contiguous(),
              "mla prefill: inputs must be contiguous");
  const int total_q = static_cast<int>(q_nope.size(0));
  const int batch = static_cast<int>(qo_indptr.size(0)) - 1;
  auto output = torch::empty({total_q, H, DC}, q_nope.options());
  auto lse = torch::empty({total_q, H}, q_nope.options().dtype(torch::kFloat32));
  const int grid = (total_q + TOK - 1) / TOK + max(batch, 0);
  if (grid == 0) return {output, lse};
  const c10::cuda::CUDAGuard guard(q_nope.device());
  static bool configured[64] = {};                   // the shared-memory opt-in, once per device
  const int dev = q_nope.get_device();
  if (dev >= 64 || !configured[dev]) {
    C10_CUDA_CHECK(cudaFuncSetAttribute(mla_prefill_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                        static_cast<int>(SMEM_BYTES)));
    if (dev < 64) configured[dev] = true;
  }
  mla_prefill_kernel<<<grid, THREADS, SMEM_BYTES, c10::cuda::getCurrentCUDAStream()>>>(
      reinterpret_cast<const __nv_bfloat16*>(q_nope.data_ptr()), reinterpret_cast<const __nv_bfloat16*>(q_pe.data_ptr()),
      reinterpret_cast<const __nv_bfloat16*>(ckv_cache.data_ptr()),
      reinterpret_cast<const __nv_bfloat16*>(kpe_cache.data_ptr()), qo_indptr.data_ptr<int>(),
      kv_indptr.data_ptr<int>(), kv_indices.data_ptr<int>(), reinterpret_cast<__nv_bfloat16*>(output.data_ptr()),
      lse.data_ptr<float>(), batch, total_q, static_cast<float>(sm_scale) * LOG2E);
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  return {output, lse};
}
