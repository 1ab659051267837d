#pragma once
// How the doctor asks a GPU vendor's management library (NVML, ROCm SMI), the same for every vendor: loaded at run
// time (so that ddp-doctor needs no driver to build or start), its entry points bound, then initialised, read and
// shut down by the vendor's own code; each stage that fails is the query's one-line error.
#include <optional>
#include <string>
#include <utility>

#include "base/shared_library.hpp"
#include "doctor/checks/gpu.hpp"

namespace ddp::doctor {

struct DriverLibrary {
  const char* api;            // "NVML": whose entry points the library lacks
  const char* not_installed;  // why it may not load: "the NVIDIA driver is not installed here"
  const char* too_old;        // why it may lack an entry point: "driver too old"
};

// `bind` returns the entry points, nullopt when one is missing; `read` initialises the library, fills the report,
// shuts the library down and returns the first failed call's text ("" on success).
template <class Api>
DriverQuery query_driver_library(const std::string& path, const DriverLibrary& library,
                                 std::optional<Api> (*bind)(const SharedLibrary&),
                                 std::string (*read)(const Api&, DriverReport&)) {
  DriverQuery query;
  const SharedLibrary loaded(path);
  if (!loaded.loaded()) {
    query.error = "cannot load " + path + " (" + library.not_installed + ")";
    return query;
  }
  query.loaded = true;
  const std::optional<Api> api = bind(loaded);
  if (!api) {
    query.error = path + " lacks " + library.api + " entry points this tool uses (" + library.too_old + ")";
    return query;
  }
  DriverReport report;
  query.error = read(*api, report);
  if (query.error.empty()) query.report = std::move(report);
  return query;
}

}  // namespace ddp::doctor
