#include "tokenizer/chat_template.h"

#include <algorithm>

#include "core/error.h"
#include "core/mapped_file.h"
#include "tokenizer/jinja.h"

namespace ts::tok {

namespace {

nlohmann::ordered_json parse_json(const std::string& text, const std::string& origin) {
  try {
    return nlohmann::ordered_json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    TS_FAIL(origin, ": not valid JSON (", e.what(), ")");
  }
}

// A special token's text from tokenizer_config.json: a string or {"content": ...}; "" for null.
std::string token_string(const nlohmann::ordered_json& v) {
  if (v.is_string()) return v.get<std::string>();
  if (v.is_object() && v.contains("content") && v.at("content").is_string()) return v.at("content").get<std::string>();
  return std::string();
}

// The template text of a tokenizer_config.json: a string, or the "default" entry of a list of named templates.
std::string template_source(const nlohmann::ordered_json& config) {
  if (!config.contains("chat_template")) return std::string();
  const auto& t = config.at("chat_template");
  if (t.is_string()) return t.get<std::string>();
  if (t.is_array())
    for (const auto& named : t)
      if (named.is_object() && named.value("name", "") == "default" && named.contains("template"))
        return named.at("template").get<std::string>();
  return std::string();
}

// The folder's tokenizer_config.json with the template of chat_template.jinja merged in when the config has none.
nlohmann::ordered_json folder_config(const std::string& dir, std::string* config_path) {
  *config_path = dir + "/tokenizer_config.json";
  nlohmann::ordered_json config = nlohmann::ordered_json::object();
  if (file_exists(*config_path)) config = parse_json(read_text_file(*config_path), *config_path);
  const std::string jinja_path = dir + "/chat_template.jinja";
  if (template_source(config).empty() && file_exists(jinja_path)) config["chat_template"] = read_text_file(jinja_path);
  return config;
}

}  // namespace

std::vector<ChatMessage> parse_chat_messages(const std::string& json_text) {
  nlohmann::ordered_json root = parse_json(json_text, "chat messages");
  if (root.is_object() && root.contains("messages")) root = nlohmann::ordered_json(root.at("messages"));
  TS_CHECK(root.is_array(), "chat messages: expected a JSON array of {\"role\", \"content\"} objects, found ",
           root.type_name());
  std::vector<ChatMessage> msgs;
  for (const auto& m : root) {
    TS_CHECK(m.is_object() && m.contains("role") && m.at("role").is_string(),
             "chat messages: each message needs a string \"role\", found ", m.dump().substr(0, 200));
    ChatMessage msg;
    msg.role = m.at("role").get<std::string>();
    for (const auto& [key, value] : m.items()) {
      if (key == "role") continue;
      if (key == "content" && value.is_string()) {
        msg.content = value.get<std::string>();
        continue;
      }
      TS_CHECK(key != "content" || value.is_null(), "chat messages: \"content\" must be a string or null, found ",
               value.dump().substr(0, 200));
      msg.extra[key] = value;
    }
    msgs.push_back(std::move(msg));
  }
  return msgs;
}

bool ChatTemplate::model_dir_has_template(const std::string& dir) {
  std::string config_path;
  return !template_source(folder_config(dir, &config_path)).empty();
}

ChatTemplate ChatTemplate::from_config_text(const std::string& config_text, const std::string& origin) {
  const nlohmann::ordered_json config = parse_json(config_text, origin);
  TS_CHECK(config.is_object(), origin, ": expected a JSON object");
  ChatTemplate ct;
  ct.source_ = template_source(config);
  TS_CHECK(!ct.source_.empty(), origin, ": no chat template (expected \"chat_template\" in tokenizer_config.json or a "
           "chat_template.jinja file)");
  ct.origin_ = origin;
  try {
    ct.template_ = std::make_shared<const jinja::Template>(ct.source_);
  } catch (const ts::Error& e) {
    TS_FAIL(origin, ": the chat template cannot be used: ", e.what());
  }
  ct.thinking_ = ct.source_.find("<think>") != std::string::npos;
  if (config.contains("bos_token")) ct.bos_token_ = token_string(config.at("bos_token"));
  if (config.contains("eos_token")) ct.eos_token_ = token_string(config.at("eos_token"));
  return ct;
}

ChatTemplate ChatTemplate::from_model_dir(const std::string& dir) {
  std::string config_path;
  const nlohmann::ordered_json config = folder_config(dir, &config_path);
  ChatTemplate ct = from_config_text(config.dump(), config_path);

  const std::string generation_path = dir + "/generation_config.json";
  if (file_exists(generation_path)) {
    const nlohmann::ordered_json gen = parse_json(read_text_file(generation_path), generation_path);
    if (gen.contains("eos_token_id")) {
      const auto& eos = gen.at("eos_token_id");
      if (eos.is_number_integer()) ct.generation_eos_.push_back(eos.get<int32_t>());
      if (eos.is_array())
        for (const auto& id : eos)
          if (id.is_number_integer()) ct.generation_eos_.push_back(id.get<int32_t>());
    }
  }
  return ct;
}

ChatTemplate::Rendered ChatTemplate::render_marked(const std::vector<ChatMessage>& msgs, bool add_generation_prompt,
                                                   bool enable_thinking) const {
  TS_CHECK(!msgs.empty(), "chat: no messages to format");
  nlohmann::ordered_json messages = nlohmann::ordered_json::array();
  for (const ChatMessage& m : msgs) {
    nlohmann::ordered_json j = {{"role", m.role}, {"content", m.content}};
    for (const auto& [key, value] : m.extra.items()) j[key] = value;
    messages.push_back(std::move(j));
  }
  jinja::Object vars;
  vars.emplace_back("messages", jinja::from_json(messages));  // strings in it are caller data
  vars.emplace_back("add_generation_prompt", jinja::Value::of(add_generation_prompt));
  vars.emplace_back("enable_thinking", jinja::Value::of(enable_thinking));
  vars.emplace_back("tools", jinja::Value::none());
  if (!bos_token_.empty()) vars.emplace_back("bos_token", jinja::Value::of_string(bos_token_));
  if (!eos_token_.empty()) vars.emplace_back("eos_token", jinja::Value::of_string(eos_token_));
  jinja::Text out;
  try {
    out = template_->render(vars);
  } catch (const ts::Error& e) {
    TS_FAIL(origin_, ": ", e.what());
  }
  return {std::move(out.bytes), std::move(out.from_input)};
}

std::string ChatTemplate::render(const std::vector<ChatMessage>& msgs, bool add_generation_prompt,
                                 bool enable_thinking) const {
  return render_marked(msgs, add_generation_prompt, enable_thinking).bytes;
}

std::vector<int32_t> ChatTemplate::encode_chat(const Tokenizer& tok, const std::vector<ChatMessage>& msgs,
                                               bool add_generation_prompt, bool enable_thinking) const {
  const Rendered r = render_marked(msgs, add_generation_prompt, enable_thinking);
  return tok.encode_marked(r.bytes, r.from_input);
}

std::vector<int32_t> ChatTemplate::stop_ids(const Tokenizer& tok) const {
  std::vector<int32_t> ids;
  auto add = [&](int32_t id) {
    if (id >= 0 && id < tok.vocab_size() && std::find(ids.begin(), ids.end(), id) == ids.end()) ids.push_back(id);
  };
  if (!eos_token_.empty()) add(tok.token_id(eos_token_));
  for (const char* marker : {"<|im_end|>", "<|eot_id|>", "<|eom_id|>", "<|end|>", "<end_of_turn>"})
    if (source_.find(marker) != std::string::npos) add(tok.token_id(marker));
  for (int32_t id : generation_eos_) add(id);
  TS_CHECK(!ids.empty(), origin_, ": no stop token found (no eos_token and no turn-end marker in the vocabulary)");
  return ids;
}

}  // namespace ts::tok
