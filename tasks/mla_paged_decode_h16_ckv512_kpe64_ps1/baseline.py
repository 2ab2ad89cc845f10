"""FlashInfer baseline for MLA decode (GPU only). The factory plans outside the timed region."""

import torch

from ksearch.task.baselines import flashinfer_workspace as _workspace


def _mla_wrapper(inputs, backend):
    import flashinfer

    q_nope, q_pe = inputs["q_nope"], inputs["q_pe"]
    ckv_cache, kpe_cache = inputs["ckv_cache"], inputs["kpe_cache"]
    kv_indptr, kv_indices = inputs["kv_indptr"], inputs["kv_indices"]
    batch, device = q_nope.shape[0], q_nope.device
    qo_indptr = torch.arange(batch + 1, dtype=torch.int32, device=device)   # one query per sequence
    kv_len_arr = (kv_indptr[1:] - kv_indptr[:-1]).to(torch.int32)          # page size 1
    wrapper = flashinfer.mla.BatchMLAPagedAttentionWrapper(_workspace(device), backend=backend)
    wrapper.plan(qo_indptr, kv_indptr, kv_indices, kv_len_arr, 16, 512, 64, 1, False,
                 inputs["sm_scale"], torch.bfloat16, torch.bfloat16)

    def call():
        return wrapper.run(q_nope, q_pe, ckv_cache, kpe_cache, return_lse=True)

    return call


BASELINES = {
    # What FlashInfer-Bench's published baseline uses; "auto" picks fa3 on SM90a (H200).
    "flashinfer_auto": lambda inputs: _mla_wrapper(inputs, backend="auto"),
}
