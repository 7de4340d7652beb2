#pragma once
// Bert's own device steps on Cuda: the sequence lengths and the padding's zeros (kernels of
// the Embedding module, which defines the padding), and the pooler's first token (strided
// copies). Included by strata/cuda.hpp.

#include <concepts>
#include <cstddef>

#include "strata/cuda/backend.hpp"
#include "strata/nn/bert.hpp"
#include "strata/nn/embedding_cuda.hpp"

namespace strata::nn {

template <class B>
  requires std::same_as<B, CudaBackend>
struct BertPadding<B> {
  static void lengths(ConstMatrixView ids, MatrixView lengths, int pad_id) {
    CudaBackend::ctx().launch(embedding_kernels, 2, ids.cols, ids.data, lengths.data, ids.rows, (long long)ids.cols,
                              pad_id);
  }
  static void zero_padding(ConstMatrixView x, MatrixView out, float const* lengths, int max_length) {
    CudaBackend::ctx().launch(embedding_kernels, 3, std::int64_t(x.size()), x.data, out.data, lengths, x.rows,
                              max_length, (long long)x.size());
  }
};

template <class B>
  requires std::same_as<B, CudaBackend>
struct FirstTokenMath<B> {
  // Column s * tokens of x to column s of y: one strided 2-D copy.
  static void forward(ConstMatrixView x, int tokens, MatrixView y) {
    std::size_t const column = std::size_t(x.rows) * sizeof(float);
    cuda::check(cudaMemcpy2DAsync(y.data, column, x.data, column * std::size_t(tokens), column, std::size_t(y.cols),
                                  cudaMemcpyDeviceToDevice, CudaBackend::ctx().stream()),
                "cudaMemcpy2DAsync");
  }
  static void backward(ConstMatrixView dy, int tokens, MatrixView dx) {
    auto const stream = CudaBackend::ctx().stream();
    cuda::check(cudaMemsetAsync(dx.data, 0, dx.size() * sizeof(float), stream), "cudaMemsetAsync");
    std::size_t const column = std::size_t(dy.rows) * sizeof(float);
    cuda::check(cudaMemcpy2DAsync(dx.data, column * std::size_t(tokens), dy.data, column, column, std::size_t(dy.cols),
                                  cudaMemcpyDeviceToDevice, stream),
                "cudaMemcpy2DAsync");
  }
};

}  // namespace strata::nn
