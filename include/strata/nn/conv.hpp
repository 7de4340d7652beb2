#pragma once
// Image layers, as Keras computes them with channels last: Conv2D (a 2-D convolution with a
// stride, a dilation and padding `valid` or `same`), MaxPool2D and AveragePooling2D (windows
// with a stride, `valid` or `same`) and GlobalAveragePooling2D:
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
// The gathering, scattering and pooling are host loops: the image layers run on strata::Cpu
// only (on strata::Cuda, a compile-time message says so).

#include <algorithm>
#include <array>
#include <cmath>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <cstring>
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

// Keras' padding: `valid` computes only where the kernel lies inside the image (with stride
// 1 the output loses kernel - 1 rows and columns); `same` pads with zeros, half before
// (rounded down) and the rest after, so that the output has ceil(size / stride) rows and
// columns: with stride 1, the input's height and width.
enum class Padding : std::uint8_t { valid, same };

// One dimension of a convolution's or a pooling's output under Keras' rules, and the rows
// padded before it; `kernel` is the window's extent (a dilated kernel's: (kernel - 1) *
// dilation + 1).
struct ConvExtent {
  int size;    // output rows (or columns)
  int before;  // rows of padding before the first
};
constexpr ConvExtent conv_extent(int in, int kernel, int stride, Padding padding) {
  if (padding == Padding::valid) return {(in - kernel) / stride + 1, 0};
  int const out = (in + stride - 1) / stride;
  int const total = std::max((out - 1) * stride + kernel - in, 0);
  return {out, total / 2};
}

// Where a convolution's windows lie: kernel x kernel taps `dilation` pixels apart, windows
// `stride` pixels apart, the first one `top` rows above the image and `left` columns left of
// it (the padding before).
struct ConvWindows {
  int kernel = 1, stride = 1, top = 0, left = 0, dilation = 1;
};

// Where a pooling layer's windows lie: height x width pixels, `stride` pixels apart, the
// first one `top` rows above the image and `left` columns left of it (`same`'s padding
// before), `rows` x `columns` of them. A window's pixels in the padding are not part of it:
// the max and the mean are over the pixels inside the image, as in Keras.
struct PoolWindows {
  int height = 1, width = 1, stride = 1;
  int top = 0, left = 0;
  int rows = 1, columns = 1;
  // Whether every pixel of `in` lies in exactly one window, and every window inside `in`.
  [[nodiscard]] constexpr bool tiles(ImageShape in) const {
    return top == 0 && left == 0 && (rows == 1 || stride == height) && (columns == 1 || stride == width) &&
           (rows - 1) * stride + height == in.height && (columns - 1) * stride + width == in.width;
  }
};
// Pool x Pool windows over `in`, `stride` apart, with Keras' `valid` or `same` padding.
constexpr PoolWindows pool_windows(ImageShape in, int pool, int stride, Padding padding) {
  ConvExtent const r = conv_extent(in.height, pool, stride, padding), c = conv_extent(in.width, pool, stride, padding);
  return {pool, pool, stride, r.before, c.before, r.size, c.size};
}

// One pooling window's pixels inside the image: rows [top, bottom), columns [left, right).
struct PoolWindow {
  int top, bottom, left, right;
  [[nodiscard]] int pixels() const { return (bottom - top) * (right - left); }
};

// The host loops of the image layers. Each splits the batch's samples over the intra-op team
// (each sample's values are computed by one thread, so the bits do not depend on the split).
template <class B>
struct ImageMath {
  static_assert(policy::dependent_false<B>,
                "strata::Conv2D and the pooling layers run on strata::Cpu only: the Cuda device has no image kernels yet");
};

template <class B>
  requires std::same_as<B, CpuBackend>
