// The default main of the unit tests (doctest's implementation is in doctest_impl.cpp).
#include <doctest/doctest.h>

int main(int argc, char** argv) { return doctest::Context(argc, argv).run(); }
