#!/usr/bin/env python3
# Float64 reference for rtx's Llama (tests/serve/llama_test.cpp): a GGUF v1-v3 parser, llama.cpp's
# SentencePiece (SPM) tokenizer and the Llama forward pass in plain numpy, independent of rtx.
#
# Writes tests/reference/data/llama_golden.json: token ids of a few texts, logits (all V) at a few
# positions of a fixed token sequence, and the greedy continuation of "Once upon a time".
#
#   python3 tests/reference/llama_ref.py [--gguf FILE] [--out FILE]
#   python3 tests/reference/llama_ref.py --v3 /tmp/stories-v3.gguf   # GGUF v3 copy for llama.cpp
#                                                                    # (needs the gguf package)
# Model (Touvron et al. 2023, "LLaMA"; llama2.c's run.c; llama.cpp's llm_build_llama):
#   x = tok_embd[t]; per layer: h = x + Wo attn(rope(Wq n(x)), rope(Wk n(x)), Wv n(x)),
#   x = h + Wdown (silu(Wgate n(h)) * Wup n(h)); logits = Wout rmsnorm(x).
#   rmsnorm(x) = x / sqrt(mean(x^2) + eps) * w (Zhang & Sennrich 2019).
#   RoPE (Su et al. 2021) in llama.cpp's "normal" mode: dims (2i, 2i+1) of each head rotated by
#   pos * base^(-2i / n_rot), for 2i < n_rot.
import argparse
import json
import os
import struct
import sys

import numpy as np

GGUF_SCALARS = {0: 'B', 1: 'b', 2: 'H', 3: 'h', 4: 'I', 5: 'i', 6: 'f', 7: '?', 10: 'Q', 11: 'q', 12: 'd'}


def parse_gguf(path):
    """Returns (version, metadata dict, {name: (type, value types, np array in ggml order)})."""
    buf = open(path, 'rb').read()
    pos = [4]
    if buf[:4] != b'GGUF':
        raise ValueError(f'{path}: not a GGUF file')

    def rd(fmt):
        v = struct.unpack_from('<' + fmt, buf, pos[0])
        pos[0] += struct.calcsize(fmt)
        return v[0]

    version = rd('I')
    cnt = 'I' if version == 1 else 'Q'
    n_tensors, n_kv = rd(cnt), rd(cnt)

    def rstr():
        n = rd(cnt)
        s = buf[pos[0]:pos[0] + n]
        pos[0] += n
        return s.decode('utf-8')

    def value(t):
        if t == 8:
            return rstr()
        if t == 9:
            et, n = rd('I'), rd(cnt)
            return [value(et) for _ in range(n)]
        return rd(GGUF_SCALARS[t])

    kv, types = {}, {}
    for _ in range(n_kv):
        k = rstr()
        t = rd('I')
        if t == 9:
            types[k] = (9, struct.unpack_from('<I', buf, pos[0])[0])
        else:
            types[k] = (t, None)
        kv[k] = value(t)
    infos = []
    for _ in range(n_tensors):
        name = rstr()
        nd = rd('I')
        ne = [rd(cnt) for _ in range(nd)]
        ty = rd('I')
        off = rd('Q')
        infos.append((name, ne, ty, off))
    align = kv.get('general.alignment', 32)
    data0 = (pos[0] + align - 1) // align * align
    tensors = {}
    for name, ne, ty, off in infos:
        n = int(np.prod(ne))
        if ty == 0:
            a = np.frombuffer(buf, dtype='<f4', count=n, offset=data0 + off)
        elif ty == 1:
            a = np.frombuffer(buf, dtype='<f2', count=n, offset=data0 + off)
        else:
            raise ValueError(f'{name}: ggml type {ty} not supported by the reference')
        tensors[name] = (ty, ne, a.reshape(list(reversed(ne))))  # row-major: last ne first
    return version, kv, types, tensors


