// GQA paged decode (page size 1): one block per (sequence, query head), one thread per head_dim lane,
// online softmax over the sequence's tokens. Correctness first; not fast.
#include <torch/extension.h>
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAStream.h>
#include <cuda_bf16.h>
#include <vector>

constexpr int QO_HEADS = 32, KV_HEADS = 4, HEAD_DIM = 128, GROUP = QO_HEADS / KV_HEADS;

__global__ void gqa_decode_kernel(const __nv_bfloat16* __restrict__ q, const __nv_bfloat16* __restrict__ k,
                                  const __nv_bfloat16* __restrict__ v, const int* __restrict__ indptr,
                                  const int* __restrict__ indices, float sm_scale,
                                  __nv_bfloat16* __restrict__ out, float* __restrict__ lse) {
    const int b = blockIdx.x, h = blockIdx.y, d = threadIdx.x, kvh = h / GROUP;
    __shared__ float partial[HEAD_DIM / 32];
    const float qd = __bfloat162float(q[(b * QO_HEADS + h) * HEAD_DIM + d]);
    float m = -INFINITY, l = 0.f, acc = 0.f;
    for (int t = indptr[b]; t < indptr[b + 1]; ++t) {
        const long long off = ((long long)indices[t] * KV_HEADS + kvh) * HEAD_DIM + d;
        float p = qd * __bfloat162float(k[off]);
        for (int o = 16; o > 0; o >>= 1) p += __shfl_xor_sync(0xffffffffu, p, o);
        if ((d & 31) == 0) partial[d >> 5] = p;
        __syncthreads();
        float s = 0.f;
        for (int w = 0; w < HEAD_DIM / 32; ++w) s += partial[w];
        s *= sm_scale;
        __syncthreads();
        const float m_new = fmaxf(m, s);
        const float keep = expf(m - m_new), w = expf(s - m_new);
        acc = acc * keep + w * __bfloat162float(v[off]);
        l = l * keep + w;
        m = m_new;
    }
    out[(b * QO_HEADS + h) * HEAD_DIM + d] = __float2bfloat16(l > 0.f ? acc / l : 0.f);
    if (d == 0) lse[b * QO_HEADS + h] = l > 0.f ? (m + logf(l)) * 1.4426950408889634f : -INFINITY;
}

std::vector<torch::Tensor> run(torch::Tensor q, torch::Tensor k_cache, torch::Tensor v_cache,
                               torch::Tensor kv_indptr, torch::Tensor kv_indices, double sm_scale) {
    q = q.contiguous(); k_cache = k_cache.contiguous(); v_cache = v_cache.contiguous();
    const auto batch = q.size(0);
    auto out = torch::empty_like(q);
    auto lse = torch::empty({batch, QO_HEADS}, q.options().dtype(torch::kFloat32));
    if (batch == 0) return {out, lse};
    dim3 grid(batch, QO_HEADS);
    gqa_decode_kernel<<<grid, HEAD_DIM, 0, c10::cuda::getCurrentCUDAStream()>>>(
        reinterpret_cast<const __nv_bfloat16*>(q.data_ptr<at::BFloat16>()),
        reinterpret_cast<const __nv_bfloat16*>(k_cache.data_ptr<at::BFloat16>()),
        reinterpret_cast<const __nv_bfloat16*>(v_cache.data_ptr<at::BFloat16>()),
        kv_indptr.data_ptr<int>(), kv_indices.data_ptr<int>(), static_cast<float>(sm_scale),
        reinterpret_cast<__nv_bfloat16*>(out.data_ptr<at::BFloat16>()), lse.data_ptr<float>());
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    return {out, lse};
}
