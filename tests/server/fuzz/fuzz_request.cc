// libFuzzer target for the OpenAI request parser (built and run by tests/io/fuzz/run_fuzz.sh ... request, not by
// the gtest glob).
//
// On any body, parse_completion_request() (completions or chat, chosen by the first byte) must either throw
// ApiError (a 4xx the server sends) or return a request that prepare_request() either refuses with ApiError or
// turns into an engine Request of token ids inside the vocabulary, with a max_new_tokens that fits the context. Anything else (a crash,
// another exception, a stack overflow on deep nesting, a sanitizer report, a leak) is a bug. The shipped model's
// tokenizer and chat template render the prompts.
#include <cstdint>
#include <string>

#include "server/api_error.h"
#include "server/openai_request.h"

namespace {

void check(bool ok) {
  if (!ok) __builtin_trap();  // a broken invariant: let libFuzzer record the input
}

struct Model {
  ts::tok::Tokenizer tokenizer;
  ts::tok::ChatTemplate chat;
  ts::server::ServedModel served;
};

Model* model = nullptr;

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  const std::string dir = std::string(TS_SOURCE_DIR) + "/models/treespark-target";
  model = new Model{ts::tok::Tokenizer::from_file(dir + "/tokenizer.json"), ts::tok::ChatTemplate::from_model_dir(dir), {}};
  model->served.name = "treespark-target";
  model->served.tokenizer = &model->tokenizer;
  model->served.chat_template = &model->chat;
  model->served.stop_ids = model->chat.stop_ids(model->tokenizer);
  model->served.max_context = 1024;
  model->served.vocab_size = model->tokenizer.vocab_size();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const bool chat = data[0] & 1;
  const std::string body(reinterpret_cast<const char*>(data) + 1, size - 1);
  ts::server::CompletionRequest request;
  try {
    request = ts::server::parse_completion_request(body, chat);
  } catch (const ts::server::ApiError& e) {
    check(e.status >= 400 && e.status < 500);
    return 0;
  }
  check(request.chat == chat);
  try {
    const ts::Request prepared = ts::server::prepare_request(request, model->served);
    check(!prepared.prompt.empty());
    for (int32_t id : prepared.prompt) check(id >= 0 && id < model->served.vocab_size);
    const int max_tokens = prepared.options.max_new_tokens;
    check(max_tokens >= 1 && int(prepared.prompt.size()) + max_tokens <= model->served.max_context);
  } catch (const ts::server::ApiError& e) {
    check(e.status >= 400 && e.status < 500);
  }
  return 0;
}