class Spm:
    """llama.cpp's SPM tokenizer (llm_tokenizer_spm): split into UTF-8 characters, repeatedly merge
    the adjacent pair whose concatenation is a token with the highest score (leftmost on ties),
    then emit ids; a character that is no token becomes its bytes' <0xXX> tokens."""

    def __init__(self, kv):
        self.tokens = kv['tokenizer.ggml.tokens']
        self.scores = kv['tokenizer.ggml.scores']
        self.types = kv['tokenizer.ggml.token_type']
        self.index = {}
        for i, t in enumerate(self.tokens):
            self.index.setdefault(t, i)
        self.space_prefix = kv.get('tokenizer.ggml.add_space_prefix', True)

    def encode(self, text):
        if not text:
            return []
        if self.space_prefix:
            text = ' ' + text
        syms = list(text.replace(' ', '\u2581'))
        while True:
            best, best_i = None, -1
            for i in range(len(syms) - 1):
                id_ = self.index.get(syms[i] + syms[i + 1])
                if id_ is None:
                    continue
                if best is None or self.scores[id_] > best:
                    best, best_i = self.scores[id_], i
            if best_i < 0:
                break
            syms[best_i:best_i + 2] = [syms[best_i] + syms[best_i + 1]]
        out = []
        for s in syms:
            if s in self.index:
                out.append(self.index[s])
            else:
                out.extend(self.index['<0x%02X>' % b] for b in s.encode('utf-8'))
        return out

    def piece(self, i):
        t, ty = self.tokens[i], self.types[i]
        if ty == 6:
            return bytes([int(t[3:5], 16)])
        if ty in (2, 3):
            return b''
        return t.replace('\u2581', ' ').encode('utf-8')

    def decode(self, ids):
        return b''.join(self.piece(i) for i in ids).decode('utf-8', errors='replace')


class Llama:
    def __init__(self, kv, tensors):
        g = lambda k, d=None: kv.get('llama.' + k, d)
        self.L, self.C = g('block_count'), g('embedding_length')
        self.NH, self.NKV = g('attention.head_count'), g('attention.head_count_kv', g('attention.head_count'))
        self.eps = g('attention.layer_norm_rms_epsilon', 1e-5)
        self.base = g('rope.freq_base', 10000.0)
        self.HS = self.C // self.NH
        self.n_rot = g('rope.dimension_count', self.HS)
        w = lambda n: tensors[n][2].astype(np.float64)
        self.emb = w('token_embd.weight')
        self.out = w('output.weight') if 'output.weight' in tensors else self.emb
        self.norm = w('output_norm.weight')
        self.layers = []
        for l in range(self.L):
            p = f'blk.{l}.'
            self.layers.append({k: w(p + k + '.weight') for k in
                                ('attn_norm', 'attn_q', 'attn_k', 'attn_v', 'attn_output', 'ffn_norm', 'ffn_gate',
                                 'ffn_up', 'ffn_down')})

    def rmsnorm(self, x, w):
        return x / np.sqrt((x * x).mean(-1, keepdims=True) + self.eps) * w

    def rope(self, x):  # x (T, H, HS)
        T = x.shape[0]
        i = np.arange(0, self.n_rot, 2, dtype=np.float64)
        inv = self.base ** (-i / self.n_rot)
        ang = np.arange(T, dtype=np.float64)[:, None] * inv[None, :]  # (T, n_rot/2)
        c, s = np.cos(ang)[:, None, :], np.sin(ang)[:, None, :]
        y = x.copy()
        a, b = x[..., 0:self.n_rot:2], x[..., 1:self.n_rot:2]
        y[..., 0:self.n_rot:2] = a * c - b * s
        y[..., 1:self.n_rot:2] = a * s + b * c
        return y

    def forward(self, toks):
        """Logits (T, V) of a full causal forward over `toks`."""
        T, HS = len(toks), self.HS
        x = self.emb[toks]
        mask = np.triu(np.full((T, T), -np.inf), 1)
        for p in self.layers:
            h = self.rmsnorm(x, p['attn_norm'])
            q = self.rope((h @ p['attn_q'].T).reshape(T, self.NH, HS))
            k = self.rope((h @ p['attn_k'].T).reshape(T, self.NKV, HS))
            v = (h @ p['attn_v'].T).reshape(T, self.NKV, HS)
            att = np.empty((T, self.NH, HS))
            for hd in range(self.NH):
                kh = hd // (self.NH // self.NKV)
                s = q[:, hd, :] @ k[:, kh, :].T / np.sqrt(HS) + mask
                s = np.exp(s - s.max(-1, keepdims=True))
                s /= s.sum(-1, keepdims=True)
                att[:, hd, :] = s @ v[:, kh, :]
            x = x + att.reshape(T, -1) @ p['attn_output'].T
            h = self.rmsnorm(x, p['ffn_norm'])
            g = h @ p['ffn_gate'].T
            x = x + ((g / (1 + np.exp(-g))) * (h @ p['ffn_up'].T)) @ p['ffn_down'].T
        return self.rmsnorm(x, self.norm) @ self.out.T


