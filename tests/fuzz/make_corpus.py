#!/usr/bin/env python3
"""Write the seed corpora of the fuzz targets into tests/fuzz/corpus/<target>/ (deterministic).

Hand-made small files: valid examples of each format plus the known bug classes of file
readers (lengths past the end, caps, overlaps, holes, shape x dtype mismatches, overflowing
products, negative offsets, duplicate keys, non-UTF-8 names, huge declared lengths, data past
the end). Regression inputs found by fuzzing are added as `regress-*` files by hand and are not
touched here. Usage: python3 tests/fuzz/make_corpus.py
"""
import hashlib
import json
import os
import struct

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "corpus")


def put(target, name, data):
    d = os.path.join(ROOT, target)
    os.makedirs(d, exist_ok=True)
    if isinstance(data, str):
        data = data.encode("utf-8", "surrogateescape")
    with open(os.path.join(d, name), "wb") as f:
        f.write(data)


# ---- safetensors ------------------------------------------------------------------------------
def st_file(header, data=b"", raw_header=None, pad=True, length=None):
    h = raw_header if raw_header is not None else json.dumps(header, separators=(",", ":")).encode()
    if pad:
        h += b" " * ((8 - len(h) % 8) % 8)
    n = len(h) if length is None else length
    return struct.pack("<Q", n) + h + data


def st_tensors(tensors, meta=None, checksum=False):
    """tensors: list of (name, dtype, shape, bytes) laid out back to back."""
    header, data, off = {}, b"", 0
    for name, dt, shape, b in tensors:
        header[name] = {"dtype": dt, "shape": shape, "data_offsets": [off, off + len(b)]}
        data += b
        off += len(b)
    meta = dict(meta or {})
    if checksum:
        meta["rtx.sha256"] = hashlib.sha256(data).hexdigest()
    if meta:
        header["__metadata__"] = meta
    return header, data


