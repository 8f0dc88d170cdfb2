// export_gpt2_gguf: GPT-2 parameters + tokenizer -> GGUF "gpt2" for llama.cpp. Names and keys
// follow llama.cpp's gpt2 loader and convert_hf_to_gguf.py GPT2Model; no inference here.
// Checked against llama.cpp (tokens, logits, greedy text) by bench/llamacpp_parity.sh.
#include "rtx/models/export.hpp"

#include <set>
#include <vector>

#include "rtx/core/dtype.hpp"
#include "rtx/core/error.hpp"
#include "rtx/io/gguf.hpp"

namespace rtx::models {

namespace {

std::string utf8(uint32_t cp) {
  std::string s;
  if (cp < 0x80) {
    s += static_cast<char>(cp);
  } else if (cp < 0x800) {
    s += static_cast<char>(0xC0 | (cp >> 6));
    s += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    s += static_cast<char>(0xE0 | (cp >> 12));
    s += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    s += static_cast<char>(0x80 | (cp & 0x3F));
  }
  return s;
}

bool printable_byte(unsigned b) { return (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF); }

// A token's bytes in the escaped form llama.cpp's "rwkv" vocabulary unescapes
// (llama-vocab.cpp llama_unescape_rwkv_token): \\, \n, \t, \r, \xNN (lower-case hex) for the
// other control bytes; every other byte (UTF-8 included) as is.
std::string rwkv_escape(const std::string& bytes) {
  static const char hex[] = "0123456789abcdef";
  std::string s;
  for (unsigned char b : bytes) {
    if (b == '\\') {
      s += "\\\\";
    } else if (b == '\n') {
      s += "\\n";
    } else if (b == '\t') {
      s += "\\t";
    } else if (b == '\r') {
      s += "\\r";
    } else if (b < 0x20 || b == 0x7F) {
      s += "\\x";
      s += hex[b >> 4];
      s += hex[b & 0xF];
    } else {
      s += static_cast<char>(b);
    }
  }
  return s;
}

}  // namespace

std::string gpt2_byte_to_unicode(unsigned char b) {
  if (printable_byte(b)) return utf8(b);
  // Non-printable bytes get 256, 257, ... in increasing byte order.
  uint32_t n = 0;
  for (unsigned x = 0; x < b; ++x)
    if (!printable_byte(x)) ++n;
  return utf8(256 + n);
}

std::string gpt2_gguf_tensor_name(const std::string& ln) {
  if (ln == "wte") return "token_embd.weight";
  if (ln == "wpe") return "position_embd.weight";
  if (ln.rfind("ln_f.", 0) == 0) return "output_norm." + ln.substr(5);
  if (ln.rfind("h.", 0) == 0) {
    const size_t dot = ln.find('.', 2);
    if (dot != std::string::npos && dot > 2) {
      const std::string layer = ln.substr(2, dot - 2);
      const std::string rest = ln.substr(dot + 1);
      static const std::pair<const char*, const char*> map[] = {
          {"ln_1.", "attn_norm."},       {"attn.c_attn.", "attn_qkv."}, {"attn.c_proj.", "attn_output."},
          {"ln_2.", "ffn_norm."},        {"mlp.c_fc.", "ffn_up."},      {"mlp.c_proj.", "ffn_down."},
      };
      for (const auto& [from, to] : map) {
        const std::string f = from;
        if (rest.rfind(f, 0) == 0) {
          const std::string leaf = rest.substr(f.size());
          if (leaf == "weight" || leaf == "bias") return "blk." + layer + "." + to + leaf;
        }
      }
    }
  }
  throw Error(ErrorCategory::Usage, "no GGUF name for layout tensor \"" + ln + "\"", "export_gpt2_gguf");
}

void export_gpt2_gguf(const Gpt2Config& cfg, const float* params, size_t n_params, const io::Tokenizer& tok,
                      const std::string& path, const GgufExportOptions& opt) {
  cfg.validate();
  const size_t want = gpt2_num_params(cfg);
  if (n_params != want || !params)
    throw Error(ErrorCategory::Usage,
                "got " + std::to_string(n_params) + " parameters, the config needs " + std::to_string(want), path,
                "pass the model's parameters in gpt2_param_layout order");
  const int tv = tok.vocab_size();
  if (cfg.vocab_size < tv)
    throw Error(ErrorCategory::Usage,
                "config vocab_size " + std::to_string(cfg.vocab_size) + " is smaller than the tokenizer's " +
                    std::to_string(tv),
                path, "export with the tokenizer the model was trained with");

  std::vector<std::string> merges;
  const nlohmann::json tj = tok.to_json();
  if (tj.contains("merges")) {
    for (const auto& m : tj["merges"]) {
      if (m.is_string()) {
        merges.push_back(m.get<std::string>());
      } else if (m.is_array() && m.size() == 2 && m[0].is_string() && m[1].is_string()) {
        merges.push_back(m[0].get<std::string>() + " " + m[1].get<std::string>());
      } else {
        throw Error(ErrorCategory::Input, "tokenizer merge " + m.dump() + " is neither \"a b\" nor [a, b]", path);
      }
    }
  }
  const int32_t eot = tok.eot_id();
  // Without merges (the char tokenizer) every token is one character: llama.cpp's "rwkv"
  // vocabulary (greedy longest match over the tokens' bytes) then encodes exactly as we do and,
  // unlike its "gpt2" BPE, has no default BOS/EOS. The BPE defaults both to id 11
  // (llama-vocab.cpp), which would make a real character (';' in tiny-shakespeare) end
  // generation, and a key cannot unset it.
  const bool rwkv = merges.empty();
  if (!rwkv && eot < 0)
    throw Error(ErrorCategory::Input, "a BPE tokenizer without an end-of-text token", path,
                "llama.cpp's gpt2 vocabulary would take token 11 as end-of-generation; add an end-of-text token");

  // Vocabulary: gpt2: token bytes through bytes_to_unicode, padding rows "[PAD<id>]"; rwkv: token
  // bytes escaped, padding rows led by byte 0xFF, which valid UTF-8 text never contains.
  std::vector<std::string> tokens;
  std::vector<int32_t> types;
  tokens.reserve(static_cast<size_t>(cfg.vocab_size));
  std::string b2u[256];
  for (int b = 0; b < 256; ++b) b2u[b] = gpt2_byte_to_unicode(static_cast<unsigned char>(b));
  std::set<std::string> seen;
  for (int id = 0; id < cfg.vocab_size; ++id) {
    std::string s;
    if (id < tv) {
      const std::string bytes = tok.token_bytes(id);
      if (rwkv) {
        s = rwkv_escape(bytes);
      } else {
        for (unsigned char b : bytes) s += b2u[b];
      }
      types.push_back(id == eot ? 3 : 1);  // CONTROL : NORMAL
    } else {
      s = (rwkv ? "\\xff[PAD" : "[PAD") + std::to_string(id) + "]";
      types.push_back(5);  // UNUSED
    }
    if (!seen.insert(s).second)
      throw Error(ErrorCategory::Input, "token " + std::to_string(id) + " repeats an earlier token's text", path,
                  "llama.cpp needs distinct token strings");
    tokens.push_back(std::move(s));
  }

  const uint32_t C = static_cast<uint32_t>(cfg.n_embd);
  io::GgufWriter w;
  w.add("general.architecture", io::GgufValue::string("gpt2"));
  w.add("general.name", io::GgufValue::string(opt.name));
  w.add("general.file_type", io::GgufValue::u32(opt.f16 ? 1 : 0));
  w.add("gpt2.context_length", io::GgufValue::u32(static_cast<uint32_t>(cfg.block_size)));
  w.add("gpt2.embedding_length", io::GgufValue::u32(C));
  w.add("gpt2.feed_forward_length", io::GgufValue::u32(4 * C));
  w.add("gpt2.block_count", io::GgufValue::u32(static_cast<uint32_t>(cfg.n_layer)));
  w.add("gpt2.attention.head_count", io::GgufValue::u32(static_cast<uint32_t>(cfg.n_head)));
  w.add("gpt2.attention.layer_norm_epsilon", io::GgufValue::f32(1e-5f));
  w.add("tokenizer.ggml.model", io::GgufValue::string(rwkv ? "rwkv" : "gpt2"));
  if (!rwkv) w.add("tokenizer.ggml.pre", io::GgufValue::string("gpt-2"));
  w.add("tokenizer.ggml.tokens", io::GgufValue::string_array(tokens));
  w.add("tokenizer.ggml.token_type", io::GgufValue::i32_array(types));
  if (!rwkv) w.add("tokenizer.ggml.merges", io::GgufValue::string_array(merges));
  if (eot >= 0) {
    w.add("tokenizer.ggml.bos_token_id", io::GgufValue::u32(static_cast<uint32_t>(eot)));
    w.add("tokenizer.ggml.eos_token_id", io::GgufValue::u32(static_cast<uint32_t>(eot)));
  }
  w.add("tokenizer.ggml.add_bos_token", io::GgufValue::boolean(false));

  for (const auto& p : gpt2_param_layout(cfg)) {
    std::vector<uint64_t> ne(p.shape.rbegin(), p.shape.rend());
    const float* src = params + p.offset;
    if (opt.f16 && p.shape.size() == 2) {
      w.add_tensor(gpt2_gguf_tensor_name(p.name), io::GgmlType::F16, std::move(ne),
                   [src](uint64_t off, void* dst, size_t n) {
                     uint16_t* d = static_cast<uint16_t*>(dst);
                     const float* s = src + off / 2;
                     for (size_t i = 0; i < n / 2; ++i) d[i] = f32_to_f16(s[i]);
                   });
    } else {
      w.add_tensor(gpt2_gguf_tensor_name(p.name), io::GgmlType::F32, std::move(ne), src);
    }
  }
  w.write(path);
}

}  // namespace rtx::models