struct ImageMath<B> {
  // The patches of the images of shape `In` (columns of x) for each of W's windows (one per
  // output pixel): patches is (Kernel * Kernel * channels) x (pixels * samples), column
  // p + pixels * s holding pixel p of sample s, rows in (row of kernel, column, channel)
  // order, zero where a window lies in the padding. Undilated, a kernel row's Kernel *
  // channels values lie side by side in the image too, so a row inside the image is copied
  // as one run of a size known at compile time; dilated, each tap's channels are a run.
  template <ImageShape In, ConvWindows W, ImageShape Out>
  static void gather(ConstMatrixView x, MatrixView patches) {
    constexpr int Kernel = W.kernel, c = In.channels, run = Kernel * c;
    for_each_kernel_row<In, W, Out>(x.cols, [&](int s, std::size_t at, std::ptrdiff_t pixel, int lo, int hi) {
      float* out = patches.data + at;
      float const* image = x.data + std::size_t(s) * std::size_t(x.rows);  // + pixel only where inside
      if (W.dilation == 1 && lo == 0 && hi == Kernel) {
        std::memcpy(out, image + pixel, sizeof(float) * run);
        return;
      }
      if (lo != 0 || hi != Kernel) std::fill_n(out, run, 0.0f);
      if constexpr (W.dilation == 1) {
        if (lo < hi) std::copy_n(image + (pixel + lo * c), (hi - lo) * c, out + lo * c);
      } else {
        for (int kw = lo; kw < hi; ++kw) std::copy_n(image + (pixel + kw * W.dilation * c), c, out + kw * c);
      }
    });
  }

  // The reverse of gather: dx = the sum, over every patch column, of its values put back
  // where gather took them (the padding's are dropped).
  template <ImageShape In, ConvWindows W, ImageShape Out>
  static void scatter(ConstMatrixView patches, MatrixView dx) {
    constexpr int Kernel = W.kernel, c = In.channels;
    run_split_columns(dx.rows, dx.cols, [&](int first, int count) {
      std::fill_n(dx.data + std::size_t(first) * std::size_t(dx.rows), std::size_t(count) * std::size_t(dx.rows), 0.0f);
    });
    for_each_kernel_row<In, W, Out>(dx.cols, [&](int s, std::size_t at, std::ptrdiff_t pixel, int lo, int hi) {
      float const* from = patches.data + at;
      float* image = dx.data + std::size_t(s) * std::size_t(dx.rows);
      if (W.dilation == 1 && lo == 0 && hi == Kernel) {
        for (int k = 0; k < Kernel * c; ++k) image[pixel + k] += from[k];
        return;
      }
      for (int kw = lo; kw < hi; ++kw) {
        float* to = image + (pixel + kw * W.dilation * c);
        for (int k = 0; k < c; ++k) to[k] += from[kw * c + k];
      }
    });
  }

  // The walk gather and scatter share, over the samples [0, samples) split over the intra-op
  // team: row(s, at, pixel, lo, hi) for every kernel row of every patch of sample s, `at`
  // the row's first value in patches, `pixel` where the row's first tap lies in the image
  // (an offset into sample s's column, outside it where the row starts in the padding), and
  // [lo, hi) the kernel columns (taps, `dilation` pixels apart) that lie inside the image
  // (none for a row in the padding).
  template <ImageShape In, ConvWindows W, ImageShape Out, class Row>
  static void for_each_kernel_row(int samples, Row&& row) {
    constexpr int Kernel = W.kernel, c = In.channels, run = Kernel * c, d = W.dilation;
    constexpr std::size_t rows = std::size_t(Kernel) * run, pixels = std::size_t(Out.height) * Out.width;
    // The first tap at or after pixel `offset` from the row's first: ceil(offset / d), 0 before it.
    constexpr auto first_tap = [](int offset) {
      return std::min(offset <= 0 ? 0 : (offset + W.dilation - 1) / W.dilation, W.kernel);
    };
    run_split_columns(int(rows * pixels), samples, [&](int first, int count) {
      for (int s = first; s < first + count; ++s) {
        std::size_t at = std::size_t(s) * pixels * rows;
        for (int oh = 0; oh < Out.height; ++oh)
          for (int ow = 0; ow < Out.width; ++ow)
            for (int kh = 0; kh < Kernel; ++kh, at += run) {
              int const ih = oh * W.stride + kh * d - W.top, iw = ow * W.stride - W.left;
              bool const inside = ih >= 0 && ih < In.height;
              int const lo = inside ? first_tap(-iw) : 0;
              int const hi = inside ? first_tap(In.width - iw) : 0;
              row(s, at, (std::ptrdiff_t(ih) * In.width + iw) * c, lo, hi);
            }
      }
    });
  }

