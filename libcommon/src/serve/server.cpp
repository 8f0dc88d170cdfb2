// rtx-serve's HTTP server (rtx/serve/server.hpp) on cpp-httplib.
#include "rtx/serve/server.hpp"

#include <httplib.h>
#include <sodium.h>
#include <sys/socket.h>

#include <cctype>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <condition_variable>
#include <ctime>
#include <deque>
#include <filesystem>
#include <iomanip>
#include <map>
#include <mutex>
#include <random>
#include <sstream>
#include <thread>

#include "http_guard.hpp"
#include "rtx/core/error.hpp"
#include "rtx/core/time.hpp"
#include "rtx/core/printable.hpp"
#include "rtx/serve/text.hpp"

namespace rtx::serve {

namespace {

/// What the scheduler thread hands to the HTTP thread of one request.
struct Item {
  std::string text;        // client-safe text released by this event
  /// When logprobs were requested: the tokens whose text this item releases (at least partly;
  /// TextStream::tokens_flushed), so no logprob shows text held back or cut by a stop string.
  std::vector<TokenLogprob> lps;
  Finish finish = Finish::None;
  std::string error;
};

/// One request in flight: its text stream (stop strings, UTF-8) and the channel to its HTTP thread.
struct Job {
  Job(std::vector<std::string> stops, const io::Tokenizer& t, bool want_lp) : ts(std::move(stops)), tok(t), logprobs(want_lp) {}
  TextStream ts;
  const io::Tokenizer& tok;
  bool logprobs;
  std::mutex mu;
  std::condition_variable cv;
  std::deque<Item> items;
  bool closed = false;
  int completion_tokens = 0;
  RequestHandle handle;
  Scheduler* sched = nullptr;
  std::deque<TokenLogprob> lp_held;  // logprobs of tokens pushed, not yet in an item
  size_t lp_released = 0;            // tokens whose logprobs went into items

  /// Moves the logprobs of the tokens TextStream now counts as flushed into `it`.
  void release_logprobs(Item& it) {
    for (; lp_released < ts.tokens_flushed() && !lp_held.empty(); ++lp_released) {
      it.lps.push_back(std::move(lp_held.front()));
      lp_held.pop_front();
    }
  }

  void push(Item it) {
    {
      std::lock_guard<std::mutex> g(mu);
      if (it.finish != Finish::None) closed = true;
      items.push_back(std::move(it));
    }
    cv.notify_all();
  }
  /// Runs on the scheduler thread (EventFn).
  bool on_event(const TokenEvent& ev) {
    Item it;
    if (ev.finish != Finish::None) {
      it.text = ts.finish();
      it.finish = ts.stopped() ? Finish::Stop : ev.finish;
      it.error = ev.error;
      if (logprobs) release_logprobs(it);  // the rest: tokens at or after a stop are dropped
      push(std::move(it));
      return true;
    }
    const std::string bytes = tok.token_bytes(ev.token);
    it.text = ts.push(bytes);
    ++completion_tokens;
    if (logprobs) {
      TokenLogprob lp;
      lp.token = bytes;
      lp.logprob = ev.logprob;
      for (const auto& [id, l] : ev.top) lp.top.push_back({tok.token_bytes(id), l});
      const auto& offs = ts.token_offsets();
      lp.text_offset = offs.empty() ? 0 : static_cast<int64_t>(offs.back().char_offset);
      lp_held.push_back(std::move(lp));
      release_logprobs(it);
    }
    push(std::move(it));
    return !ts.stopped();
  }
  /// Waits up to `ms` for items; returns them (possibly none).
  std::deque<Item> take(int ms) {
    std::unique_lock<std::mutex> lk(mu);
    cv.wait_for(lk, std::chrono::milliseconds(ms), [&] { return !items.empty(); });
    std::deque<Item> out;
    out.swap(items);
    return out;
  }
};

std::string random_id(const char* prefix) {
  static std::atomic<uint64_t> counter{0};
  static const uint64_t base = std::random_device{}();
  std::ostringstream o;
  o << prefix << std::hex << std::setw(16) << std::setfill('0')
    << (base ^ (counter.fetch_add(1) * 0x9E3779B97F4A7C15ull));
  return o.str();
}

/// `s` for one field of an access-log line: bytes below 0x21, from 0x7f up and '\\' as \xNN, so
/// a client cannot forge a line or a field with a decoded %0A or %20 in its path, and the log
/// stays ASCII (valid UTF-8) whatever bytes a path decodes to.
std::string log_escape(const std::string& s) {
  if (s.empty()) return "-";  // a request refused before its request line was parsed
  return printable(s, Escape::NonAscii, " \\");
}

/// The methods the server's route at `path` takes ("POST", or "GET, HEAD": cpp-httplib answers
/// HEAD from a GET route), or "" where none matches.
std::string route_methods(const std::string& path) {
  if (path == "/v1/completions" || path == "/v1/chat/completions" || path == "/tokenize" || path == "/detokenize")
    return "POST";
  if (path == "/v1/models" || path.rfind("/v1/models/", 0) == 0 || path == "/health" || path == "/metrics") return "GET, HEAD";
  return "";
}

/// Whether `method` is one of route_methods(path).
bool route_takes(const std::string& path, const std::string& method) {
  const std::string allow = route_methods(path);
  return allow == "POST" ? method == "POST" : allow.empty() ? false : method == "GET" || method == "HEAD";
}

ApiError status_error(int status, const std::string& type, const std::string& msg, const std::string& code) {
  ApiError e;
  e.status = status;
  e.type = type;
  e.message = msg;
  e.code = code;
  return e;
}

/// Whether cpp-httplib's router has no table for `method` (it routes GET, HEAD, POST, PUT,
/// DELETE, OPTIONS and PATCH) and so answers a syntactically valid request with 400.
bool routed_nowhere_by_httplib(const std::string& method) {
  for (const char* m : {"GET", "HEAD", "POST", "PUT", "DELETE", "OPTIONS", "PATCH"})
    if (method == m) return false;
  return !method.empty();
}

/// 404 for a path no route serves, or 405 for a route that does not take the method; the 405
/// sets the Allow header on `res` (RFC 9110 15.5.6). Only for requests !route_takes().
ApiError wrong_route(const httplib::Request& req, httplib::Response& res) {
  const std::string allow = route_methods(req.path);
  if (allow.empty()) return status_error(404, "invalid_request_error", "no route " + req.method + " " + req.path, "not_found");
  res.set_header("Allow", allow);
  return status_error(405, "invalid_request_error", req.method + " " + req.path + " is not allowed; this route takes " + allow,
                      "method_not_allowed");
}

/// The API error for a request that ended without finishing normally.
ApiError finish_error(Finish f, const std::string& detail) {
  if (f == Finish::Timeout)
    return status_error(504, "timeout_error", "the request exceeded the server's request timeout", "timeout");
  if (f == Finish::Cancelled)
    return status_error(503, "server_error", "the request was cancelled (server shutting down)", "cancelled");
  return server_error("generation failed: " + detail);
}

}  // namespace

struct Server::Impl {
  Engine main, canary;
  ServerConfig cfg;
  GuardedHttpServer http;
  std::atomic<bool> stopping{false};
  std::atomic<uint64_t> routed{0};
  std::mutex stat_mu;
  std::map<std::string, uint64_t> status_counts;  // "engine|status" -> count
  std::once_flag stop_once;
  int listen_fd = -1;
  std::atomic<int> streaming{0};  // SSE responses not yet fully written
  const int64_t started = static_cast<int64_t>(std::time(nullptr));  // the model object's "created"