def write_v3(src_kv, src_types, tensors, path):
    import gguf  # only for this option: /work/.venv-gguf/bin/python
    arch = src_kv['general.architecture']
    w = gguf.GGUFWriter(path, arch)
    for k, v in src_kv.items():
        if k in ('general.architecture', 'general.alignment'):
            continue
        t, et = src_types[k]
        if t == 9 and et == 6:  # f32 arrays (scores) stay f32
            w.add_key_value(k, [float(x) for x in v], gguf.GGUFValueType.ARRAY, sub_type=gguf.GGUFValueType.FLOAT32)
        elif t == 9:
            w.add_array(k, v)
        else:
            w.add_key_value(k, v, gguf.GGUFValueType(t))
    for name, (ty, ne, a) in tensors.items():
        w.add_tensor(name, np.ascontiguousarray(a))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    data = os.environ.get('RTX_DATA', '/work/shared/data')
    ap = argparse.ArgumentParser()
    ap.add_argument('--gguf', default=os.path.join(data, 'stories260k', 'tinyllamas-stories-260k-f32.gguf'))
    ap.add_argument('--out', default=os.path.join(here, 'data', 'llama_golden.json'))
    ap.add_argument('--v3', help='write a GGUF v3 copy of --gguf here and exit (needs gguf-py)')
    args = ap.parse_args()
    version, kv, types, tensors = parse_gguf(args.gguf)
    if args.v3:
        write_v3(kv, types, tensors, args.v3)
        return
    tok = Spm(kv)
    model = Llama(kv, tensors)
    bos = kv['tokenizer.ggml.bos_token_id']

    texts = ['Once upon a time', 'Once upon a time, there was a little girl named Lily.',
             'Hello world', ' two  spaces', 'Tom said: "Zebra 42!"', 'caf\u00e9 \u6f22']
    enc = [{'text': t, 'ids': tok.encode(t)} for t in texts]

    seq = [bos] + tok.encode('Once upon a time, there was a little girl named Lily.')
    logits = model.forward(seq)
    keep = sorted({0, 1, 6, len(seq) - 1})

    ids = [bos] + tok.encode('Once upon a time')
    n_prompt = len(ids)
    while len(ids) < n_prompt + 60:
        ids.append(int(np.argmax(model.forward(ids)[-1])))
    greedy = tok.decode(ids[n_prompt:])

    doc = {
        'schema': 'rtx.llama_golden.v1',
        'source': os.path.basename(args.gguf),
        'generator': 'tests/reference/llama_ref.py (numpy float64)',
        'encode': enc,
        'tokens': seq,
        'positions': keep,
        'logits': [[float('%.9g' % v) for v in logits[p]] for p in keep],
        'greedy_prompt': 'Once upon a time',
        'greedy_ids': ids[n_prompt:],
        'greedy_text': greedy,
    }
    with open(args.out, 'w') as f:
        json.dump(doc, f, separators=(',', ':'))
        f.write('\n')
    print(f'wrote {args.out}: {len(seq)} tokens, logits at {keep}; greedy: {greedy!r}', file=sys.stderr)


if __name__ == '__main__':
    main()