  template <ImageShape In, PoolWindows W>
  static void max_pool(ConstMatrixView x, MatrixView y) {
    constexpr int c = In.channels;
    for_each_window<In, W>(x.cols, [&](int s, int p, PoolWindow window) {
      Maxima<c> const m = window_maxima<In, W>(x.data + std::size_t(s) * std::size_t(x.rows), window);
      std::copy_n(m.best.begin(), c, y.data + std::size_t(s) * std::size_t(y.rows) + std::size_t(p) * c);
    });
  }

  // dx: each output's dy at the place of its window's largest value, zero elsewhere. The
  // place is found again from x, as forward found it. Where the windows tile the image
  // (stride = window, nothing dropped or padded), each window's pixels are written whole,
  // channels side by side; otherwise a sample's dx starts at zero and each dy is added at
  // its place (a pixel may be the largest of several overlapping windows).
  template <ImageShape In, PoolWindows W>
  static void max_pool_backward(ConstMatrixView x, ConstMatrixView dy, MatrixView dx) {
    constexpr int c = In.channels;
    for_each_window<In, W>(x.cols, [&](int s, int p, PoolWindow window) {
      float* out = dx.data + std::size_t(s) * std::size_t(dx.rows);
      if (!W.tiles(In) && p == 0) std::fill_n(out, dx.rows, 0.0f);
      Maxima<c> const m = window_maxima<In, W>(x.data + std::size_t(s) * std::size_t(x.rows), window);
      float const* from = dy.data + std::size_t(s) * std::size_t(dy.rows) + std::size_t(p) * c;
      if constexpr (W.tiles(In)) {  // every window whole: its size known at compile time
        int const corner = window.top * In.width + window.left;
        for (int ph = 0; ph < W.height; ++ph)
          for (int pw = 0; pw < W.width; ++pw) {
            int const pixel = corner + ph * In.width + pw;
            float* to = out + std::size_t(pixel) * c;
            for (int k = 0; k < c; ++k) to[k] = m.at[k] == pixel ? from[k] : 0.0f;
          }
      } else {
        for (int k = 0; k < c; ++k) out[std::size_t(m.at[k]) * c + std::size_t(k)] += from[k];
      }
    });
  }

  // Each output pixel's mean per channel over its window's pixels inside the image: summed
  // in row order, then times 1 / their number, channels side by side.
  template <ImageShape In, PoolWindows W>
  static void average_pool(ConstMatrixView x, MatrixView y) {
    constexpr int c = In.channels;
    for_each_window<In, W>(x.cols, [&](int s, int p, PoolWindow window) {
      float const* image = x.data + std::size_t(s) * std::size_t(x.rows);
      float* out = y.data + std::size_t(s) * std::size_t(y.rows) + std::size_t(p) * c;
      std::fill_n(out, c, 0.0f);
      for (int h = window.top; h < window.bottom; ++h)
        for (int w = window.left; w < window.right; ++w) {
          float const* v = image + std::size_t(h * In.width + w) * c;
          for (int k = 0; k < c; ++k) out[k] += v[k];
        }
      float const scale = 1.0f / float(window.pixels());
      for (int k = 0; k < c; ++k) out[k] *= scale;
    });
  }

