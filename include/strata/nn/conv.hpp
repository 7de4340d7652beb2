#pragma once
// Image layers: Conv2D (a 2-D convolution, stride 1, padding `valid` or `same`) and
// MaxPool2D (non-overlapping windows), as Keras' Conv2D and MaxPooling2D compute them with
// channels last:
//
//   using Conv = strata::Conv2D<strata::ImageShape{28, 28, 1}, 32, 3>;          // 26 x 26 x 32
//   using Pool = strata::MaxPool2D<Conv::output_shape, 2>;                       // 13 x 13 x 32
//   strata::Sequential<Conv, strata::Relu, Pool, strata::Dense<Pool::output_shape.size(), 10>> model;
//
// A sample is one column of height x width x channels floats, the channel varying fastest
// ((h * width + w) * channels + c): a Fashion-MNIST image as it is read, and what Keras'
// Flatten gives, so no Flatten layer is needed between an image layer and a Dense.
//
// Conv2D is a matrix product (im2col): the batch's patches are gathered into a matrix with one
// column per output pixel, kernel x kernel x channels rows, so that y = W patches + b runs as
// one B::gemm over all of the batch's pixels, and so do both gradients. The kernel is the
// arena's column-major Filters x (kernel * kernel * channels) block, which is Keras' kernel of
// shape (kernel, kernel, channels, filters) row-major: checkpoints need no transpose.
//
// The gathering and scattering are host loops: both layers run on strata::Cpu only (on
// strata::Cuda, a compile-time message says so).

#include <algorithm>
#include <array>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "strata/core/backend.hpp"
#include "strata/core/intra_op.hpp"
#include "strata/nn/init.hpp"
#include "strata/nn/layer.hpp"
#include "strata/policy/slot.hpp"

namespace strata::nn {

// The shape of one image: height x width x channels, channels last.
struct ImageShape {
  int height = 1;
  int width = 1;
  int channels = 1;
  [[nodiscard]] constexpr int size() const { return height * width * channels; }
  [[nodiscard]] std::string text() const {
    return std::to_string(height) + "x" + std::to_string(width) + "x" + std::to_string(channels);
  }
};

// Keras' padding: `valid` computes only where the kernel lies inside the image (the output
// loses kernel - 1 rows and columns); `same` pads with zeros, (kernel - 1) / 2 before and
// the rest after, so that the output keeps the input's height and width.
enum class Padding : std::uint8_t { valid, same };

// The host loops of the image layers. Each splits the batch's samples over the intra-op team
// (each sample's values are computed by one thread, so the bits do not depend on the split).
template <class B>
struct ImageMath {
  static_assert(policy::dependent_false<B>,
                "strata::Conv2D and strata::MaxPool2D run on strata::Cpu only: the Cuda device has no image kernels yet");
};

template <>
struct ImageMath<CpuBackend> {
  // The patches of `samples` images of shape `in` (columns of x) for a `kernel` x `kernel`
  // window at each of the out_h x out_w output pixels, `pad` rows and columns of zeros before
  // the first: patches is (kernel * kernel * channels) x (out_h * out_w * samples), column
  // p + pixels * s holding pixel p of sample s, rows in (row of kernel, column, channel) order.
  static void gather(ImageShape in, int kernel, int pad, int out_h, int out_w, ConstMatrixView x, MatrixView patches) {
    int const c = in.channels;
    std::size_t const rows = std::size_t(kernel) * std::size_t(kernel) * std::size_t(c);
    std::size_t const pixels = std::size_t(out_h) * std::size_t(out_w);
    run_split_columns(int(rows * pixels), x.cols, [&](int first, int count) {
      for (int s = first; s < first + count; ++s) {
        float const* image = x.data + std::size_t(s) * std::size_t(x.rows);
        float* out = patches.data + std::size_t(s) * pixels * rows;
        for (int oh = 0; oh < out_h; ++oh)
          for (int ow = 0; ow < out_w; ++ow)
            for (int kh = 0; kh < kernel; ++kh) {
              int const ih = oh + kh - pad;
              for (int kw = 0; kw < kernel; ++kw, out += c) {
                int const iw = ow + kw - pad;
                if (ih < 0 || ih >= in.height || iw < 0 || iw >= in.width) {
                  std::fill_n(out, c, 0.0f);
                } else {
                  float const* from = image + (std::size_t(ih) * std::size_t(in.width) + std::size_t(iw)) * std::size_t(c);
                  std::copy_n(from, c, out);
                }
              }
            }
      }
    });
  }