def safetensors():
    t = "safetensors"
    f32 = struct.pack("<2f", 1.5, -2.0)
    bf16 = struct.pack("<3H", 0x3F80, 0xC000, 0x7F80)
    f16 = struct.pack("<2H", 0x3C00, 0xFC00)
    h, d = st_tensors([("a", "F32", [2], f32), ("b", "BF16", [1, 3], bf16), ("c", "F16", [2, 1], f16)],
                      {"format": "pt"}, checksum=True)
    put(t, "valid-three-tensors", st_file(h, d))
    h, d = st_tensors([("x", "I64", [1], struct.pack("<q", -1)), ("s", "U8", [], b"\x07"), ("z", "F32", [0, 5], b"")])
    put(t, "valid-scalar-empty-i64", st_file(h, d))
    put(t, "valid-empty", st_file({}, b""))
    hb, d = st_tensors([("a", "F32", [2], f32)], checksum=True)
    hb["__metadata__"]["rtx.sha256"] = "0" * 64
    put(t, "bad-checksum", st_file(hb, d))
    h, d = st_tensors([("a", "F32", [2], f32)])
    put(t, "header-len-past-eof", st_file(h, d, length=4096))
    put(t, "header-len-above-cap", st_file(h, d, length=100 * 1000 * 1000 + 8))
    put(t, "header-len-u64-max", st_file(h, d, length=2**64 - 1))
    put(t, "header-len-wraps", st_file(h, d, length=2**64 - 8))
    put(t, "short-prefix", b"\x10\x00\x00")
    put(t, "overlap", st_file({"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]},
                               "b": {"dtype": "F32", "shape": [2], "data_offsets": [4, 12]}}, b"\0" * 12))
    put(t, "hole", st_file({"a": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]},
                            "b": {"dtype": "F32", "shape": [1], "data_offsets": [8, 12]}}, b"\0" * 12))
    put(t, "trailing-bytes", st_file({"a": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]}}, b"\0" * 9))
    put(t, "shape-dtype-mismatch", st_file({"a": {"dtype": "F32", "shape": [3], "data_offsets": [0, 8]}}, b"\0" * 8))
    put(t, "shape-product-overflow", st_file({"a": {"dtype": "F32", "shape": [2**32, 2**32, 16], "data_offsets": [0, 0]}}))
    put(t, "shape-product-overflow-2", st_file({"a": {"dtype": "U8", "shape": [2**63, 2], "data_offsets": [0, 0]}}))
    put(t, "shape-too-big-int", st_file({"a": {"dtype": "U8", "shape": [2**64 + 3], "data_offsets": [0, 3]}}, b"abc"))
    put(t, "negative-offset", st_file({"a": {"dtype": "F32", "shape": [2], "data_offsets": [-8, 0]}}, b"\0" * 8))
    put(t, "negative-extent", st_file({"a": {"dtype": "F32", "shape": [-2], "data_offsets": [0, 8]}}, b"\0" * 8))
    put(t, "offsets-reversed", st_file({"a": {"dtype": "F32", "shape": [2], "data_offsets": [8, 0]}}, b"\0" * 8))
    put(t, "offset-past-end", st_file({"a": {"dtype": "F32", "shape": [2**40], "data_offsets": [0, 2**42]}}, b"\0" * 8))
    put(t, "offsets-float", st_file({"a": {"dtype": "F32", "shape": [2], "data_offsets": [0.0, 8.5]}}, b"\0" * 8))
    put(t, "offsets-three", st_file({"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8, 9]}}, b"\0" * 8))
    put(t, "duplicate-key", st_file(None, b"\0" * 8, raw_header=b'{"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},'
                                    b'"a":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}}'))
    put(t, "non-utf8-name", st_file(None, b"\0" * 4, raw_header=b'{"\xff\xfe":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}}'))
    put(t, "unknown-dtype", st_file({"a": {"dtype": "F128", "shape": [1], "data_offsets": [0, 16]}}, b"\0" * 16))
    put(t, "metadata-not-strings", st_file({"__metadata__": {"k": 1}}))
    put(t, "metadata-tensor-name", st_file({"__metadata__": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]}}, b"\0" * 4))
    put(t, "header-not-object", st_file(None, raw_header=b"[1,2,3]"))
    put(t, "header-truncated-json", st_file(None, raw_header=b'{"a":{"dtype":"F3'))
    put(t, "header-nul-bytes", st_file(None, raw_header=b"{\0\0\0}"))
    put(t, "deep-nesting", st_file(None, raw_header=b"[" * 5000 + b"]" * 5000))


# ---- GGUF -------------------------------------------------------------------------------------
U8, I8, U16, I16, U32, I32, F32, BOOL, STRING, ARRAY, U64, I64, F64 = range(13)


class Gguf:
    def __init__(self, version=3, alignment=32):
        self.v, self.align, self.kv, self.tensors = version, alignment, [], []

    def cnt(self, n):  # counts, lengths and dims: u32 in v1, u64 in v2/v3
        return struct.pack("<I" if self.v == 1 else "<Q", n)

    def s(self, text, declared=None):
        b = text if isinstance(text, bytes) else text.encode()
        return self.cnt(len(b) if declared is None else declared) + b

    def val(self, t, v):
        fmt = {U8: "<B", I8: "<b", U16: "<H", I16: "<h", U32: "<I", I32: "<i", F32: "<f", BOOL: "<B",
               U64: "<Q", I64: "<q", F64: "<d"}
        if t == STRING:
            return self.s(v)
        if t == ARRAY:
            et, items = v
            return struct.pack("<I", et) + self.cnt(len(items)) + b"".join(self.val(et, x) for x in items)
        return struct.pack(fmt[t], v)

    def add(self, key, t, v):
        self.kv.append(self.s(key) + struct.pack("<I", t) + self.val(t, v))

    def add_raw(self, raw):
        self.kv.append(raw)

    def tensor(self, name, ne, gtype, data, offset=None):
        self.tensors.append((name, ne, gtype, data, offset))

    def build(self, tensor_count=None, kv_count=None, version_bytes=None):
        out = b"GGUF" + (version_bytes if version_bytes is not None else struct.pack("<I", self.v))
        out += self.cnt(len(self.tensors) if tensor_count is None else tensor_count)
        out += self.cnt(len(self.kv) if kv_count is None else kv_count)
        out += b"".join(self.kv)
        data, offs = b"", []
        for name, ne, gtype, d, offset in self.tensors:
            if offset is None:
                data += b"\0" * ((-len(data)) % self.align)
                offset = len(data)
                data += d
            offs.append(offset)
        for (name, ne, gtype, d, _), offset in zip(self.tensors, offs):
            out += self.s(name) + struct.pack("<I", len(ne)) + b"".join(self.cnt(x) for x in ne)
            out += struct.pack("<I", gtype) + struct.pack("<Q", offset)
        out += b"\0" * ((-len(out)) % self.align)
        return out + data


def gguf():
    t = "gguf"
    f32 = struct.pack("<6f", *range(6))
    f16 = struct.pack("<4H", 0x3C00, 0x4000, 0x0000, 0x7C00)
    for v in (1, 2, 3):
        g = Gguf(v)
        g.add("general.architecture", STRING, "llama")
        g.add("general.name", STRING, "fuzz \xe2\x9c\x93")
        g.add("llama.block_count", U32, 1)
        g.add("x.i8", I8, -3)
        g.add("x.f64", F64, 0.25)
        g.add("x.bool", BOOL, 1)
        g.add("x.arr", ARRAY, (I32, [1, -2, 3]))
        g.add("x.strs", ARRAY, (STRING, ["a", "", "bc"]))
        g.tensor("w", [3, 2], 0, f32)
        g.tensor("h", [4], 1, f16)
        put(t, f"valid-v{v}", g.build())
    g = Gguf(3, alignment=64)
    g.add("general.alignment", U32, 64)
    g.tensor("q", [32], 8, b"\1" * 34)  # Q8_0: one block of 32 = 34 bytes
    put(t, "valid-q8-align64", g.build())
    put(t, "valid-empty", Gguf(3).build())

    g = Gguf(3); g.add_raw(Gguf(3).s("k") + struct.pack("<I", STRING) + Gguf(3).s(b"abc", declared=2**63))
    put(t, "string-huge-length", g.build())
    g = Gguf(3); g.add_raw(Gguf(3).s(b"k", declared=2**64 - 1))
    put(t, "key-huge-length", g.build())
    g = Gguf(3); g.add_raw(Gguf(3).s("k") + struct.pack("<I", ARRAY) + struct.pack("<I", U64) + struct.pack("<Q", 2**61))
    put(t, "array-huge-count", g.build())
    g = Gguf(3); g.add_raw(Gguf(3).s("k") + struct.pack("<I", ARRAY) + struct.pack("<I", STRING) + struct.pack("<Q", 2**40) + b"\0" * 16)
    put(t, "array-of-strings-huge-count", g.build())
    g = Gguf(1); g.add_raw(Gguf(1).s("k") + struct.pack("<I", ARRAY) + struct.pack("<I", U8) + struct.pack("<I", 2**32 - 1))
    put(t, "v1-array-huge-count", g.build())
    nested = Gguf(3).s("deep") + struct.pack("<I", ARRAY)
    for _ in range(8):
        nested += struct.pack("<I", ARRAY) + struct.pack("<Q", 1)
    nested += struct.pack("<I", U8) + struct.pack("<Q", 1) + b"\0"
    g = Gguf(3); g.add_raw(nested)
    put(t, "array-nested-deep", g.build())
    put(t, "tensor-count-huge", Gguf(3).build(tensor_count=2**62))
    put(t, "kv-count-huge", Gguf(3).build(kv_count=2**62))
    g = Gguf(3); g.tensor("w", [4], 0, b"", offset=2**40)
    put(t, "tensor-offset-past-end", g.build())
    g = Gguf(3); g.tensor("w", [2**63], 0, b"", offset=0)
    put(t, "tensor-size-overflow", g.build())
    g = Gguf(3); g.tensor("w", [2**32, 2**32, 2**32], 0, b"", offset=0)
    put(t, "tensor-ne-product-overflow", g.build())
    g = Gguf(3); g.tensor("a", [8], 0, b"\0" * 32); g.tensor("b", [8], 0, b"", offset=0)
    put(t, "tensors-overlap", g.build())
    g = Gguf(3); g.tensor("a", [8], 0, b"\0" * 32); g.tensor("a", [8], 0, b"\0" * 32)
    put(t, "tensor-duplicate-name", g.build())
    g = Gguf(3); g.tensor("a", [4], 0, b"", offset=4)
    put(t, "tensor-unaligned", g.build() + b"\0" * 32)
    g = Gguf(3); g.tensor("a", [4], 4, b"\0" * 16)
    put(t, "tensor-retired-type", g.build())
    g = Gguf(3); g.tensor("a", [33], 8, b"\0" * 36)
    put(t, "tensor-ne0-not-block-multiple", g.build())
    g = Gguf(3); g.tensor("a", [1, 1, 1, 1, 1], 0, b"\0" * 4)
    put(t, "tensor-five-dims", g.build())
    g = Gguf(3); g.tensor(b"\xff\xfe\xfd".decode("latin-1"), [1], 0, b"\0" * 4)
    put(t, "tensor-non-utf8-name", g.build().replace("ÿþý".encode(), b"\xff\xfe\xfd"))
    g = Gguf(3); g.add("k", U8, 1); g.add("k", U8, 2)
    put(t, "duplicate-key", g.build())
    g = Gguf(3); g.add("general.alignment", U32, 3)
    put(t, "alignment-not-pow2", g.build())
    g = Gguf(3); g.add("general.alignment", U32, 0)
    put(t, "alignment-zero", g.build())
    g = Gguf(3); g.add("b", BOOL, 2)
    put(t, "bool-two", g.build())
    g = Gguf(3); g.add_raw(Gguf(3).s("k") + struct.pack("<I", 13) + b"\0" * 8)
    put(t, "value-type-unknown", g.build())
    put(t, "big-endian-version", Gguf(3).build(version_bytes=struct.pack(">I", 3)))
    put(t, "version-4", Gguf(3).build(version_bytes=struct.pack("<I", 4)))
    put(t, "truncated-header", b"GGUF\x03\x00\x00\x00\x01")
    put(t, "bad-magic", b"GGML" + b"\0" * 20)


# ---- checkpoint (rtx.checkpoint.v1 in safetensors) ---------------------------------------------
def gpt2_layout(L, C, V, T):
    out = [("wte", [V, C]), ("wpe", [T, C])]
    for l in range(L):
        h = f"h.{l}."
        out += [(h + "ln_1.weight", [C]), (h + "ln_1.bias", [C]), (h + "attn.c_attn.weight", [3 * C, C]),
                (h + "attn.c_attn.bias", [3 * C]), (h + "attn.c_proj.weight", [C, C]), (h + "attn.c_proj.bias", [C]),
                (h + "ln_2.weight", [C]), (h + "ln_2.bias", [C]), (h + "mlp.c_fc.weight", [4 * C, C]),
                (h + "mlp.c_fc.bias", [4 * C]), (h + "mlp.c_proj.weight", [C, 4 * C]), (h + "mlp.c_proj.bias", [C])]
    return out + [("ln_f.weight", [C]), ("ln_f.bias", [C])]


def checkpoint_file(cfg=None, step="3", opt=True, edit=None, meta_edit=None, value=0.5):
    cfg = cfg or {"n_layer": 1, "n_head": 1, "n_embd": 2, "block_size": 2, "vocab_size": 3}
    lay = gpt2_layout(1, 2, 3, 2)
    tensors = []
    for prefix in ([""] + (["optim.m.", "optim.v."] if opt else [])):
        for name, shape in lay:
            n = 1
            for d in shape:
                n *= d
            tensors.append([prefix + name, "F32", shape, struct.pack(f"<{n}f", *([value] * n))])
    if edit:
        edit(tensors)
    meta = {"schema": "rtx.checkpoint.v1", "format": "pt", "config": json.dumps(cfg), "run_config": "{}",
            "step": step, "rng": json.dumps({"seed": 7, "train_subseq_next": 3}), "best_val_loss": "1.25",
            "optimizer": "adamw" if opt else "none"}
    if meta_edit:
        meta_edit(meta)
    h, d = st_tensors([tuple(x) for x in tensors], meta, checksum=True)
    return st_file(h, d)


def checkpoint():
    t = "checkpoint"
    put(t, "valid-tiny", checkpoint_file())
    put(t, "valid-tiny-no-optimizer", checkpoint_file(opt=False))
    put(t, "config-huge-layers", checkpoint_file(cfg={"n_layer": 2**31 - 1, "n_head": 1, "n_embd": 2, "block_size": 2, "vocab_size": 3}))
    put(t, "config-huge-vocab", checkpoint_file(cfg={"n_layer": 1, "n_head": 1, "n_embd": 2**30, "block_size": 2**31 - 1, "vocab_size": 2**31 - 1}))
    put(t, "step-above-int", checkpoint_file(step="4294967295"))
    put(t, "step-negative", checkpoint_file(step="-1"))
    put(t, "step-float", checkpoint_file(step="1.5"))
    put(t, "nan-weight", checkpoint_file(value=float("nan")))
    put(t, "negative-second-moment", checkpoint_file(value=-1.0))

    def wrong_shape(ts):
        ts[0][2] = [2, 3]
    put(t, "wrong-shape", checkpoint_file(edit=wrong_shape))

    def wrong_dtype(ts):
        ts[1][1] = "I32"
    put(t, "wrong-dtype", checkpoint_file(edit=wrong_dtype))

    def drop(ts):
        del ts[3]
    put(t, "missing-tensor", checkpoint_file(edit=drop))
    put(t, "bad-config-json", checkpoint_file(meta_edit=lambda m: m.update(config="{")))
    put(t, "no-schema", checkpoint_file(meta_edit=lambda m: m.pop("schema")))
    put(t, "rng-seed-negative", checkpoint_file(meta_edit=lambda m: m.update(rng='{"seed":-1}')))


# ---- bench packs ------------------------------------------------------------------------------
def benchpack():
    t = "benchpack"
    smoke = {"schema": "rtx.benchpack.v1", "name": "smoke", "description": "fuzz seed",
             "defaults": {"dtype": "f32", "variant": "default", "max_time": 0.25, "min_samples": 10, "warmup": 2},
             "cases": [{"name": "matmul", "op": "matmul_forward", "variant": "all",
                        "shapes": [{"M": 64, "N": 64, "K": 64}, {"M": 127, "N": 96, "K": 80}]},
                       {"name": "softmax", "op": "softmax_forward", "shapes": {"sweep": {"N": [1, 7, 127], "C": [256]}}},
                       {"name": "layernorm", "op": "layernorm_forward", "shape": {"N": 256, "C": 128}, "dtypes": ["f32", "bf16"]},
                       {"name": "gelu", "op": "gelu_forward", "shape": "N=16384", "backends": ["cpu"]},
                       {"name": "mm2", "op": "matmul_forward", "shape": "7x1x127", "params": {"MC": 64}},
                       {"name": "attention", "op": "attention_forward", "shape": {"B": 1, "T": 64, "NH": 4, "HS": 32}}]}
    put(t, "valid-smoke.json", json.dumps(smoke, indent=1))
    def v(**kw):
        d = json.loads(json.dumps(smoke))
        for k, val in kw.items():
            d[k] = val
        return json.dumps(d)
    put(t, "wrong-schema.json", v(schema="rtx.benchpack.v9"))
    put(t, "duplicate-case.json", v(cases=[smoke["cases"][0], smoke["cases"][0]]))
    put(t, "negative-dim.json", v(cases=[{"name": "m", "op": "matmul_forward", "shape": {"M": -3, "N": 1, "K": 1}}]))
    put(t, "dim-overflow.json", v(cases=[{"name": "m", "op": "matmul_forward", "shape": "99999999999999999999x1x1"}]))
    put(t, "dim-huge.json", v(cases=[{"name": "m", "op": "matmul_forward", "shape": {"M": 2**62, "N": 2**62, "K": 2**62}}]))
    put(t, "sweep-explodes.json", v(cases=[{"name": "m", "op": "matmul_forward",
                                            "shapes": {"sweep": {"M": list(range(1, 40)), "N": list(range(1, 40)), "K": list(range(1, 40))}}}]))
    put(t, "name-slash.json", v(cases=[{"name": "a/b", "op": "gelu_forward", "shape": "N=4"}]))
    put(t, "name-control.json", v(cases=[{"name": "a\u0001", "op": "gelu_forward", "shape": "N=4"}]))
    put(t, "unknown-op.json", v(cases=[{"name": "x", "op": "no_such_op", "shape": "N=4"}]))
    put(t, "unknown-field.json", v(cases=[{"name": "x", "op": "gelu_forward", "shape": "N=4", "colour": 1}]))
    put(t, "shape-and-shapes.json", v(cases=[{"name": "x", "op": "gelu_forward", "shape": "N=4", "shapes": ["N=8"]}]))
    put(t, "bad-shape-string.json", v(cases=[{"name": "x", "op": "gelu_forward", "shape": "N==4,,x"}]))
    put(t, "defaults-out-of-range.json", v(defaults={"max_time": -1, "rounds": 51, "min_samples": 1e300}))
    put(t, "bad-dtype.json", v(cases=[{"name": "x", "op": "gelu_forward", "shape": "N=4", "dtype": "f128"}]))
    put(t, "not-object.json", "[1, 2, 3]")
    put(t, "cases-not-array.json", v(cases={"a": 1}))


# ---- rtx.profile.v1 ---------------------------------------------------------------------------
def profile():
    t = "profile"
    sku = "cpu:fuzz-cpu:avx2"
    key = f"matmul_forward|cpu.blocked|K=64,M=64,N=64|f32|cpu|{sku}"
    key2 = f"matmul_forward|cpu.blocked|K=96,M=128,N=64|f32|cpu|{sku}"
    doc = {"schema": "rtx.profile.v1", "created_at": "2025-01-01T00:00:00.000Z", "rtx_sha": "abc",
           "hardware": {"arch": "x86_64"}, "identity": {},
           "entries": [{"key": key, "op": "matmul_forward", "variant": "cpu.blocked", "shape": {"K": 64, "M": 64, "N": 64},
                        "dtype": "f32", "backend": "cpu", "sku": sku, "version": 2, "params": {"MC": 192},
                        "measured_under": {"rtx_sha": "abc", "compiler": "gcc", "sku": sku, "result": {"median_s": 1e-5}}},
                       {"key": key2, "params": {"KC": 64}}]}
    put(t, "valid.json", json.dumps(doc, indent=1))
    def v(entries=None, **kw):
        d = json.loads(json.dumps(doc))
        if entries is not None:
            d["entries"] = entries
        d.update(kw)
        return json.dumps(d)
    put(t, "wrong-schema.json", v(schema="rtx.profile.v9"))
    put(t, "no-entries.json", v(entries=[]))
    put(t, "param-string.json", v(entries=[{"key": key, "params": {"MC": "big"}}]))
    put(t, "param-float.json", v(entries=[{"key": key, "params": {"MC": 1.5}}]))
    put(t, "param-huge.json", v(entries=[{"key": key, "params": {"MC": 2**64 - 1}}]))
    put(t, "key-malformed.json", v(entries=[{"key": "nope", "params": {}}]))
    put(t, "key-bad-shape.json", v(entries=[{"key": "matmul_forward|cpu.blocked|K=-1,M=x|f32|cpu|" + sku, "params": {}}]))
    put(t, "key-bad-dtype.json", v(entries=[{"key": "matmul_forward|cpu.blocked|K=1|f99|cpu|" + sku, "params": {}}]))
    put(t, "key-empty-fields.json", v(entries=[{"key": "|||||", "params": {}}]))
    put(t, "duplicate-key.json", v(entries=[doc["entries"][0], doc["entries"][0]]))
    put(t, "foreign-sku.json", v(entries=[{"key": key.replace(sku, "cpu:someone-else:avx512"), "params": {"MC": 1}}]))
    put(t, "measured-under-array.json", v(entries=[{"key": key, "params": {}, "measured_under": [1]}]))
    put(t, "not-object.json", '"rtx.profile.v1"')


# ---- OpenAI request bodies --------------------------------------------------------------------
def openai():
    t = "openai"
    seeds = {
        "completion.json": {"model": "gpt2", "prompt": "Hello", "max_tokens": 8, "temperature": 0.7, "top_p": 0.9,
                            "stop": ["\n", "END"], "seed": -5, "stream": True, "stream_options": {"include_usage": True},
                            "logprobs": 3, "priority": "batch", "user": "u"},
        "completion-tokens.json": {"model": "gpt2", "prompt": [1, 2, 50256], "max_tokens": 1},
        "completion-tokens-nested.json": {"model": "gpt2", "prompt": [[1, 2]]},
        "completion-prompt-list.json": {"model": "gpt2", "prompt": ["one"], "n": 1, "best_of": 1, "echo": False},
        "chat.json": {"model": "m", "messages": [{"role": "system", "content": "Be brief."},
                                                 {"role": "user", "content": [{"type": "text", "text": "Hi"}]},
                                                 {"role": "assistant", "content": None},
                                                 {"role": "user", "content": "caf\u00e9 \U0001F600"}],
                      "max_completion_tokens": 5, "logprobs": True, "top_logprobs": 20, "top_k": 40},
        "bad-temperature.json": {"model": "m", "prompt": "x", "temperature": 2.5},
        "bad-max-tokens.json": {"model": "m", "prompt": "x", "max_tokens": 0},
        "bad-stop-count.json": {"model": "m", "prompt": "x", "stop": ["a", "b", "c", "d", "e"]},
        "bad-n.json": {"model": "m", "prompt": "x", "n": 2},
        "bad-token.json": {"model": "m", "prompt": [-1]},
        "bad-role.json": {"model": "m", "messages": [{"role": "tool", "content": "x"}]},
        "bad-content-part.json": {"model": "m", "messages": [{"role": "user", "content": [{"type": "image_url"}]}]},
        "empty-messages.json": {"model": "m", "messages": []},
        "huge-ints.json": {"model": "m", "prompt": [2**63], "max_tokens": 2**64 - 1, "seed": -2**63, "logprobs": 2**40},
        "llama2-order.json": {"model": "m", "messages": [{"role": "assistant", "content": "x"}, {"role": "system", "content": "s"}]},
    }
    for name, doc in seeds.items():
        put(t, name, json.dumps(doc))
    put(t, "truncated.json", '{"model": "m", "prompt": "x')
    put(t, "invalid-utf8.json", b'{"model": "m", "prompt": "\xff\xfe"}')
    put(t, "not-object.json", "[]")
    put(t, "empty", b"")
    put(t, "nul-bytes", b'{"model":"m","prompt":"a\x00b"}')
    put(t, "deep-nesting.json", "[" * 10000 + "]" * 10000)


# ---- TextStream: [stops % 5] ([len % 16] stop)* ([len % 8] token)* ------------------------------
def text_stream():
    t = "text_stream"
    def enc(stops, tokens):
        out = bytes([len(stops)])
        for s in stops:
            out += bytes([len(s)]) + s
        for tok in tokens:
            out += bytes([len(tok)]) + tok
        return out
    put(t, "plain", enc([], [b"Hello", b" wor", b"ld"]))
    put(t, "stop-split", enc([b"END"], [b"abc E", b"N", b"Dxyz"]))
    put(t, "utf8-split", enc([b"\xc3\xa9"], [b"caf\xc3", b"\xa9 ok"]))
    put(t, "emoji-split", enc([], [b"\xf0\x9f", b"\x98", b"\x80!"]))
    put(t, "invalid-bytes", enc([b"\xef\xbf\xbd"], [b"a\xff", b"\xc0\xaf", b"\xed\xa0\x80"]))
    put(t, "incomplete-at-end", enc([b"x"], [b"ab", b"\xe2\x82"]))
    put(t, "four-stops-overlap", enc([b"ab", b"b", b"abc", b"bc"], [b"a", b"b", b"c"]))
    put(t, "bad-stop-empty", enc([b""], [b"a"]))
    put(t, "bad-stop-invalid-utf8", enc([b"\xff"], [b"a"]))
    put(t, "empty-tokens", enc([b"zz"], [b"", b"", b"z", b"", b"z"]))


# ---- tokenizers (arbitrary bytes) ---------------------------------------------------------------
def tokenizers():
    texts = {
        "ascii": b"Once upon a time, there was a little girl named Lily.",
        "contractions": b"I'm sure they've said it's John's and we'll see; you'd've thought",
        "whitespace": b" two  spaces\tand a tab\n\n\r\n   trailing   ",
        "unicode": "caf\u00e9 \u6f22\u5b57 \U0001F600 \u0301 \u00a0nbsp \u2028 \u0660\u0661 \u2581".encode(),
        "numbers-punct": b"3.14159 $100,000!!! ??? <|endoftext|> <s></s>",
        "invalid-utf8": b"ok \xc3\x28 \xff\xfe \xed\xa0\x80 \xf4\x90\x80\x80 \xc0\xaf",
        "truncated-utf8": b"abc \xe2\x82",
        "nul": b"a\x00b\x00",
        "long-word": b"a" * 2000,
        "empty": b"",
    }
    for target in ("gpt2_tokenizer", "llama_tokenizer"):
        for name, data in texts.items():
            put(target, name, data)


# ---- Chrome Trace Event JSON ------------------------------------------------------------------
def trace():
    import gzip
    ev = [
        {"ph": "M", "name": "process_name", "pid": 1, "args": {"name": "rtx-train"}},
        {"ph": "X", "name": "step", "cat": "cpu_op", "ts": 0, "dur": 100, "pid": 1, "tid": 1},
        {"ph": "X", "name": "matmul", "cat": "cpu_op", "ts": 10, "dur": 50, "pid": 1, "tid": 1},
        {"ph": "B", "name": "attn", "ts": 61, "pid": 1, "tid": 1},
        {"ph": "E", "name": "attn", "ts": 90, "pid": 1, "tid": 1},
        {"ph": "X", "name": "cudaLaunchKernel", "cat": "cuda_runtime", "ts": 20, "dur": 5, "pid": 1, "tid": 1,
         "args": {"correlation": 7}},
        {"ph": "X", "name": "sgemm_128x64", "cat": "kernel", "ts": 30, "dur": 40, "pid": 1, "tid": "stream 7",
         "args": {"correlation": 7}},
        {"ph": "s", "name": "launch", "cat": "ac2g", "id": 7, "ts": 20, "pid": 1, "tid": 1},
        {"ph": "f", "name": "launch", "cat": "ac2g", "id": 7, "ts": 30, "pid": 1, "tid": "stream 7", "bp": "e"},
        {"ph": "C", "name": "mem", "ts": 5, "pid": 1, "args": {"bytes": 1024}},
        {"ph": "i", "name": "mark", "ts": 50, "pid": 1, "tid": 1, "s": "t"},
    ]
    obj = {"traceEvents": ev, "displayTimeUnit": "ns", "schema": "rtx.trace.v1", "otherData": {"sku": "x"}}
    put("trace", "object-form", json.dumps(obj))
    put("trace", "array-form", json.dumps(ev))
    put("trace", "array-no-close", json.dumps(ev)[:-1])
    put("trace", "gzip-object", gzip.compress(json.dumps(obj).encode(), mtime=0))
    put("trace", "gzip-truncated", gzip.compress(json.dumps(obj).encode(), mtime=0)[:60])
    put("trace", "unbalanced-e", json.dumps([{"ph": "E", "name": "x", "ts": 1, "pid": 1, "tid": 1}]))
    put("trace", "unclosed-b", json.dumps([{"ph": "B", "name": "x", "ts": 1, "pid": 1, "tid": 1}]))
    put("trace", "x-no-dur", json.dumps([{"ph": "X", "name": "x", "ts": 1, "pid": 1, "tid": 1}]))
    put("trace", "negative-dur", json.dumps([{"ph": "X", "name": "x", "ts": 1, "dur": -5, "pid": 1, "tid": 1}]))
    put("trace", "huge-ts", '[{"ph":"X","name":"a","ts":1e300,"dur":1e300,"pid":1,"tid":1},'
                            '{"ph":"X","name":"b","ts":-1e300,"dur":1e19,"pid":1,"tid":1}]')
    put("trace", "near-int64", '[{"ph":"X","name":"a","ts":9.2e15,"dur":9.2e15,"pid":1,"tid":1},'
                               '{"ph":"X","name":"a","ts":0,"dur":9.2e15,"pid":1,"tid":2},'
                               '{"ph":"B","name":"b","ts":-9.2e15,"pid":1,"tid":3},{"ph":"E","ts":9.2e15,"pid":1,"tid":3}]')
    put("trace", "string-numbers", '[{"ph":"X","name":"a","ts":"1","dur":"2","pid":"p","tid":"t"}]')
    put("trace", "nan-literal", '[{"ph":"X","name":"a","ts":NaN,"dur":1,"pid":1,"tid":1}]')
    put("trace", "not-object-event", '[1, "x", null, [], {"ph":"X","ts":0,"dur":1}]')
    put("trace", "deep-args", '[{"ph":"X","name":"a","ts":0,"dur":1,"args":' + "[" * 5000 + "]" * 5000 + "}]")
    put("trace", "names-with-separators", json.dumps([
        {"ph": "X", "name": "a;b\nc d", "ts": 0, "dur": 10, "pid": 1, "tid": 1},
        {"ph": "X", "name": "", "ts": 1, "dur": 2, "pid": 1, "tid": 1},
        {"ph": "X", "name": "\u00e9\udc80", "ts": 3, "dur": 2, "pid": 1, "tid": 1}]))
    put("trace", "partial-overlap", json.dumps([
        {"ph": "X", "name": "a", "ts": 0, "dur": 10, "pid": 1, "tid": 1},
        {"ph": "X", "name": "b", "ts": 5, "dur": 10, "pid": 1, "tid": 1}]))
    put("trace", "epoch-unsorted-be", '{"traceEvents":[{"ph":"B","name":"b","ts":1700000000000005.5,"pid":1,"tid":1},'
        '{"ph":"E","ts":1700000000000001.25,"pid":1,"tid":1},{"ph":"B","name":"a","ts":1700000000000000.001,"pid":1,'
        '"tid":"stream 7"},{"ph":"X","name":"layer 3","ts":1700000000000000.002,"dur":0.5,"pid":1,"tid":"stream 7"},'
        '{"ph":"E","ts":1700000000000009,"pid":1,"tid":1}]}')
    put("trace", "empty-object", "{}")
    put("trace", "empty", "")
    put("trace", "invalid-utf8", b'[{"ph":"X","name":"\xff\xfe","ts":0,"dur":1}]')
    put("trace", "truncated", json.dumps(obj)[:100])


# ---- folded stacks ----------------------------------------------------------------------------
def folded():
    import gzip
    put("folded", "simple", "main;work;matmul 42\nmain;work;softmax 7\nmain 1\n")
    put("folded", "spaces-in-frames", "main;do work;inner  loop 3\n[unknown] 1\n")
    put("folded", "crlf-blank", "a;b 1\r\n\r\n  \na;c 2\r\n")
    put("folded", "decimal-counts", "a 1.5\nb .5\nc 2.\nd 0.49\n")
    put("folded", "no-count", "a;b\n")
    put("folded", "bad-count", "a;b 12x\nc -3\n")
    put("folded", "huge-count", "a 18446744073709551615\nb 18446744073709551616\nc 99999999999999999999999\n")
    put("folded", "sum-overflow", "a 9223372036854775807\nb 9223372036854775807\nc 2\n")
    put("folded", "empty-frames", ";;x 1\n; 2\n 3\n")
    put("folded", "tab-separated", "a;b\t5\n")
    put("folded", "trailing-space-frame", "a ;b  4\n")
    put("folded", "utf8-and-invalid", "caf\u00e9;\u6f22 1\n".encode() + b"\xff;\xc3\x28 2\n")
    put("folded", "nul-bytes", b"a\x00b;c 1\n")
    put("folded", "deep", ";".join("f%d" % i for i in range(400)) + " 1\n")
    put("folded", "gzip", gzip.compress(b"a;b 1\na;c 2\n", mtime=0))
    put("folded", "no-newline-at-end", "a;b 1")
    put("folded", "fractions-kept", "a;b 0.4\na;b 0.4\na;c 0.4\nd 0.25\ne 0.75\nf 0.0000015\n")
    put("folded", "diff-two-counts", "main;grew 4 6\nmain;shrank 10 2.5\nx 5 3 7\nsolo 1\n")
    put("folded", "skipped-lines", "a 1\nb x\n;; 3\nc;;d; 2\n\nnocount\ne 1e5\n")
    put("folded", "empty", "")


# ---- pickle (io/pickle: the Planetoid files' subset of protocol 2) ---------------------------
def pickle_corpus():
    t = "pickle"
    data = os.environ.get("RTX_DATA", os.path.join(os.path.dirname(__file__), "..", "..", "..", "shared", "data"))
    y = open(os.path.join(data, "cora", "ind.cora.y"), "rb").read()
    put(t, "cora-y", y)  # a real numpy int32 (140, 7) array
    put(t, "cora-y-truncated", y[: len(y) // 2])
    put(t, "cora-y-short-data", y.replace(b"\x8c\x00", b"\x8d\x00", 1))
    g = open(os.path.join(data, "cora", "ind.cora.graph"), "rb").read()
    put(t, "cora-graph-head", g[:600] + b".")  # defaultdict cut mid-way: unbalanced MARKs
    put(t, "dict-of-lists", b"\x80\x02}q\x00(K\x01]q\x01(M,\x01J\x70\x11\x01\x00eK\x02N\x88\x86q\x02u.")
    put(t, "defaultdict", b"\x80\x02ccollections\ndefaultdict\nc__builtin__\nlist\n\x85R(K\x00](K\x05K\x06eK\x03]u.")
    put(t, "global-os-system", b"\x80\x02cos\nsystem\n.")
    put(t, "memo-missing", b"\x80\x02h\x07.")
    put(t, "long-binget-huge", b"\x80\x02j\xff\xff\xff\xff.")
    put(t, "binstring-negative", b"\x80\x02T\xff\xff\xff\xff.")
    put(t, "self-append", b"\x80\x02]q\x00h\x00a.")  # a list inside itself: a cycle in the pool
    put(t, "many-marks", b"\x80\x02" + b"(" * 1000 + b"N.")


if __name__ == "__main__":
    pickle_corpus()
    safetensors()
    gguf()
    checkpoint()
    benchpack()
    profile()
    openai()
    text_stream()
    tokenizers()
    trace()
    folded()
    for d in sorted(os.listdir(ROOT)):
        print(f"{d}: {len(os.listdir(os.path.join(ROOT, d)))} files")
