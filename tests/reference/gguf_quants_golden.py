#!/usr/bin/env python3
"""Golden file for rtx's GGUF dequantizers, made by gguf-py (llama.cpp's own Python package).

Writes tests/reference/data/quants_golden.gguf: for each ggml type T in the list, a tensor
"T" of that type (3 rows of 256 values, ggml order) and a tensor "T.ref" (F32) holding what
gguf-py's numpy dequantizer (gguf.quants.dequantize) makes of it. Legacy types are quantized
from seeded normal data with gguf-py's quantizer; gguf-py 0.19 cannot quantize K-quants, so
their blocks are seeded random bytes with the f16 scale fields set to sane values (the offsets
come from the block layouts in ggml's ggml-common.h; gguf-py decodes the blocks with its own
layout, so a wrong offset here or in rtx shows up as a mismatch).

Usage: pip install gguf numpy && python3 tests/reference/gguf_quants_golden.py
Not run by the build or CI; the output is committed.
"""
import os

import numpy as np
import gguf
from gguf import GGMLQuantizationType as Q
from gguf import quants

ROWS, COLS = 3, 256
rng = np.random.default_rng(20261130)

# f16 fields of one K-quant block: (byte offset, value range)
K_SCALE_FIELDS = {
    Q.Q4_K: [(0, (0.001, 0.05)), (2, (0.0, 0.02))],   # d, dmin
    Q.Q5_K: [(0, (0.001, 0.05)), (2, (0.0, 0.02))],   # d, dmin
    Q.Q6_K: [(208, (0.001, 0.05))],                   # d (last)
}


def k_blocks(qtype):
    block_elems, block_bytes = gguf.GGML_QUANT_SIZES[qtype]
    nblocks = ROWS * COLS // block_elems
    raw = rng.integers(0, 256, size=(nblocks, block_bytes), dtype=np.uint8)
    for off, (lo, hi) in K_SCALE_FIELDS[qtype]:
        vals = rng.uniform(lo, hi, size=nblocks).astype(np.float16)
        raw[:, off:off + 2] = vals.view(np.uint8).reshape(nblocks, 2)
    return raw.reshape(ROWS, COLS // block_elems * block_bytes)


def main():
    out = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data", "quants_golden.gguf")
    w = gguf.GGUFWriter(out, arch="rtx-quants-golden")
    for qtype in [Q.F16, Q.BF16, Q.Q4_0, Q.Q4_1, Q.Q5_0, Q.Q5_1, Q.Q8_0, Q.Q4_K, Q.Q5_K, Q.Q6_K]:
        if qtype in K_SCALE_FIELDS:
            q = k_blocks(qtype)
        else:
            x = (rng.standard_normal((ROWS, COLS)) * rng.uniform(0.1, 3.0, size=(ROWS, 1))).astype(np.float32)
            x[0, :7] = [0.0, -0.0, 1e-8, -65504.0 / 1e4, 3.0, -3.0, 0.5]  # zeros, tiny, ties
            q = quants.quantize(x, qtype)
        ref = quants.dequantize(q, qtype).astype(np.float32)
        assert ref.shape == (ROWS, COLS) and np.isfinite(ref).all(), qtype.name
        w.add_tensor(qtype.name, q, raw_dtype=qtype)
        w.add_tensor(qtype.name + ".ref", ref)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    print("wrote", out, os.path.getsize(out), "bytes")


if __name__ == "__main__":
    main()
