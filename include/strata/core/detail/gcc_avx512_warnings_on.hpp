// (No include guard: closes the region gcc_avx512_warnings_off.hpp opened.)
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif
