#pragma once
// The message of the exception a call throws, or "(no exception)": for tests that check
// more than one part of a message.
#include <exception>
#include <string>

template <class F>
std::string message_of(F&& f) {
  try {
    f();
  } catch (std::exception const& e) {
    return e.what();
  }
  return "(no exception)";
}