  /// The model id this server serves: --model-name, else the model's name (general.name or
  /// the file's stem), never a path.
  std::string served_id() const { return cfg.model_name.empty() ? main.model->info().name : cfg.model_name; }

  void count(const std::string& engine, int status) {
    std::lock_guard<std::mutex> g(stat_mu);
    ++status_counts[engine + "|" + std::to_string(status)];
  }

  Engine& route() {
    if (!canary.scheduler || cfg.canary_fraction <= 0) return main;
    // Deterministic share: request i goes to the canary when floor((i+1)F) > floor(iF).
    const uint64_t i = routed.fetch_add(1);
    const double F = cfg.canary_fraction;
    return std::floor((i + 1) * F) > std::floor(i * F) ? canary : main;
  }

  void send_error(httplib::Response& res, const ApiError& e, const std::string& engine = "main") {
    res.status = e.status;
    res.set_content(dump_json(error_body(e)), "application/json");
    if (e.status == 429) res.set_header("Retry-After", "1");
    count(engine, e.status);
  }

  /// POST /tokenize and /detokenize (vLLM's extensions): the main engine's tokenizer; the
  /// ids /tokenize returns are the prompt the completions or chat endpoint would run.
  void handle_tokens(const httplib::Request& hreq, httplib::Response& res, bool detokenize) {
    if (hreq.body.size() > cfg.max_body_bytes) {
      send_error(res, body_too_large(hreq.body.size(), cfg.max_body_bytes));
      return;
    }
    const Model& model = *main.model;
    const ModelInfo& mi = model.info();
    const io::Tokenizer& tok = model.tokenizer();
    const std::string served = served_id();
    try {
      if (detokenize) {
        const DetokenizeRequest rq = parse_detokenize_request(hreq.body);
        if (auto e = check_model(rq.model.empty() ? served : rq.model, {served})) return send_error(res, *e);
        for (size_t i = 0; i < rq.tokens.size(); ++i)
          if (rq.tokens[i] >= tok.vocab_size())
            return send_error(res, invalid_request("token " + std::to_string(rq.tokens[i]) + " at index " +
                                                       std::to_string(i) + " is outside the vocabulary of " +
                                                       std::to_string(tok.vocab_size()) + " tokens",
                                                   "tokens[" + std::to_string(i) + "]", "invalid_value"));
        // SentencePiece's decode drops the space its encoder put before the text (the
        // add_space_prefix of a llama tokenizer), so that detokenize(tokenize(s)) is s.
        std::string text = tok.decode(rq.tokens);
        if (tok.adds_space_prefix()) {
          size_t first = 0;
          while (first < rq.tokens.size() && tok.token_bytes(rq.tokens[first]).empty()) ++first;  // BOS and the like
          if (first < rq.tokens.size() && tok.token_bytes(rq.tokens[first]).rfind(' ', 0) == 0 && !text.empty() &&
              text[0] == ' ')
            text.erase(0, 1);
        }
        res.set_content(dump_json({{"prompt", text}}), "application/json");
      } else {
        const TokenizeRequest rq = parse_tokenize_request(hreq.body);
        if (auto e = check_model(rq.model.empty() ? served : rq.model, {served})) return send_error(res, *e);
        const std::string param = rq.chat ? "messages" : "prompt";
        std::vector<int32_t> ids;
        try {
          const std::string text = rq.chat ? render_chat(cfg.chat, rq.messages) : rq.prompt;
          if (rq.add_special_tokens && mi.bos >= 0) ids.push_back(mi.bos);
          const auto enc = tok.encode(text);
          ids.insert(ids.end(), enc.begin(), enc.end());
        } catch (const ApiException&) {
          throw;
        } catch (const Error& e) {
          return send_error(res, invalid_request(std::string("the ") + param + " cannot be tokenized: " + e.what(), param,
                                                 "invalid_value"));
        }
        res.set_content(dump_json({{"count", ids.size()}, {"max_model_len", mi.context}, {"tokens", ids}}),
                        "application/json");
      }
    } catch (const ApiException& e) {
      return send_error(res, e.error());
    }
    count("main", 200);
  }

