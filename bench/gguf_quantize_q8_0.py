#!/usr/bin/env python3
"""Make a Q8_0 copy of a GGUF (v2/v3) for benchmarks: every 2-D tensor whose rows are whole
32-value blocks becomes Q8_0 (gguf-py's quantizer, which follows llama.cpp's quantize_row_q8_0);
1-D tensors (norms, biases) and the rest are copied as they are; metadata is copied key by key.

    pip install gguf numpy
    python3 bench/gguf_quantize_q8_0.py in-f32.gguf out-q8_0.gguf

Both rtx-serve and llama.cpp's llama-server then load the same file (bench/serve_vs_llamacpp.sh).
Not used by the build or CI.
"""
import sys

import numpy as np
import gguf
from gguf import GGMLQuantizationType as Q


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    src, dst = sys.argv[1], sys.argv[2]
    r = gguf.GGUFReader(src)
    arch = r.fields["general.architecture"].contents()
    w = gguf.GGUFWriter(dst, arch=arch)
    for name, field in r.fields.items():
        if name.startswith("GGUF.") or name == "general.architecture":
            continue
        vtype = field.types[0]
        sub = field.types[-1] if vtype == gguf.GGUFValueType.ARRAY else None
        w.add_key_value(name, field.contents(), vtype, sub_type=sub)
    quantized = 0
    for t in r.tensors:
        data = np.asarray(t.data)
        ne = [int(x) for x in t.shape]  # ggml order
        if t.tensor_type == Q.F32 and len(ne) == 2 and ne[0] % 32 == 0:
            rows = data.reshape(ne[1], ne[0]).astype(np.float32)
            w.add_tensor(t.name, gguf.quants.quantize(rows, Q.Q8_0), raw_dtype=Q.Q8_0)
            quantized += 1
        else:
            w.add_tensor(t.name, data, raw_shape=list(reversed(ne)), raw_dtype=t.tensor_type)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    print(f"{dst}: {quantized} of {len(r.tensors)} tensors as Q8_0")


if __name__ == "__main__":
    main()
