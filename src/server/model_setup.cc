#include "server/model_setup.h"

#include <algorithm>

#include "core/error.h"

namespace ts::server {

ServedModel describe_model(const ModelBundle& bundle, const std::string& name, int max_context) {
  TS_CHECK(bundle.tokenizer, "serving needs a tokenizer.json in ", bundle.model_dir);
  ServedModel m;
  m.name = name;
  m.tokenizer = bundle.tokenizer.get();
  m.chat_template = bundle.chat_template.get();
  m.stop_ids = bundle.stop_ids();
  m.max_context = max_context;
  m.vocab_size = bundle.target->config().vocab_size;
  return m;
}

std::vector<int> batch_ladder(int max_batch) {
  std::vector<int> b;
  for (int x = 1; x < max_batch; x *= 2) b.push_back(x);
  b.push_back(std::max(1, max_batch));
  return b;
}

}  // namespace ts::server