  void handle(const httplib::Request& hreq, httplib::Response& res, Endpoint ep) {
    if (stopping.load()) {
      send_error(res, status_error(503, "server_error", "the server is shutting down", "shutting_down"));
      return;
    }
    if (hreq.body.size() > cfg.max_body_bytes) {
      send_error(res, body_too_large(hreq.body.size(), cfg.max_body_bytes));
      return;
    }
    serve::Request rq;
    try {
      rq = ep == Endpoint::Completions ? parse_completion_request(hreq.body) : parse_chat_request(hreq.body);
    } catch (const ApiException& e) {
      send_error(res, e.error());
      return;
    }
    const std::string served = served_id();
    if (rq.model.empty()) rq.model = served;
    if (auto e = check_model(rq.model, {served})) {
      send_error(res, *e);
      return;
    }
    Engine& eng = route();
    Model& model = *eng.model;
    const ModelInfo& mi = model.info();
    const io::Tokenizer& tok = model.tokenizer();
    GenRequest g;
    const std::string param = ep == Endpoint::Completions ? "prompt" : "messages";
    try {
      if (ep == Endpoint::Completions && rq.prompt_is_tokens) {
        g.prompt = rq.prompt_tokens;
        for (size_t i = 0; i < g.prompt.size(); ++i)
          if (g.prompt[i] >= tok.vocab_size())
            throw ApiException(invalid_request("prompt token " + std::to_string(g.prompt[i]) + " at index " +
                                                   std::to_string(i) + " is outside the vocabulary of " +
                                                   std::to_string(tok.vocab_size()) + " tokens",
                                               "prompt", "invalid_value"));
      } else {
        const std::string text = ep == Endpoint::Completions ? rq.prompt : render_chat(cfg.chat, rq.messages);
        if (mi.bos >= 0) g.prompt.push_back(mi.bos);
        const auto ids = tok.encode(text);
        g.prompt.insert(g.prompt.end(), ids.begin(), ids.end());
      }
    } catch (const ApiException& e) {
      send_error(res, e.error(), eng.label);
      return;
    } catch (const Error& e) {
      send_error(res, invalid_request(std::string("the ") + param + " cannot be tokenized: " + e.what(), param, "invalid_value"),
                 eng.label);
      return;
    }
    if (g.prompt.empty()) {
      send_error(res, invalid_request("the prompt is empty (no tokens); send at least one character", param, "invalid_value"), eng.label);
      return;
    }
    const int64_t P = static_cast<int64_t>(g.prompt.size());
    int64_t max_tokens = rq.max_tokens ? *rq.max_tokens
                                       : (ep == Endpoint::Completions ? cfg.default_max_tokens : mi.context - P);
    // A default (not asked for) fits what is left of the context and of the KV pool, so a chat
    // request without max_tokens is not refused on a pool smaller than one full context.
    if (!rq.max_tokens)
      max_tokens = std::max<int64_t>(
          0, std::min<int64_t>({max_tokens, mi.context - P, static_cast<int64_t>(eng.scheduler->kv_pool_positions()) - P}));
    if (auto e = check_context(P, max_tokens, mi.context, param)) {
      send_error(res, *e, eng.label);
      return;
    }
    g.max_tokens = static_cast<int>(max_tokens);
    g.sampling.temperature = static_cast<float>(rq.temperature);
    g.sampling.top_p = static_cast<float>(rq.top_p);
    g.sampling.top_k = rq.top_k;
    g.sampling.vocab_limit = tok.vocab_size();
    g.sampling.frequency_penalty = static_cast<float>(rq.frequency_penalty);
    g.sampling.presence_penalty = static_cast<float>(rq.presence_penalty);
    g.sampling.repetition_penalty = static_cast<float>(rq.repetition_penalty);
    for (const auto& [id, bias] : rq.logit_bias) {
      if (id >= tok.vocab_size()) {
        send_error(res,
                   invalid_request("Invalid value for 'logit_bias': token id " + std::to_string(id) +
                                       " is outside the vocabulary of " + std::to_string(tok.vocab_size()) + " tokens.",
                                   "logit_bias", "invalid_value"),
                   eng.label);
        return;
      }
      g.sampling.logit_bias.emplace_back(id, static_cast<float>(bias));
    }
    g.sampling.seed = rq.seed ? static_cast<uint64_t>(*rq.seed) : std::random_device{}() * 0x100000001ull;
    g.ignore_eos = rq.ignore_eos;
    g.cache_prompt = rq.cache_prompt;
    g.top_logprobs = rq.logprobs ? rq.top_logprobs : -1;
    g.lane = rq.priority == Priority::Batch ? Lane::Batch : Lane::Interactive;

    auto job = std::make_shared<Job>(rq.stop, tok, rq.logprobs);
    job->sched = eng.scheduler;
    Scheduler::Refusal why = Scheduler::Refusal::None;
    std::string detail;
    // A stream counts as in flight from before it is submitted, so that stop() cannot close the
    // listener between the scheduler's first token and the first SSE write (httplib writes nothing
    // once the listener is closed). The counter drops when its content provider is released.
    if (rq.stream) ++streaming;
    job->handle = eng.scheduler->submit(
        std::move(g), [job](const TokenEvent& ev) { return job->on_event(ev); }, &why, &detail);
    if (!job->handle) {
      if (rq.stream) --streaming;
      if (why == Scheduler::Refusal::QueueFull) send_error(res, overloaded(detail), eng.label);
      else if (why == Scheduler::Refusal::ShuttingDown)
        send_error(res, status_error(503, "server_error", detail, "shutting_down"), eng.label);
      else if (why == Scheduler::Refusal::TooLong)
        send_error(res, invalid_request(detail, param, "context_length_exceeded"), eng.label);
      else if (why == Scheduler::Refusal::CompletionTooLong)
        send_error(res, invalid_request(detail, "max_tokens", "context_length_exceeded"), eng.label);
      else send_error(res, invalid_request(detail, param, "invalid_value"), eng.label);
      return;
    }
    ResponseMeta meta;
    meta.id = random_id(ep == Endpoint::Completions ? "cmpl-" : "chatcmpl-");
    meta.created = static_cast<int64_t>(std::time(nullptr));
    meta.model = served;
    meta.include_usage = rq.include_usage;
    res.set_header("X-Rtx-Engine", eng.label);
    if (!rq.stream) {
      std::string text, finish_reason;
      std::vector<TokenLogprob> lps;
      Finish fin = Finish::None;
      std::string err;
      bool gone = false;
      while (fin == Finish::None) {
        if (!gone && current_client_gone()) {  // nobody will read the answer: free the slot and KV blocks now
          gone = true;
          job->sched->cancel(job->handle);
          close_after_response();
        }
        for (auto& it : job->take(200)) {
          text += it.text;
          for (auto& lp : it.lps) lps.push_back(std::move(lp));
          if (it.finish != Finish::None) {
            fin = it.finish;
            err = it.error;
          }
        }
      }
      if (fin != Finish::Stop && fin != Finish::Length) {
        send_error(res, finish_error(fin, err), eng.label);
        return;
      }
      const Usage u{P, job->completion_tokens, job->sched->times(job->handle).cached_tokens};
      const auto body = ep == Endpoint::Completions
                            ? completion_response(meta, text, finish_name(fin), u, rq.logprobs ? &lps : nullptr)
                            : chat_response(meta, text, finish_name(fin), u, rq.logprobs ? &lps : nullptr);
      res.set_content(dump_response(body), "application/json");
      count(eng.label, 200);
      return;
    }
    // Streaming: server-sent events until data: [DONE].
    count(eng.label, 200);
    const bool chat = ep == Endpoint::ChatCompletions;
    const bool want_lp = rq.logprobs;
    auto sent_role = std::make_shared<bool>(false);
    res.set_header("Cache-Control", "no-cache");
    res.set_chunked_content_provider(
        "text/event-stream",
        [job, meta, chat, want_lp, P, sent_role](size_t, httplib::DataSink& sink) {
          const auto write = [&](const std::string& s) { return sink.write(s.data(), s.size()); };
          if (chat && !*sent_role) {
            *sent_role = true;
            if (!write(sse_event(chat_chunk_role(meta)))) {
              job->sched->cancel(job->handle);
              return false;
            }
          }
          for (;;) {
            if (!sink.is_writable()) {  // the client went away: free its slot and KV blocks now
              job->sched->cancel(job->handle);
              return false;
            }
            for (auto& it : job->take(100)) {
              if (!it.text.empty() || !it.lps.empty()) {
                const auto j = chat ? chat_chunk_content(meta, it.text, want_lp ? &it.lps : nullptr)
                                    : completion_chunk(meta, it.text, {}, want_lp ? &it.lps : nullptr);
                if (!write(sse_event(j))) {
                  job->sched->cancel(job->handle);
                  return false;
                }
              }
              if (it.finish == Finish::None) continue;
              if (it.finish == Finish::Stop || it.finish == Finish::Length) {
                const std::string fr = finish_name(it.finish);
                write(sse_event(chat ? chat_chunk_finish(meta, fr) : completion_chunk(meta, "", fr)));
                if (meta.include_usage)
                  write(sse_event(usage_chunk(meta, chat ? "chat.completion.chunk" : "text_completion",
                                              Usage{P, job->completion_tokens,
                                                    job->sched->times(job->handle).cached_tokens})));
              } else {
                write(sse_event(error_body(finish_error(it.finish, it.error))));
              }
              write(sse_done());
              sink.done();
              return true;
            }
          }
        },
        [job, this](bool success) {
          if (!success && job->sched) job->sched->cancel(job->handle);
          --streaming;
        });
  }

