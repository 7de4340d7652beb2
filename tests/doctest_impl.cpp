// doctest's implementation, compiled once for every test program.
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>
