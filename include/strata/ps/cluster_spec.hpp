#pragma once
// ClusterSpec: a ParameterServer job's processes and this process's role, in the JSON shape
// of TensorFlow's TF_CONFIG:
//
//   {"cluster": {"chief": ["host:2220"], "worker": ["host:2221", "host:2222"],
//                "ps": ["host:2223", "host:2224"]},
//    "task": {"type": "worker", "index": 1}}
//
// Every process gets the same "cluster" and its own "task". The chief runs the coordinator,
// each "ps" task one server, each "worker" task one worker; a worker's address is only its
// name here (workers connect to the chief and the servers, nobody connects to them). An
// "evaluator" task (at most one; "cluster" may list it as "evaluator": ["host:port"]) reads
// the chief's checkpoints and evaluates them beside the job (ps::run_evaluator); when
// "cluster" lists one, the chief leaves evaluation to it.
// ClusterSpec::from_environment() reads the TF_CONFIG variable. Anything missing or
// malformed is a ConfigError naming the key and what was found.

#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>
#include <vector>

#include "strata/core/error.hpp"
#include "strata/io/json.hpp"

namespace strata::ps {

enum class Role { chief, worker, ps, evaluator };

inline char const* name(Role r) {
  switch (r) {
    case Role::chief: return "chief";
    case Role::worker: return "worker";
    case Role::ps: return "ps";
    case Role::evaluator: return "evaluator";
  }
  return "?";
}

struct ClusterSpec {
  std::string chief;                 // "host:port"
  std::vector<std::string> workers;  // "host:port" each (names only)
  std::vector<std::string> servers;  // "host:port" each: the "ps" tasks
  std::vector<std::string> evaluators;  // none, or the one "evaluator" task (a name only)
  Role role = Role::chief;
  int index = 0;                     // this task's index within its role

  // tcp:// addresses: what peers connect to, and what a task binds (every interface, its port).
  [[nodiscard]] static std::string connect_address(std::string const& host_port) { return "tcp://" + host_port; }
  [[nodiscard]] static std::string bind_address(std::string const& host_port) {
    return "tcp://*:" + host_port.substr(host_port.rfind(':') + 1);
  }
  [[nodiscard]] std::vector<std::string> server_addresses() const {
    std::vector<std::string> out;
    for (auto const& s : servers) out.push_back(connect_address(s));
    return out;
  }
  // This task's own "host:port".
  [[nodiscard]] std::string const& own_address() const {
    switch (role) {
      case Role::chief: return chief;
      case Role::ps: return servers[std::size_t(index)];
      case Role::worker: return workers[std::size_t(index)];
      case Role::evaluator: break;
    }
    static std::string const unlisted;  // an evaluator that "cluster" does not list
    return evaluators.empty() ? unlisted : evaluators[0];
  }

  static ClusterSpec parse(std::string_view text, std::string const& source = "TF_CONFIG") {
    io::json::Value const root = io::json::parse(text, source);
    auto fail = [&](auto const&... what) -> void { throw ConfigError(strata::detail::message(source, ": ", what...)); };
    if (!root.is_object()) fail("must be a JSON object with \"cluster\" and \"task\"");
    io::json::Value const* cluster = root.find("cluster");
    io::json::Value const* task = root.find("task");
    if (!cluster || !cluster->is_object()) fail("has no \"cluster\" object");
    if (!task || !task->is_object()) fail("has no \"task\" object");
    ClusterSpec spec;
    auto addresses = [&](char const* key, bool required) {
      std::vector<std::string> out;
      io::json::Value const* list = cluster->find(key);
      if (!list) {
        if (required) fail("\"cluster\" has no \"", key, "\" list");
        return out;
      }
      if (!list->is_array()) fail("\"cluster\".\"", key, "\" must be a list of \"host:port\" strings");
      for (auto const& item : list->items) {
        if (!item.is_string() || item.text.find(':') == std::string::npos || item.text.back() == ':')
          fail("\"cluster\".\"", key, "\" holds \"", item.text, "\", which is not \"host:port\"");
        std::string const port = item.text.substr(item.text.rfind(':') + 1);
        if (port.find_first_not_of("0123456789") != std::string::npos || port.size() > 5 || std::stoul(port) > 65535)
          fail("\"cluster\".\"", key, "\" holds \"", item.text, "\", whose port is not a number in 0..65535");
        out.push_back(item.text);
      }
      return out;
    };
    auto const chief = addresses("chief", true);
    if (chief.size() != 1) fail("\"cluster\".\"chief\" must hold exactly one address, not ", chief.size());
    spec.chief = chief[0];
    spec.workers = addresses("worker", true);
    spec.servers = addresses("ps", true);
    if (spec.workers.empty()) fail("\"cluster\".\"worker\" is empty; a job needs at least one worker");
    if (spec.servers.empty()) fail("\"cluster\".\"ps\" is empty; a job needs at least one ps task");
    spec.evaluators = addresses("evaluator", false);
    if (spec.evaluators.size() > 1)
      fail("\"cluster\".\"evaluator\" holds ", spec.evaluators.size(), " addresses; a job has at most one evaluator");

    io::json::Value const* type = task->find("type");
    if (!type || !type->is_string()) fail("\"task\".\"type\" must be \"chief\", \"worker\", \"ps\" or \"evaluator\"");
    if (type->text == "chief") spec.role = Role::chief;
    else if (type->text == "worker") spec.role = Role::worker;
    else if (type->text == "ps") spec.role = Role::ps;
    else if (type->text == "evaluator") spec.role = Role::evaluator;
    else fail("\"task\".\"type\" is \"", type->text, "\"; it must be \"chief\", \"worker\", \"ps\" or \"evaluator\"");
    std::uint64_t index = 0;
    io::json::Value const* index_value = task->find("index");
    if (index_value && !index_value->as_size(index, 1u << 20)) fail("\"task\".\"index\" must be a non-negative integer");
    std::size_t const tasks = spec.role == Role::chief || spec.role == Role::evaluator ? 1
                              : spec.role == Role::worker                               ? spec.workers.size()
                                                                                        : spec.servers.size();
    if (index >= tasks)
      fail("\"task\" is ", name(spec.role), " ", index, " but \"cluster\" has ", tasks, " ", name(spec.role), " task(s)");
    spec.index = int(index);
    return spec;
  }

  // The TF_CONFIG environment variable, parsed.
  static ClusterSpec from_environment() {
    char const* text = std::getenv("TF_CONFIG");
    if (!text || !*text)
      throw ConfigError("TF_CONFIG is not set: give each process the cluster and its task, e.g. "
                        "TF_CONFIG='{\"cluster\": {\"chief\": [\"localhost:2220\"], \"worker\": [\"localhost:2221\"], "
                        "\"ps\": [\"localhost:2222\"]}, \"task\": {\"type\": \"chief\", \"index\": 0}}'");
    return parse(text);
  }
};

}  // namespace strata::ps
