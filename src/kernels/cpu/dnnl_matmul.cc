#include "kernels/cpu/dnnl_matmul.h"

#include "core/error.h"

namespace ts::kernels::cpu {

using dt = dnnl::memory::data_type;
using tag = dnnl::memory::format_tag;

namespace {
dnnl::matmul::primitive_desc make_pd(const dnnl::engine& engine, bool bf16, int rows, int out, int in) {
  const dt type = bf16 ? dt::bf16 : dt::f32;
  dnnl::memory::desc a({rows, in}, type, tag::ab);    // [rows, in]
  dnnl::memory::desc b({in, out}, type, tag::any);    // W^T [in, out], layout of oneDNN's choosing
  dnnl::memory::desc c({rows, out}, dt::f32, tag::ab);  // [rows, out]
  return dnnl::matmul::primitive_desc(dnnl::matmul::desc(a, b, c), engine);
}
}  // namespace

DnnlMatmul::DnnlMatmul(const void* w, bool bf16, int out_features, int in_features)
    : bf16_(bf16), out_features_(out_features), in_features_(in_features), engine_(dnnl::engine::kind::cpu, 0) {
  try {
    auto pd = make_pd(engine_, bf16, 1, out_features, in_features);
    impl_name_ = pd.impl_info_str();
    // Source W [out, in] row-major is W^T [in, out] with format "ba".
    dnnl::memory src({{in_features, out_features}, bf16 ? dt::bf16 : dt::f32, tag::ba}, engine_,
                     const_cast<void*>(w));
    weights_ = dnnl::memory(pd.weights_desc(), engine_);
    dnnl::stream stream(engine_);
    dnnl::reorder(src, weights_).execute(stream, src, weights_);
    stream.wait();
  } catch (const dnnl::error& e) {
    TS_FAIL("oneDNN matmul set-up failed for ", out_features, "x", in_features, ": ", e.what());
  }
}

const char* DnnlMatmul::impl_name() const { return impl_name_.c_str(); }

const dnnl::matmul& DnnlMatmul::primitive_for(int rows) const {
  std::lock_guard<std::mutex> lock(mutex_);
  auto& slot = by_rows_[rows];
  if (!slot) {
    auto pd = make_pd(engine_, bf16_, rows, out_features_, in_features_);
    TS_CHECK(pd.weights_desc() == weights_.get_desc(), "oneDNN picked a different weight layout for ", rows,
             " rows than for 1 row (", out_features_, "x", in_features_, ")");
    slot = std::make_unique<dnnl::matmul>(pd);
  }
  return *slot;
}

void DnnlMatmul::forward(const void* x, int rows, float* y) const {
  const dnnl::matmul& mm = primitive_for(rows);
  dnnl::memory a({{rows, in_features_}, bf16_ ? dt::bf16 : dt::f32, tag::ab}, engine_, const_cast<void*>(x));
  dnnl::memory c({{rows, out_features_}, dt::f32, tag::ab}, engine_, y);
  dnnl::stream stream(engine_);
  mm.execute(stream, {{DNNL_ARG_SRC, a}, {DNNL_ARG_WEIGHTS, weights_}, {DNNL_ARG_DST, c}});
  stream.wait();
}

}  // namespace ts::kernels::cpu
