#include "tokenizer/chat_template.h"

#include <algorithm>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/mapped_file.h"

namespace ts::tok {

namespace {

const char* kStart = "<|im_start|>";
const char* kEnd = "<|im_end|>";

nlohmann::json parse_json(const std::string& text, const std::string& origin) {
  try {
    return nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    TS_FAIL(origin, ": not valid JSON (", e.what(), ")");
  }
}

// Python's str.strip/lstrip/rstrip with the set "\n" (what the template calls).
std::string lstrip_newlines(const std::string& s) {
  size_t b = s.find_first_not_of('\n');
  return b == std::string::npos ? std::string() : s.substr(b);
}
std::string rstrip_newlines(const std::string& s) {
  size_t e = s.find_last_not_of('\n');
  return e == std::string::npos ? std::string() : s.substr(0, e + 1);
}

bool starts_with(const std::string& s, const std::string& p) { return s.compare(0, p.size(), p) == 0; }
bool ends_with(const std::string& s, const std::string& p) {
  return s.size() >= p.size() && s.compare(s.size() - p.size(), p.size(), p) == 0;
}

// A special token's text from tokenizer_config.json: a string or {"content": ...}.
std::string token_string(const nlohmann::json& v) {
  if (v.is_string()) return v.get<std::string>();
  if (v.is_object() && v.contains("content")) return v.at("content").get<std::string>();
  return std::string();
}

}  // namespace

std::vector<ChatMessage> parse_chat_messages(const std::string& json_text) {
  nlohmann::json root = parse_json(json_text, "chat messages");
  if (root.is_object() && root.contains("messages")) root = root.at("messages");
  TS_CHECK(root.is_array(), "chat messages: expected a JSON array of {\"role\", \"content\"} objects, found ",
           root.type_name());
  std::vector<ChatMessage> msgs;
  for (const auto& m : root) {
    TS_CHECK(m.is_object() && m.contains("role") && m.at("role").is_string() && m.contains("content") &&
                 m.at("content").is_string(),
             "chat messages: each message needs string \"role\" and \"content\", found ", m.dump().substr(0, 200));
    msgs.push_back({m.at("role").get<std::string>(), m.at("content").get<std::string>()});
  }
  return msgs;
}

ChatTemplate ChatTemplate::from_config_text(const std::string& config_text, const std::string& origin) {
  nlohmann::json config = parse_json(config_text, origin);
  TS_CHECK(config.is_object(), origin, ": expected a JSON object");
  std::string source;
  if (config.contains("chat_template")) {
    const auto& t = config.at("chat_template");
    if (t.is_string()) {
      source = t.get<std::string>();
    } else if (t.is_array()) {  // [{"name": "default", "template": ...}, ...]
      for (const auto& named : t)
        if (named.value("name", "") == "default") source = named.value("template", "");
    }
  }
  TS_CHECK(!source.empty(), origin, ": no chat template (expected \"chat_template\" in tokenizer_config.json or a "
           "chat_template.jinja file)");
  ChatTemplate ct;
  ct.origin_ = origin;
  ct.thinking_ = source.find("<think>") != std::string::npos;
  TS_CHECK(source.find(kStart) != std::string::npos, origin, ": the chat template is not ChatML (no \"", kStart,
           "\"); only ChatML templates (Qwen2/Qwen3 and the project's own) are supported");
  if (config.contains("eos_token")) ct.eos_token_ = token_string(config.at("eos_token"));
  return ct;
}

ChatTemplate ChatTemplate::from_model_dir(const std::string& dir) {
  const std::string config_path = dir + "/tokenizer_config.json";
  TS_CHECK(file_exists(config_path), "no tokenizer_config.json in ", dir, " (needed for the chat template)");
  nlohmann::json config = parse_json(read_text_file(config_path), config_path);
  // Newer folders keep the template in its own file.
  const std::string jinja_path = dir + "/chat_template.jinja";
  if (!config.contains("chat_template") && file_exists(jinja_path)) config["chat_template"] = read_text_file(jinja_path);
  ChatTemplate ct = from_config_text(config.dump(), config_path);

  const std::string generation_path = dir + "/generation_config.json";
  if (file_exists(generation_path)) {
    nlohmann::json gen = parse_json(read_text_file(generation_path), generation_path);
    if (gen.contains("eos_token_id")) {
      const auto& eos = gen.at("eos_token_id");
      if (eos.is_number_integer()) ct.generation_eos_.push_back(eos.get<int32_t>());
      if (eos.is_array())
        for (const auto& id : eos) ct.generation_eos_.push_back(id.get<int32_t>());
    }
  }
  return ct;
}

std::vector<ChatTemplate::Piece> ChatTemplate::render_pieces(const std::vector<ChatMessage>& msgs,
                                                             bool add_generation_prompt, bool enable_thinking) const {
  TS_CHECK(!msgs.empty(), "chat: no messages to format");
  for (size_t i = 0; i < msgs.size(); ++i) {
    const std::string& role = msgs[i].role;
    TS_CHECK(role == "system" || role == "user" || role == "assistant" || role == "tool", "chat: message ", i,
             " has role \"", role, "\" (expected system, user, assistant or tool)");
  }
  std::vector<Piece> out;
  auto marker = [&](const char* m) { out.push_back({m, true}); };
  auto text = [&](std::string t) {
    if (!out.empty() && !out.back().marker) out.back().text += t;
    else out.push_back({std::move(t), false});
  };

  if (!thinking_) {  // plain ChatML
    for (const auto& m : msgs) {
      marker(kStart);
      text(m.role + "\n" + m.content);
      marker(kEnd);
      text("\n");
    }
    if (add_generation_prompt) {
      marker(kStart);
      text("assistant\n");
    }
    return out;
  }

  // Qwen3: mirrors the reference template statement by statement (without tools).
  const size_t n = msgs.size();
  if (msgs[0].role == "system") {
    marker(kStart);
    text("system\n" + msgs[0].content);
    marker(kEnd);
    text("\n");
  }
  // The last user message that is not a tool response: assistant turns after it keep their reasoning.
  size_t last_query_index = n - 1;
  for (size_t k = n; k-- > 0;) {
    const auto& m = msgs[k];
    if (m.role == "user" && !(starts_with(m.content, "<tool_response>") && ends_with(m.content, "</tool_response>"))) {
      last_query_index = k;
      break;
    }
  }
  for (size_t i = 0; i < n; ++i) {
    const auto& m = msgs[i];
    const bool last = i + 1 == n;
    if (m.role == "user" || (m.role == "system" && i != 0)) {
      marker(kStart);
      text(m.role + "\n" + m.content);
      marker(kEnd);
      text("\n");
    } else if (m.role == "assistant") {
      std::string content = m.content, reasoning;
      size_t close = m.content.find("</think>");
      if (close != std::string::npos) {
        // content.split('</think>')[-1].lstrip('\n'); reasoning: before the first </think>, after its last <think>.
        content = lstrip_newlines(m.content.substr(m.content.rfind("</think>") + 8));
        std::string before = rstrip_newlines(m.content.substr(0, close));
        size_t open = before.rfind("<think>");
        reasoning = lstrip_newlines(open == std::string::npos ? before : before.substr(open + 7));
      }
      marker(kStart);
      if (i > last_query_index && (last || !reasoning.empty())) {
        text("assistant\n<think>\n" + rstrip_newlines(lstrip_newlines(reasoning)) + "\n</think>\n\n" +
             lstrip_newlines(content));
      } else {
        text("assistant\n" + content);
      }
      marker(kEnd);
      text("\n");
    } else if (m.role == "tool") {  // consecutive tool results share one user turn
      if (i == 0 || msgs[i - 1].role != "tool") {
        marker(kStart);
        text("user");
      }
      text("\n<tool_response>\n" + m.content + "\n</tool_response>");
      if (last || msgs[i + 1].role != "tool") {
        marker(kEnd);
        text("\n");
      }
    }
  }
  if (add_generation_prompt) {
    marker(kStart);
    text("assistant\n");
    if (!enable_thinking) text("<think>\n\n</think>\n\n");
  }
  return out;
}

std::string ChatTemplate::render(const std::vector<ChatMessage>& msgs, bool add_generation_prompt,
                                 bool enable_thinking) const {
  std::string out;
  for (const Piece& p : render_pieces(msgs, add_generation_prompt, enable_thinking)) out += p.text;
  return out;
}

std::vector<int32_t> ChatTemplate::encode_chat(const Tokenizer& tok, const std::vector<ChatMessage>& msgs,
                                               bool add_generation_prompt, bool enable_thinking) const {
  std::vector<int32_t> ids;
  for (const Piece& p : render_pieces(msgs, add_generation_prompt, enable_thinking)) {
    if (p.marker) {
      int32_t id = tok.token_id(p.text);
      TS_CHECK(id >= 0, "chat: the tokenizer has no token for the turn marker \"", p.text, "\"");
      ids.push_back(id);
    } else {
      std::vector<int32_t> run = tok.encode(p.text, /*parse_special=*/false);
      ids.insert(ids.end(), run.begin(), run.end());
    }
  }
  return ids;
}

std::vector<int32_t> ChatTemplate::stop_ids(const Tokenizer& tok) const {
  std::vector<int32_t> ids;
  auto add = [&](int32_t id) {
    if (id >= 0 && id < tok.vocab_size() && std::find(ids.begin(), ids.end(), id) == ids.end()) ids.push_back(id);
  };
  if (!eos_token_.empty()) add(tok.token_id(eos_token_));
  add(tok.token_id(kEnd));
  for (int32_t id : generation_eos_) add(id);
  TS_CHECK(!ids.empty(), origin_, ": no stop token found (no eos_token, no ", kEnd, " token)");
  return ids;
}

}  // namespace ts::tok
