#include "core/job_key.hpp"

#include "base/random_hex.hpp"

namespace ddp {

std::string new_job_key() { return random_hex(kJobKeyDigits, "the job's key"); }

bool is_job_key(std::string_view text) { return is_lower_hex(text, kJobKeyDigits); }

std::string new_job_instance() { return random_hex(kJobInstanceDigits, "the job's instance"); }

bool is_job_instance(std::string_view text) { return is_lower_hex(text, kJobInstanceDigits); }

}  // namespace ddp