  // The reverse of gather: dx = the sum, over every patch column, of its values put back
  // where gather took them (the padding's are dropped).
  static void scatter(ImageShape in, int kernel, int pad, int out_h, int out_w, ConstMatrixView patches, MatrixView dx) {
    int const c = in.channels;
    std::size_t const rows = std::size_t(kernel) * std::size_t(kernel) * std::size_t(c);
    std::size_t const pixels = std::size_t(out_h) * std::size_t(out_w);
    run_split_columns(int(rows * pixels), dx.cols, [&](int first, int count) {
      for (int s = first; s < first + count; ++s) {
        float* image = dx.data + std::size_t(s) * std::size_t(dx.rows);
        std::fill_n(image, dx.rows, 0.0f);
        float const* from = patches.data + std::size_t(s) * pixels * rows;
        for (int oh = 0; oh < out_h; ++oh)
          for (int ow = 0; ow < out_w; ++ow)
            for (int kh = 0; kh < kernel; ++kh) {
              int const ih = oh + kh - pad;
              for (int kw = 0; kw < kernel; ++kw, from += c) {
                int const iw = ow + kw - pad;
                if (ih < 0 || ih >= in.height || iw < 0 || iw >= in.width) continue;
                float* to = image + (std::size_t(ih) * std::size_t(in.width) + std::size_t(iw)) * std::size_t(c);
                for (int k = 0; k < c; ++k) to[k] += from[k];
              }
            }
      }
    });
  }

  // Where the largest value of the pool x pool window at output pixel (oh, ow), channel ch
  // lies in the image: the first of equal largest values in row order, or the first NaN
  // (which then propagates, as in Keras and PyTorch).
  static std::size_t window_max(ImageShape in, int pool, float const* image, int oh, int ow, int ch) {
    std::size_t best = std::size_t(-1);
    float best_value = 0.0f;
    for (int ph = 0; ph < pool; ++ph)
      for (int pw = 0; pw < pool; ++pw) {
        std::size_t const at =
            (std::size_t(oh * pool + ph) * std::size_t(in.width) + std::size_t(ow * pool + pw)) * std::size_t(in.channels) +
            std::size_t(ch);
        float const v = image[at];
        if (std::isnan(v)) return at;
        if (best == std::size_t(-1) || v > best_value) {
          best = at;
          best_value = v;
        }
      }
    return best;
  }

  static void max_pool(ImageShape in, int pool, ConstMatrixView x, MatrixView y) {
    int const out_h = in.height / pool, out_w = in.width / pool;
    run_split_columns(x.rows, x.cols, [&](int first, int count) {
      for (int s = first; s < first + count; ++s) {
        float const* image = x.data + std::size_t(s) * std::size_t(x.rows);
        float* out = y.data + std::size_t(s) * std::size_t(y.rows);
        for (int oh = 0; oh < out_h; ++oh)
          for (int ow = 0; ow < out_w; ++ow)
            for (int ch = 0; ch < in.channels; ++ch) *out++ = image[window_max(in, pool, image, oh, ow, ch)];
      }
    });
  }

  // dx: each output's dy at the place of its window's largest value, zero elsewhere. The
  // place is found again from x, as forward found it.
  static void max_pool_backward(ImageShape in, int pool, ConstMatrixView x, ConstMatrixView dy, MatrixView dx) {
    int const out_h = in.height / pool, out_w = in.width / pool;
    run_split_columns(x.rows, x.cols, [&](int first, int count) {
      for (int s = first; s < first + count; ++s) {
        float const* image = x.data + std::size_t(s) * std::size_t(x.rows);
        float const* d = dy.data + std::size_t(s) * std::size_t(dy.rows);
        float* out = dx.data + std::size_t(s) * std::size_t(dx.rows);
        std::fill_n(out, dx.rows, 0.0f);
        for (int oh = 0; oh < out_h; ++oh)
          for (int ow = 0; ow < out_w; ++ow)
            for (int ch = 0; ch < in.channels; ++ch) out[window_max(in, pool, image, oh, ow, ch)] += *d++;
      }
    });
  }
};

template <ImageShape In, int Filters, int Kernel, Padding Pad = Padding::valid, class Init = GlorotUniform>
struct Conv2D {
  static_assert(In.height >= 1 && In.width >= 1 && In.channels >= 1,
                "strata::Conv2D<ImageShape{height, width, channels}, ...>: every dimension must be at least 1");
  static_assert(Filters >= 1, "strata::Conv2D<shape, Filters, Kernel>: Filters must be at least 1");
  static_assert(Kernel >= 1, "strata::Conv2D<shape, Filters, Kernel>: Kernel must be at least 1");
  static_assert(Pad == Padding::same || (Kernel <= In.height && Kernel <= In.width),
                "strata::Conv2D: with Padding::valid the kernel must fit inside the image; use a smaller "
                "kernel or Padding::same");

  static constexpr int pad = Pad == Padding::same ? (Kernel - 1) / 2 : 0;
  static constexpr ImageShape output_shape{Pad == Padding::same ? In.height : In.height - Kernel + 1,
                                           Pad == Padding::same ? In.width : In.width - Kernel + 1, Filters};
  static constexpr int patch_rows = Kernel * Kernel * In.channels;
  static constexpr int pixels = output_shape.height * output_shape.width;
  static constexpr std::size_t kernel_size = std::size_t(patch_rows) * Filters;