  std::string metrics() const {
    std::ostringstream o;
    const auto family = [&](const char* name, const char* type, const char* help) {
      o << "# HELP " << name << " " << help << "\n# TYPE " << name << " " << type << "\n";
    };
    std::vector<const Engine*> engines{&main};
    if (canary.scheduler) engines.push_back(&canary);
    std::vector<std::pair<const Engine*, SchedulerStats>> st;
    for (const Engine* e : engines) st.emplace_back(e, e->scheduler->stats());
    const auto L = [](const Engine* e) { return std::string("engine=\"") + e->label + "\""; };
    family("rtx_requests_total", "counter", "Answers of the API routes and refusals (not /health, /metrics), by engine and status code.");
    {
      std::lock_guard<std::mutex> g(const_cast<std::mutex&>(stat_mu));
      for (const auto& [k, v] : status_counts) {
        const auto bar = k.find('|');
        o << "rtx_requests_total{engine=\"" << k.substr(0, bar) << "\",status=\"" << k.substr(bar + 1) << "\"} " << v
          << "\n";
      }
    }
    // Every reason of the HTTP guard (http_guard.hpp, guard_refusal_reason), 0 included.
    family("rtx_http_refused_total", "counter",
           "Requests the HTTP guard refused (the connection then closed), by reason: headers_too_large (431), "
           "uri_too_long (414), timeout (408: a deadline, or no byte for the read timeout), bad_request and "
           "bad_framing (400), not_implemented (501), unsupported_encoding (415), body_too_large (413, a chunked "
           "body), version_not_supported (505); cpp-httplib's own 400s count under bad_request, its 413 (a "
           "form-encoded body over 8 KiB, to a route that takes it) under body_too_large.");
    for (const char* reason : kGuardRefusalReasons)
      o << "rtx_http_refused_total{reason=\"" << reason << "\"} " << http.refused(reason) << "\n";
    family("rtx_requests_finished_total", "counter", "Generation requests finished, by finish reason.");
    for (const auto& [e, s] : st)
      for (int f = 1; f < 6; ++f)
        o << "rtx_requests_finished_total{" << L(e) << ",reason=\"" << finish_name(static_cast<Finish>(f)) << "\"} "
          << s.finished_by[f] << "\n";
    family("rtx_requests_rejected_total", "counter", "Requests refused by admission control (429 and others).");
    for (const auto& [e, s] : st) o << "rtx_requests_rejected_total{" << L(e) << "} " << s.requests_rejected << "\n";
    family("rtx_prompt_tokens_total", "counter", "Prompt tokens processed.");
    for (const auto& [e, s] : st) o << "rtx_prompt_tokens_total{" << L(e) << "} " << s.prompt_tokens << "\n";
    family("rtx_generation_tokens_total", "counter", "Tokens generated.");
    for (const auto& [e, s] : st) o << "rtx_generation_tokens_total{" << L(e) << "} " << s.output_tokens << "\n";
    family("rtx_steps_total", "counter", "Batched forward steps run.");
    for (const auto& [e, s] : st) o << "rtx_steps_total{" << L(e) << "} " << s.steps << "\n";
    family("rtx_queue_depth", "gauge", "Requests waiting for admission.");
    for (const auto& [e, s] : st) o << "rtx_queue_depth{" << L(e) << "} " << s.queued << "\n";
    family("rtx_running_sequences", "gauge", "Sequences in the running batch.");
    for (const auto& [e, s] : st) o << "rtx_running_sequences{" << L(e) << "} " << s.running << "\n";
    family("rtx_batch_size", "gauge", "Sequences in the last forward step.");
    for (const auto& [e, s] : st) o << "rtx_batch_size{" << L(e) << "} " << s.last_batch_seqs << "\n";
    family("rtx_batch_tokens", "gauge", "Rows (prompt + decode tokens) in the last forward step.");
    for (const auto& [e, s] : st) o << "rtx_batch_tokens{" << L(e) << "} " << s.last_batch_rows << "\n";
    family("rtx_steps_tpot_capped_total", "counter", "Steps whose prompt chunks were cut to meet the TPOT target (--tpot-target-ms).");
    for (const auto& [e, s] : st) o << "rtx_steps_tpot_capped_total{" << L(e) << "} " << s.steps_tpot_capped << "\n";
    family("rtx_step_time_model_seconds", "gauge",
           "Online fit of a step's time, a + b rows + c decode_keys + d prefill_pairs: term=\"fixed\" a, "
           "\"per_row\" b, \"per_decode_key\" c, \"per_prefill_pair\" d (seconds).");
    for (const auto& [e, s] : st) {
      static const char* const terms[StepTimeModel::kTerms] = {"fixed", "per_row", "per_decode_key", "per_prefill_pair"};
      for (int i = 0; i < StepTimeModel::kTerms; ++i)
        o << "rtx_step_time_model_seconds{" << L(e) << ",term=\"" << terms[i] << "\"} " << s.step_time_coef[i] << "\n";
    }
    family("rtx_kv_cache_blocks_used", "gauge", "KV cache blocks held by sequences.");
    for (const auto& [e, s] : st) o << "rtx_kv_cache_blocks_used{" << L(e) << "} " << s.kv_blocks_used << "\n";
    family("rtx_kv_cache_blocks_total", "gauge", "KV cache blocks in the pool.");
    for (const auto& [e, s] : st) o << "rtx_kv_cache_blocks_total{" << L(e) << "} " << s.kv_blocks_total << "\n";
    family("rtx_kv_cache_usage_ratio", "gauge", "Share of KV cache blocks in use.");
    for (const auto& [e, s] : st)
      o << "rtx_kv_cache_usage_ratio{" << L(e) << "} "
        << (s.kv_blocks_total ? static_cast<double>(s.kv_blocks_used) / s.kv_blocks_total : 0.0) << "\n";
    family("rtx_kv_cache_blocks_cached", "gauge", "Prefix-cache blocks no sequence holds (reclaimable).");
    for (const auto& [e, s] : st) o << "rtx_kv_cache_blocks_cached{" << L(e) << "} " << s.kv_blocks_cached << "\n";
    family("rtx_prefix_cache_queries_total", "counter", "Prompt tokens looked up in the prefix cache.");
    for (const auto& [e, s] : st) o << "rtx_prefix_cache_queries_total{" << L(e) << "} " << s.prefix_cache_queries << "\n";
    family("rtx_prefix_cache_hits_total", "counter", "Prompt tokens whose keys and values came from the prefix cache.");
    for (const auto& [e, s] : st) o << "rtx_prefix_cache_hits_total{" << L(e) << "} " << s.prefix_cache_hits << "\n";
    family("rtx_kv_cache_bytes", "gauge", "Bytes of the KV cache pool.");
    for (const auto& [e, s] : st) o << "rtx_kv_cache_bytes{" << L(e) << "} " << s.kv_bytes << "\n";
    family("rtx_lane_requests_total", "counter", "Requests that produced a first token, by priority lane.");
    for (const auto& [e, s] : st)
      for (int l = 0; l < 2; ++l)
        o << "rtx_lane_requests_total{" << L(e) << ",lane=\"" << lane_name(static_cast<Lane>(l)) << "\"} "
          << s.lane_requests[l] << "\n";
    family("rtx_lane_ttft_within_target_total", "counter", "Requests whose TTFT met their lane's latency target.");
    for (const auto& [e, s] : st)
      for (int l = 0; l < 2; ++l)
        o << "rtx_lane_ttft_within_target_total{" << L(e) << ",lane=\"" << lane_name(static_cast<Lane>(l)) << "\"} "
          << s.lane_within_target[l] << "\n";
    family("rtx_time_to_first_token_seconds", "histogram", "Time to first token (TTFT), submit to first token.");
    for (const Engine* e : engines) o << e->scheduler->ttft().prometheus("rtx_time_to_first_token_seconds", L(e));
    family("rtx_time_per_output_token_seconds", "histogram", "Time per output token (TPOT) of finished requests.");
    for (const Engine* e : engines) o << e->scheduler->tpot().prometheus("rtx_time_per_output_token_seconds", L(e));
    family("rtx_inter_token_latency_seconds", "histogram", "Gaps between successive tokens of a request.");
    for (const Engine* e : engines) o << e->scheduler->itl().prometheus("rtx_inter_token_latency_seconds", L(e));
    return o.str();
  }
};

Server::Server(Engine main, Engine canary, ServerConfig cfg) : impl_(std::make_unique<Impl>()) {
  if (!main.model || !main.scheduler) throw_input("Server: the main engine needs a model and a scheduler", "main");
  if (!(cfg.canary_fraction >= 0 && cfg.canary_fraction <= 1))
    throw_input("canary fraction " + std::to_string(cfg.canary_fraction) + " must be in [0, 1]", "canary_fraction");
  if (cfg.canary_fraction > 0 && !canary.scheduler)
    throw_input("a canary fraction needs a canary engine (--canary-profile)", "canary_fraction");
  if (!(cfg.shutdown_deadline_s >= 0)) throw_input("shutdown deadline must be >= 0", "shutdown_deadline_s");
  if (!(cfg.header_timeout_s > 0) || !(cfg.receive_timeout_s >= cfg.header_timeout_s))
    throw_input("header timeout must be > 0 and the receive timeout >= it", "header_timeout_s/receive_timeout_s");
  if (!(cfg.read_timeout_s > 0 && cfg.read_timeout_s <= 86400))  // the guard waits in int milliseconds
    throw_input("read timeout must be > 0 and at most 86400 s", "read_timeout_s");
  if (cfg.max_header_bytes < 1024 || cfg.max_header_lines < 4)
    throw_input("header limits must allow at least 1024 bytes and 4 lines", "max_header_bytes/max_header_lines");
  if (cfg.chat.name.empty()) cfg.chat = chat_template(kDefaultChatTemplate);
  canary.label = "canary";
  main.label = "main";
  impl_->main = main;
  impl_->canary = canary;
  impl_->cfg = cfg;
  Impl* I = impl_.get();
  auto& http = impl_->http;
  const int threads = cfg.http_threads > 0 ? cfg.http_threads
                                           : main.scheduler->config().max_queue + main.scheduler->config().max_batch + 8;
  http.new_task_queue = [threads] { return new httplib::ThreadPool(static_cast<size_t>(threads)); };
  http.set_payload_max_length(cfg.max_body_bytes);
  // Streamed tokens are small writes: with Nagle's algorithm on, one may wait for a remote
  // client's delayed ACK of the previous one (up to 40 ms on Linux). Over loopback no change
  // shows: a client reading as fast as it can gets 12-32 events per recv() with or without, as
  // the tiny stories260k model decodes faster than it reads. TCP_NODELAY on the listening
  // socket is inherited by every accepted one (Linux).
  http.set_tcp_nodelay(true);
  http.set_limits(HttpLimits{cfg.max_header_bytes, cfg.max_header_lines, cfg.header_timeout_s, cfg.receive_timeout_s});
  // cpp-httplib 0.11 listens with a backlog of 5: a burst of clients (64 connecting at once)
  // overflows it and the kernel resets connections. Remember the listening socket so bind()
  // can raise the backlog with a second listen() (Linux updates it in place).
  // SO_REUSEADDR only: cpp-httplib's default_socket_options also sets SO_REUSEPORT, with which
  // a second server binds the same port and the kernel splits the connections between the two
  // (a stale server silently takes half the traffic) instead of bind() failing.
  http.set_socket_options([I](socket_t sock) {
    int yes = 1;
    ::setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof(yes));
    I->listen_fd = sock;
  });
  {
    const auto us = static_cast<int64_t>(std::ceil(cfg.read_timeout_s * 1e6));
    http.set_read_timeout(static_cast<time_t>(us / 1000000), static_cast<time_t>(us % 1000000));
  }
  http.set_write_timeout(30, 0);
  // Runs before cpp-httplib reads the body. Every refusal here leaves the body unread, so the
  // connection is closed after the answer: the unread bytes must never be parsed as a next
  // request (request smuggling behind a proxy that reuses connections).
  if (I->cfg.access_log) {
    // cpp-httplib calls the logger after the response's last write, streams included, on the
    // thread that read the request, where the guard stamped its start.
    http.set_logger([I](const httplib::Request& req, const httplib::Response& res) {
      const auto now = std::chrono::steady_clock::now();
      const double ms = std::chrono::duration<double, std::milli>(now - current_request_start()).count();
      const std::string when = utc_now(TimeStampPrecision::Seconds);
      const std::string engine = res.get_header_value("X-Rtx-Engine");
      char ms_text[32];
      std::snprintf(ms_text, sizeof ms_text, "%.1f", ms);
      // A request line that did not parse leaves remote_addr unset; the connection has one.
      const std::string& client = req.remote_addr.empty() ? current_client_addr() : req.remote_addr;
      const std::string line = std::string(when) + " " + log_escape(client) + " " + log_escape(req.method) + " " +
                               log_escape(req.path) + " " +
                               std::to_string(res.status) + " " + ms_text + " " + (engine.empty() ? "-" : engine) + "\n";
      std::fputs(line.c_str(), I->cfg.access_log);
      std::fflush(I->cfg.access_log);
    });
  }
  http.set_pre_routing_handler([I](const httplib::Request& req, httplib::Response& res) {
    auto refuse = [&](const ApiError& e) {
      I->send_error(res, e);
      res.set_header("Connection", "close");
      close_after_response();
      return httplib::Server::HandlerResponse::Handled;
    };
    if (req.get_header_value_count("Authorization") > 1)  // which one counts would be a guess
      return refuse(status_error(400, "invalid_request_error", "several Authorization headers; send one",
                                 "bad_authorization"));
    if (!I->cfg.api_key.empty() && req.path != "/health") {
      // "Bearer KEY"; the scheme is case-insensitive (RFC 9110 11.1), the key compared in
      // constant time.
      const std::string& want = I->cfg.api_key;
      const std::string got = req.get_header_value("Authorization");
      std::string scheme = got.substr(0, std::min<size_t>(7, got.size()));
      for (char& c : scheme) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
      const std::string key = got.size() > 7 ? got.substr(7) : std::string();
      if (scheme != "bearer " || key.size() != want.size() || sodium_memcmp(key.data(), want.data(), want.size()) != 0) {
        res.set_header("WWW-Authenticate", "Bearer");
        return refuse(unauthorized());
      }
    }
    // The body's framing, judged before anything is read (RFC 9112 section 6).
    const size_t n_len = req.get_header_value_count("Content-Length");
    std::string te = req.get_header_value("Transfer-Encoding");
    for (char& c : te) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    const bool chunked = te.find("chunked") != std::string::npos;
    if (n_len > 1 || (n_len == 1 && req.has_header("Transfer-Encoding")))
      return refuse(status_error(400, "invalid_request_error",
                                 "ambiguous body length: several Content-Length headers, or Content-Length with Transfer-Encoding",
                                 "bad_framing"));
    if (n_len == 1) {
      const std::string v = req.get_header_value("Content-Length");
      const bool digits = !v.empty() && v.size() <= 19 && v.find_first_not_of("0123456789") == std::string::npos;
      if (!digits)
        return refuse(status_error(400, "invalid_request_error", "Content-Length '" + v.substr(0, 40) + "' is not a byte count",
                                   "bad_framing"));
      const unsigned long long len = std::strtoull(v.c_str(), nullptr, 10);
      if (len > I->cfg.max_body_bytes) return refuse(body_too_large(len, I->cfg.max_body_bytes));
    } else if (!chunked && (req.method == "POST" || req.method == "PUT" || req.method == "PATCH")) {
      // The library would wait for a body until the socket closes: answer now. Where the path
      // does not take the method, that (405 with Allow, or 404) is the answer, not the length.
      if (!route_takes(req.path, req.method)) return refuse(wrong_route(req, res));
      return refuse(status_error(411, "invalid_request_error", req.method + " needs a Content-Length (or chunked encoding)",
                                 "length_required"));
    }
    return httplib::Server::HandlerResponse::Unhandled;
  });
  http.set_error_handler([I](const httplib::Request& req, httplib::Response& res) {
    if (const GuardRefusal why = current_guard_refusal(); why != GuardRefusal::None) {
      const GuardAnswer a = guard_refusal_answer(why, I->http.limits());
      res.status = a.status;
      I->send_error(res, status_error(a.status, a.type, a.message, a.code));
      res.set_header("Connection", "close");
      close_after_response();
      return;
    }
    if (!res.body.empty()) return;
    // An error cpp-httplib raised while reading (bad request line, header, chunk, size): the
    // rest of the request may still be on the socket, so the connection ends with this answer.
    // A 404 or 405 of the router (no route for the path or the method) keeps the connection
    // when the whole request was read, as any handler's answer does; with a body left unread (a
    // GET or TRACE with a Content-Length, which cpp-httplib does not read) it closes too.
    const auto end_connection = [&res] {
      close_after_response();
      res.set_header("Connection", "close");
    };
    const bool read_whole = current_request_read_whole();
    const bool has_length = req.has_header("Content-Length");
    const size_t declared = std::strtoull(req.get_header_value("Content-Length").c_str(), nullptr, 10);
    const bool form = req.get_header_value("Content-Type").rfind("application/x-www-form-urlencoded", 0) == 0;
    // cpp-httplib's own 413 for a form-encoded body comes after it read the whole body (into
    // req.body, Content-Length or chunked), before it routed: bodies over --max-body-bytes never
    // get there (refused before routing, or by the guard while a chunked one is read).
    if (res.status == 413 && form && req.body.size() <= I->cfg.max_body_bytes && !route_takes(req.path, req.method)) {
      // No route for the path (404), or one that does not take the method (405): the answer
      // the same request with any other body gets, not the library's cap. The body was read,
      // so the connection stays as for any 404 or 405.
      const ApiError e = wrong_route(req, res);
      res.status = e.status;
      I->send_error(res, e);
      if (!read_whole) end_connection();
    } else if (res.status == 413 && form && req.body.size() <= I->cfg.max_body_bytes) {
      // cpp-httplib caps form-encoded bodies (8 KiB), below --max-body-bytes: curl -d without a
      // Content-Type sends that type. Say so, rather than a limit the body is under. The size is
      // the bytes read (a chunked body has no Content-Length).
      ApiError e = body_too_large(req.body.size(), I->cfg.max_body_bytes);
      e.message = "Request body of " + std::to_string(req.body.size()) +
                  " bytes sent as application/x-www-form-urlencoded, which the HTTP library caps at 8192 bytes; "
                  "send it with 'Content-Type: application/json' (curl: -H 'Content-Type: application/json').";
      I->send_error(res, e);
      end_connection();
    } else if (res.status == 413) {
      I->send_error(res, has_length ? body_too_large(declared, I->cfg.max_body_bytes) : body_too_large(I->cfg.max_body_bytes));
      end_connection();
    } else if (res.status == 404 && req.path.rfind("/v1/models/", 0) == 0 && route_takes(req.path, req.method)) {
      // GET /v1/models/{id} with an id the route pattern does not take (empty, CR or LF).
      I->send_error(res, *check_model(req.path.substr(11), {I->served_id()}));
      if (!read_whole) end_connection();
    } else if ((res.status == 404 && route_methods(req.path).empty()) ||
               ((res.status == 404 || res.status == 400) && !req.method.empty() && !route_methods(req.path).empty() &&
                !route_takes(req.path, req.method))) {
      // No route (404), or the path exists with another method: 405 with the methods it takes
      // (cpp-httplib answers 400 for methods it routes nowhere: TRACE, CONNECT).
      const ApiError e = wrong_route(req, res);
      res.status = e.status;
      I->send_error(res, e);
      if (!read_whole) end_connection();
    } else if (res.status == 404 || (res.status == 400 && routed_nowhere_by_httplib(req.method) && !req.path.empty() &&
                                      route_methods(req.path).empty())) {
      // A path no route serves is 404 whatever the method: cpp-httplib answers 400 for a
      // method it routes nowhere (TRACE /nowhere), which is not the client's framing error.
      res.status = 404;
      I->send_error(res, status_error(404, "invalid_request_error", req.path + " was not found", "not_found"));
      if (!read_whole) end_connection();
    } else if (res.status >= 400) {
      end_connection();
      const std::string what =
          res.status == 400 ? "malformed HTTP/1.1 request (request line, headers or body framing)"
                            : "HTTP " + std::to_string(res.status);
      I->send_error(res, status_error(res.status, res.status >= 500 ? "server_error" : "invalid_request_error", what,
                                      res.status == 400 ? "bad_request" : ""));
    }
  });
  http.set_exception_handler([I](const httplib::Request&, httplib::Response& res, std::exception_ptr ep) {
    std::string what = "unknown exception";
    try {
      std::rethrow_exception(ep);
    } catch (const std::exception& e) {
      what = e.what();
    } catch (...) {
    }
    I->send_error(res, server_error(what));
  });
  http.Post("/v1/completions",
            [I](const httplib::Request& q, httplib::Response& r) { I->handle(q, r, Endpoint::Completions); });
  http.Post("/v1/chat/completions",
            [I](const httplib::Request& q, httplib::Response& r) { I->handle(q, r, Endpoint::ChatCompletions); });
  http.Post("/tokenize", [I](const httplib::Request& q, httplib::Response& r) { I->handle_tokens(q, r, false); });
  http.Post("/detokenize", [I](const httplib::Request& q, httplib::Response& r) { I->handle_tokens(q, r, true); });
  // OpenAI's model object for the served model (GET /v1/models and /v1/models/{id}). No path:
  // where the file lies on the server is the operator's business; meta.file is its name alone.
  auto model_object = [I] {
    const ModelInfo& mi = I->main.model->info();
    return nlohmann::json{{"id", I->served_id()}, {"object", "model"}, {"created", I->started},
                          {"owned_by", "rtx"},
                          {"meta", {{"arch", mi.arch}, {"vocab", mi.vocab}, {"context", mi.context},
                                    {"n_layer", mi.n_layer}, {"file", std::filesystem::path(mi.path).filename().string()}}}};
  };
  http.Get("/v1/models", [I, model_object](const httplib::Request&, httplib::Response& res) {
    res.set_content(dump_json({{"object", "list"}, {"data", nlohmann::json::array({model_object()})}}), "application/json");
    I->count("main", 200);
  });
  http.Get(R"(/v1/models/(.+))", [I, model_object](const httplib::Request& req, httplib::Response& res) {
    if (auto e = check_model(req.matches[1], {I->served_id()})) return I->send_error(res, *e);
    const nlohmann::json m = model_object();
    res.set_content(dump_json(m), "application/json");
    I->count("main", 200);
  });
  http.Get("/health", [I](const httplib::Request&, httplib::Response& res) {
    if (I->stopping.load()) {
      res.status = 503;
      res.set_content(R"({"status":"shutting_down"})", "application/json");
    } else {
      res.set_content(R"({"status":"ok"})", "application/json");
    }
  });
  http.Get("/metrics", [I](const httplib::Request&, httplib::Response& res) {
    res.set_content(I->metrics(), "text/plain; version=0.0.4; charset=utf-8");
  });
}

