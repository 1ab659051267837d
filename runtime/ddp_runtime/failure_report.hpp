#pragma once
// ddp-train's failure report: when it ends with an error it writes what PyTorch's @record writes for a Python
// program, torchrun's JSON error file, to TORCHELASTIC_ERROR_FILE (set per task by srun --ddp and by torchrun):
//   {"message": {"message": "<error>", "errorCode": <exit status>,
//                "extraInfo": {"timestamp": "<seconds since 1970>", "run_id": "<TORCHELASTIC_RUN_ID>",
//                              "rank": <RANK>, "hostname": "<host>", "program": "ddp-train"}}}
// errorCode is the field torchrun itself fills with a worker's exit code; the extraInfo keys after timestamp are
// ours (torchrun reads timestamp and py_callstack and ignores the rest). ddp-why and srun --ddp read it back.
// Plain C++: no LibTorch here.
#include <string>

#include "launch.hpp"

namespace ddp::runtime {

// The report's text.
std::string error_report_json(const std::string& message, int exit_status, const EnvLookup& env, double time);

// Writes the report to TORCHELASTIC_ERROR_FILE when it is set (through a temporary file and a rename, so a reader
// never sees half of it); returns false, with `why` set, when it cannot. Without the variable, does nothing.
bool write_error_report(const std::string& message, int exit_status, const EnvLookup& env, std::string* why);

}  // namespace ddp::runtime