  static constexpr int input_width = In.size();
  static constexpr int output_width(int) { return output_shape.size(); }
  static constexpr std::size_t parameter_count(int) { return kernel_size + Filters; }
  static std::string name() {
    return "Conv2D<" + In.text() + ", " + std::to_string(Filters) + ", " + std::to_string(Kernel) + "x" +
           std::to_string(Kernel) + (Pad == Padding::same ? ", same>" : ", valid>");
  }
  static constexpr char const* kind = "conv2d";
  static constexpr BackwardReads backward_reads{.input = true, .output = false};  // dW = dy patches(x)^T
  static std::vector<ParameterTensor> parameter_tensors(int) {
    using enum ParameterTensor::TransposedReads;
    return {{"kernel", {Kernel, Kernel, In.channels, Filters}, 0, /*read_by_products_only=*/true, for_input_gradient},
            {"bias", {Filters}, kernel_size}};
  }
  // The patches of the batch, gathered anew in backward rather than kept: they are
  // kernel x kernel times the input's size.
  static constexpr std::array<ScratchBuffer, 1> scratch(int, int columns) {
    return {{{patch_rows * pixels, columns, ScratchBuffer::Keep::temporary}}};
  }

  // Keras' fans for a convolution: the receptive field times the channels in and out.
  void initialize(float* params, int, Rng& rng) const {
    Init::fill(params, kernel_size, patch_rows, Kernel * Kernel * Filters, rng);
    std::fill_n(params + kernel_size, Filters, 0.0f);
  }

  template <Backend B>
  void forward(float const* params, ConstMatrixView x, MatrixView y, Scratch scratch, ForwardContext const&) const {
    MatrixView const patches = patches_of(scratch[0], x.cols);
    ImageMath<B>::gather(In, Kernel, pad, output_shape.height, output_shape.width, x, patches);
    MatrixView const out{y.data, Filters, pixels * y.cols};  // one column per output pixel
    B::gemm(Transpose::no, Transpose::no, 1.0f, weights(params), patches, 0.0f, out);
    B::add_bias(out, params + kernel_size);
  }

  template <Backend B>
  void backward(float const* params, float* grads, ConstMatrixView x, ConstMatrixView, Scratch scratch,
                ConstMatrixView dy, MatrixView dx, bool accumulate) const {
    float const beta = accumulate ? 1.0f : 0.0f;
    MatrixView const patches = patches_of(scratch[0], x.cols);
    ConstMatrixView const d{dy.data, Filters, pixels * dy.cols};
    ImageMath<B>::gather(In, Kernel, pad, output_shape.height, output_shape.width, x, patches);
    B::gemm(Transpose::no, Transpose::yes, 1.0f, d, patches, beta, MatrixView{grads, Filters, patch_rows});
    B::row_sums(d, beta, grads + kernel_size);
    if (dx.data == nullptr) return;
    B::gemm(Transpose::yes, Transpose::no, 1.0f, weights(params), d, 0.0f, patches);  // the patches' gradient
    ImageMath<B>::scatter(In, Kernel, pad, output_shape.height, output_shape.width, patches, dx);
  }

 private:
  static ConstMatrixView weights(float const* params) { return {params, Filters, patch_rows}; }
  static MatrixView patches_of(MatrixView buffer, int samples) { return {buffer.data, patch_rows, pixels * samples}; }
};

template <ImageShape In, int Pool = 2>
struct MaxPool2D {
  static_assert(Pool >= 1, "strata::MaxPool2D<shape, Pool>: Pool must be at least 1");
  static_assert(Pool <= In.height && Pool <= In.width,
                "strata::MaxPool2D<shape, Pool>: the window must fit inside the image; use a smaller Pool");

  // Keras' `valid`: rows and columns past the last whole window are dropped.
  static constexpr ImageShape output_shape{In.height / Pool, In.width / Pool, In.channels};
  static constexpr int input_width = In.size();
  static constexpr int output_width(int) { return output_shape.size(); }
  static constexpr std::size_t parameter_count(int) { return 0; }
  static std::string name() { return "MaxPool2D<" + In.text() + ", " + std::to_string(Pool) + ">"; }
  static constexpr BackwardReads backward_reads{.input = true, .output = false};  // the largest's place, from x
  static constexpr bool selects_values = true;                                   // y is one of x's values
  void initialize(float*, int, Rng&) const {}

  template <Backend B>
  void forward(float const*, ConstMatrixView x, MatrixView y, Scratch, ForwardContext const&) const {
    ImageMath<B>::max_pool(In, Pool, x, y);
  }
  template <Backend B>
  void backward(float const*, float*, ConstMatrixView x, ConstMatrixView, Scratch, ConstMatrixView dy, MatrixView dx,
                bool) const {
    if (dx.data != nullptr) ImageMath<B>::max_pool_backward(In, Pool, x, dy, dx);
  }
};

}  // namespace strata::nn