Server::~Server() {
  stop();
}

int Server::bind() {
  if (port_ > 0) return port_;
  const auto& c = impl_->cfg;
  if (c.port == 0) {
    port_ = impl_->http.bind_to_any_port(c.host);
    if (port_ <= 0) throw Error(ErrorCategory::Environment, "cannot bind " + c.host + " to any port", c.host);
  } else {
    if (!impl_->http.bind_to_port(c.host, c.port))
      throw Error(ErrorCategory::Environment,
                  "cannot bind " + c.host + ":" + std::to_string(c.port) + " (in use, or not permitted)", "--port",
                  "pick another --port, or stop the process holding it");
    port_ = c.port;
  }
  if (impl_->listen_fd >= 0) ::listen(impl_->listen_fd, SOMAXCONN);
  return port_;
}

void Server::run() {
  bind();
  impl_->http.listen_after_bind();
}

void Server::stop() {
  Impl* I = impl_.get();
  std::call_once(I->stop_once, [I] {
    I->stopping.store(true);
    // In-flight requests finish (or are cancelled at the deadline) before the listener closes,
    // so their HTTP threads end their responses properly.
    I->main.scheduler->shutdown(I->cfg.shutdown_deadline_s);
    if (I->canary.scheduler) I->canary.scheduler->shutdown(I->cfg.shutdown_deadline_s);
    // Every request has its final event now; let the HTTP threads write it (and [DONE])
    // before the listener closes, for at most 2 s (a client that stopped reading).
    for (int i = 0; i < 400 && I->streaming.load() > 0; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(5));
    I->http.stop();
  });
}

bool Server::running() const { return impl_->http.is_running(); }

std::string Server::metrics() const { return impl_->metrics(); }

}  // namespace rtx::serve