  // dx: each output's dy / (its window's pixels inside the image) at each of them, added
  // up where windows overlap; zero where no window lies.
  template <ImageShape In, PoolWindows W>
  static void average_pool_backward(ConstMatrixView dy, MatrixView dx) {
    constexpr int c = In.channels;
    for_each_window<In, W>(dx.cols, [&](int s, int p, PoolWindow window) {
      float* image = dx.data + std::size_t(s) * std::size_t(dx.rows);
      if (!W.tiles(In) && p == 0) std::fill_n(image, dx.rows, 0.0f);
      float const* d = dy.data + std::size_t(s) * std::size_t(dy.rows) + std::size_t(p) * c;
      float const scale = 1.0f / float(window.pixels());
      for (int h = window.top; h < window.bottom; ++h)
        for (int w = window.left; w < window.right; ++w) {
          float* to = image + std::size_t(h * In.width + w) * c;
          if constexpr (W.tiles(In))
            for (int k = 0; k < c; ++k) to[k] = d[k] * scale;
          else
            for (int k = 0; k < c; ++k) to[k] += d[k] * scale;
        }
    });
  }

 private:
  // visit(s, p, window) for every window p of every sample s in [0, samples), `window` its
  // pixels inside the image (never none: `same` pads less than a window on either side); the
  // samples split over the intra-op team. Each sample's windows are visited by one thread,
  // in order from p = 0 (where a backward that adds up starts its sample's dx at zero), so
  // sums over overlapping windows do not depend on the split.
  template <ImageShape In, PoolWindows W, class Visit>
  static void for_each_window(int samples, Visit&& visit) {
    run_split_columns(In.size(), samples, [&](int first, int count) {
      for (int s = first; s < first + count; ++s) {
        int p = 0;
        for (int oh = 0; oh < W.rows; ++oh) {
          int const top = oh * W.stride - W.top;
          for (int ow = 0; ow < W.columns; ++ow, ++p) {
            int const left = ow * W.stride - W.left;
            visit(s, p,
                  PoolWindow{std::max(top, 0), std::min(top + W.height, In.height), std::max(left, 0),
                             std::min(left + W.width, In.width)});
          }
        }
      }
    });
  }

  // A window's largest value per channel and where it lies (channel k's at at[k] * channels + k).
  template <int Channels>
  struct Maxima {
    std::array<float, Channels> best;
    std::array<int, Channels> at;
  };
  // The maxima of `window` of `image`: the first of equal largest values in row order, or
  // the first NaN (which then propagates, as in Keras and PyTorch). The window's pixels are
  // visited in turn, each compared with all channels at once (they lie side by side).
  template <ImageShape In, PoolWindows W>
  static Maxima<In.channels> window_maxima(float const* image, PoolWindow window) {
    constexpr int c = In.channels;
    int const corner = window.top * In.width + window.left;
    // Where the windows tile the image, every window is whole: its size known at compile time.
    int const height = W.tiles(In) ? W.height : window.bottom - window.top;
    int const width = W.tiles(In) ? W.width : window.right - window.left;
    Maxima<c> m;
    std::copy_n(image + std::size_t(corner) * c, c, m.best.begin());
    m.at.fill(corner);
    for (int ph = 0; ph < height; ++ph)
      for (int pw = ph == 0 ? 1 : 0; pw < width; ++pw) {
        int const pixel = corner + ph * In.width + pw;
        float const* v = image + std::size_t(pixel) * c;
        for (int k = 0; k < c; ++k) {
          bool const take = v[k] > m.best[k] || (std::isnan(v[k]) && !std::isnan(m.best[k]));
          m.best[k] = take ? v[k] : m.best[k];
          m.at[k] = take ? pixel : m.at[k];
        }
      }
    return m;
  }
};

template <ImageShape In, int Filters, int Kernel, Padding Pad = Padding::valid, int Stride = 1, int Dilation = 1,
          class Init = GlorotUniform>
