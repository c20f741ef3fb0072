// The thread-safe wrapper: submissions from several threads all complete with their one-by-one greedy output;
// cancel frees the slot; drain finishes what runs and refuses new work; queue-full is a clean rejection; the
// destructor ends whatever is left with a final event.
#include <gtest/gtest.h>

#include <condition_variable>
#include <future>
#include <mutex>
#include <thread>

#include "engine/async_engine.h"
#include "engine/tiny_pair.h"

namespace ts {
namespace {

using testing::greedy_reference;
using testing::make_pair;
using testing::Pair;

// Collects one request's events (they arrive on the loop thread) and lets a test thread wait for the end.
struct Waiter {
  std::mutex mu;
  std::condition_variable cv;
  std::vector<int32_t> ids;
  FinishReason finish = FinishReason::None;
  int events = 0;

  EventCallback callback() {
    return [this](const RequestEvent& e) {
      std::lock_guard<std::mutex> lock(mu);
      ++events;
      ids.insert(ids.end(), e.tokens.begin(), e.tokens.end());
      if (e.finish != FinishReason::None) {
        finish = e.finish;
        cv.notify_all();
      }
    };
  }
  FinishReason wait() {
    std::unique_lock<std::mutex> lock(mu);
    cv.wait(lock, [&] { return finish != FinishReason::None; });
    return finish;
  }
};

TEST(AsyncEngine, ConcurrentSubmittersAllGetTheirGreedyOutput) {
  Pair pair = make_pair(20, 32, 2, 5, DType::F32, 61);
  EngineConfig config;
  config.max_batch = 3;
  AsyncEngine engine(*pair.target, pair.drafter.get(), config);
  const int n = 8;
  std::vector<Waiter> waiters(n);
  std::vector<std::vector<int32_t>> prompts(n);
  std::vector<std::thread> threads;
  for (int i = 0; i < n; ++i) {
    for (int j = 0; j < 2 + i; ++j) prompts[i].push_back((i * 3 + j * 5) % 19);
    threads.emplace_back([&, i] {
      RequestOptions o;
      o.max_new_tokens = 16;
      o.mode = i % 3 == 0 ? DecodeMode::None : i % 3 == 1 ? DecodeMode::Chain : DecodeMode::Tree;
      SubmitResult r = engine.submit({prompts[i], o}, waiters[i].callback());
      EXPECT_TRUE(r.ok()) << r.message;
    });
  }
  for (auto& t : threads) t.join();
  for (int i = 0; i < n; ++i) {
    EXPECT_EQ(waiters[i].wait(), FinishReason::Length);
    EXPECT_EQ(waiters[i].ids, greedy_reference(*pair.target, prompts[i], 16)) << i;
  }
  engine.drain();
  const EngineMetrics m = engine.metrics();
  EXPECT_EQ(m.num_requests_running + m.num_requests_waiting, 0);
  EXPECT_EQ(m.generation_tokens, 16 * n);
  EXPECT_EQ(m.time_to_first_token.count, n);
  EXPECT_EQ(m.inter_token_latency.count, 15 * n);
  EXPECT_EQ(m.kv_cache_usage_perc, 0);
}

TEST(AsyncEngine, CancelDrainAndQueueFull) {
  Pair pair = make_pair(20, 32, 1, 4, DType::F32, 67);
  EngineConfig config;
  config.max_batch = 1;
  config.max_queue = 1;
  AsyncEngine engine(*pair.target, pair.drafter.get(), config);
  // The first request's first event blocks the loop thread until released: the queue state is then deterministic.
  std::promise<void> release;
  std::shared_future<void> released = release.get_future().share();
  std::promise<void> started;
  Waiter first;
  auto first_cb = first.callback();
  bool once = false;
  RequestOptions longer;
  longer.max_new_tokens = 200;
  SubmitResult r1 = engine.submit({{1, 2, 3}, longer}, [&, first_cb](const RequestEvent& e) {
    first_cb(e);
    if (!once) {
      once = true;
      started.set_value();
      released.wait();
    }
  });
  ASSERT_TRUE(r1.ok());
  started.get_future().wait();  // request 1 runs, the loop is inside its callback
  Waiter second, third;
  RequestOptions short_opts;
  short_opts.max_new_tokens = 5;
  SubmitResult r2 = engine.submit({{4, 5}, short_opts}, second.callback());
  EXPECT_TRUE(r2.ok()) << r2.message;
  SubmitResult r3 = engine.submit({{6}, short_opts}, third.callback());
  EXPECT_EQ(r3.reason, RejectReason::QueueFull) << r3.message;
  EXPECT_FALSE(r3.message.empty());
  SubmitResult bad = engine.submit({{999}, short_opts}, nullptr);
  EXPECT_EQ(bad.reason, RejectReason::BadParams);
  engine.cancel(r1.id);  // the client of request 1 goes away
  release.set_value();
  EXPECT_EQ(first.wait(), FinishReason::Cancelled);
  EXPECT_LT(first.ids.size(), 200u);
  EXPECT_EQ(second.wait(), FinishReason::Length);
  EXPECT_EQ(second.ids, greedy_reference(*pair.target, {4, 5}, 5));
  // Drain: what runs finishes, new work is refused.
  Waiter fourth;
  SubmitResult r4 = engine.submit({{7, 8}, short_opts}, fourth.callback());
  ASSERT_TRUE(r4.ok());
  engine.drain();
  EXPECT_EQ(fourth.finish, FinishReason::Length);
  EXPECT_EQ(fourth.ids.size(), 5u);
  EXPECT_TRUE(engine.draining());
  EXPECT_EQ(engine.submit({{1}, short_opts}, nullptr).reason, RejectReason::Draining);
  const EngineMetrics m = engine.metrics();
  EXPECT_EQ(m.requests_finished[int(FinishReason::Cancelled)], 1);
  EXPECT_EQ(m.kv_reserved_perc, 0);
}

TEST(AsyncEngine, DestructorEndsEveryRequestWithAFinalEvent) {
  Pair pair = make_pair(20, 32, 1, 4, DType::F32, 71);
  std::vector<Waiter> waiters(5);
  {
    EngineConfig config;
    config.max_batch = 2;
    AsyncEngine engine(*pair.target, pair.drafter.get(), config);
    RequestOptions o;
    o.max_new_tokens = 3000;
    for (auto& w : waiters) ASSERT_TRUE(engine.submit({{1, 2}, o}, w.callback()).ok());
  }
  for (auto& w : waiters) {
    EXPECT_EQ(w.finish, FinishReason::Cancelled);
    EXPECT_GE(w.events, 1);
  }
}

}  // namespace
}  // namespace ts