struct Conv2D {
  static_assert(In.height >= 1 && In.width >= 1 && In.channels >= 1,
                "strata::Conv2D<ImageShape{height, width, channels}, ...>: every dimension must be at least 1");
  static_assert(Filters >= 1, "strata::Conv2D<shape, Filters, Kernel>: Filters must be at least 1");
  static_assert(Kernel >= 1, "strata::Conv2D<shape, Filters, Kernel>: Kernel must be at least 1");
  static_assert(Stride >= 1, "strata::Conv2D<shape, Filters, Kernel, Padding, Stride>: Stride must be at least 1");
  static_assert(Dilation >= 1,
                "strata::Conv2D<shape, Filters, Kernel, Padding, Stride, Dilation>: Dilation must be at least 1 "
                "(1: taps side by side)");
  // A dilated kernel's taps span (Kernel - 1) * Dilation + 1 pixels.
  static constexpr int extent = (Kernel - 1) * Dilation + 1;
  static_assert(Pad == Padding::same || (extent <= In.height && extent <= In.width),
                "strata::Conv2D: with Padding::valid the kernel (dilated: (Kernel - 1) * Dilation + 1 pixels) must "
                "fit inside the image; use a smaller kernel or dilation, or Padding::same");

  static constexpr ConvExtent rows = conv_extent(In.height, extent, Stride, Pad);
  static constexpr ConvExtent columns = conv_extent(In.width, extent, Stride, Pad);
  static constexpr ConvWindows windows{Kernel, Stride, rows.before, columns.before, Dilation};
  static constexpr ImageShape output_shape{rows.size, columns.size, Filters};
  static constexpr int patch_rows = Kernel * Kernel * In.channels;
  static constexpr int pixels = output_shape.height * output_shape.width;
  static constexpr std::size_t kernel_size = std::size_t(patch_rows) * Filters;

  static constexpr int input_width = In.size();
  static constexpr int output_width(int) { return output_shape.size(); }
  static constexpr std::size_t parameter_count(int) { return kernel_size + Filters; }
  static std::string name() {
    return "Conv2D<" + In.text() + ", " + std::to_string(Filters) + ", " + std::to_string(Kernel) + "x" +
           std::to_string(Kernel) + (Stride != 1 ? ", stride " + std::to_string(Stride) : std::string()) +
           (Dilation != 1 ? ", dilation " + std::to_string(Dilation) : std::string()) +
           (Pad == Padding::same ? ", same>" : ", valid>");
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
    ImageMath<B>::template gather<In, windows, output_shape>(x, patches);
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
    ImageMath<B>::template gather<In, windows, output_shape>(x, patches);
    B::gemm(Transpose::no, Transpose::yes, 1.0f, d, patches, beta, MatrixView{grads, Filters, patch_rows});
    B::row_sums(d, beta, grads + kernel_size);
    if (dx.data == nullptr) return;
    B::gemm(Transpose::yes, Transpose::no, 1.0f, weights(params), d, 0.0f, patches);  // the patches' gradient
    ImageMath<B>::template scatter<In, windows, output_shape>(patches, dx);
  }

 private:
  static ConstMatrixView weights(float const* params) { return {params, Filters, patch_rows}; }
  static MatrixView patches_of(MatrixView buffer, int samples) { return {buffer.data, patch_rows, pixels * samples}; }
};

// The checks and shapes both pooling layers share: Pool x Pool windows, Stride pixels apart
// (Pool by default: windows side by side), Keras' `valid` (as many as fit whole) or `same`
// (ceil(size / Stride) of them, the padding split as a convolution's, the max and the mean
// over the pixels inside the image).
template <ImageShape In, int Pool, int Stride, Padding Pad>
struct Pooling {
  static_assert(Pool >= 1, "strata::MaxPool2D and strata::AveragePooling2D<shape, Pool, Stride>: Pool must be at least 1");
  static_assert(Stride >= 1,
                "strata::MaxPool2D and strata::AveragePooling2D<shape, Pool, Stride>: Stride must be at least 1");
  static_assert(Pad == Padding::same || (Pool <= In.height && Pool <= In.width),
                "strata::MaxPool2D and strata::AveragePooling2D<shape, Pool, Stride>: with Padding::valid the window "
                "must fit inside the image; use a smaller Pool or Padding::same");

  static constexpr PoolWindows windows = pool_windows(In, Pool, Stride, Pad);
  static constexpr ImageShape output_shape{windows.rows, windows.columns, In.channels};
  static constexpr int input_width = In.size();
  static constexpr int output_width(int) { return output_shape.size(); }
  static constexpr std::size_t parameter_count(int) { return 0; }
  static std::string text() {
    return In.text() + ", " + std::to_string(Pool) + (Stride != Pool ? ", stride " + std::to_string(Stride) : "") +
           (Pad == Padding::same ? ", same>" : ">");
  }
  void initialize(float*, int, Rng&) const {}
};

// The largest value of each Pool x Pool window, per channel (Keras' MaxPooling2D(Pool,
// strides=Stride, padding=Pad)). Windows may overlap (Stride < Pool); the gradient goes to
// the first largest value of each window, summed where windows share it.
template <ImageShape In, int Pool = 2, int Stride = Pool, Padding Pad = Padding::valid>
struct MaxPool2D : Pooling<In, Pool, Stride, Pad> {
  using Pooling<In, Pool, Stride, Pad>::windows;
  static std::string name() { return "MaxPool2D<" + Pooling<In, Pool, Stride, Pad>::text(); }
  static constexpr BackwardReads backward_reads{.input = true, .output = false};  // the largest's place, from x
  static constexpr bool selects_values = true;                                   // y is one of x's values

  template <Backend B>
  void forward(float const*, ConstMatrixView x, MatrixView y, Scratch, ForwardContext const&) const {
    ImageMath<B>::template max_pool<In, windows>(x, y);
  }
  template <Backend B>
  void backward(float const*, float*, ConstMatrixView x, ConstMatrixView, Scratch, ConstMatrixView dy, MatrixView dx,
                bool) const {
    if (dx.data != nullptr) ImageMath<B>::template max_pool_backward<In, windows>(x, dy, dx);
  }
};

// The mean over each of W's windows per channel, and its gradient: what both average
// pooling layers compute.
template <ImageShape In, PoolWindows W>
struct WindowMean {
  static constexpr BackwardReads backward_reads{.input = false, .output = false};  // dx = dy / window size

  template <Backend B>
  void forward(float const*, ConstMatrixView x, MatrixView y, Scratch, ForwardContext const&) const {
    ImageMath<B>::template average_pool<In, W>(x, y);
  }
  template <Backend B>
  void backward(float const*, float*, ConstMatrixView, ConstMatrixView, Scratch, ConstMatrixView dy, MatrixView dx,
                bool) const {
    if (dx.data != nullptr) ImageMath<B>::template average_pool_backward<In, W>(dy, dx);
  }
};

// The mean of each Pool x Pool window, per channel (Keras' AveragePooling2D(Pool,
// strides=Stride, padding=Pad)); under `same`, of the window's pixels inside the image.
template <ImageShape In, int Pool = 2, int Stride = Pool, Padding Pad = Padding::valid>
struct AveragePooling2D : Pooling<In, Pool, Stride, Pad>, WindowMean<In, Pooling<In, Pool, Stride, Pad>::windows> {
  static std::string name() { return "AveragePooling2D<" + Pooling<In, Pool, Stride, Pad>::text(); }
};

// The mean of each channel over the whole image (Keras' GlobalAveragePooling2D): a vector of
// In.channels values per sample, output_shape 1 x 1 x channels.
template <ImageShape In>
struct GlobalAveragePooling2D : WindowMean<In, PoolWindows{In.height, In.width, 1}> {  // one window, no padding
  static_assert(In.height >= 1 && In.width >= 1 && In.channels >= 1,
                "strata::GlobalAveragePooling2D<ImageShape{height, width, channels}>: every dimension must be at least 1");

  static constexpr ImageShape output_shape{1, 1, In.channels};
  static constexpr int input_width = In.size();
  static constexpr int output_width(int) { return In.channels; }
  static constexpr std::size_t parameter_count(int) { return 0; }
  static std::string name() { return "GlobalAveragePooling2D<" + In.text() + ">"; }
  void initialize(float*, int, Rng&) const {}
};

}  // namespace strata::nn
