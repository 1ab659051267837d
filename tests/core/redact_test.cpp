// Key material never reaches a message: the job's key, the HMACs derived from it, and the key names c10d and Gloo
// quote in their errors.
#include "core/redact.hpp"

#include <gtest/gtest.h>

#include "spank_plugin/step/ports.hpp"

namespace ddp {
namespace {

TEST(RedactKeyMaterial, TheJobKeyIsReplaced) {
  const std::string key = new_job_key();
  ASSERT_TRUE(is_job_key(key));
  EXPECT_EQ(redact_key_material("DDP_JOB_KEY=" + key + " was set"), "DDP_JOB_KEY=<job-key-derived> was set");
}

TEST(RedactKeyMaterial, KeyNamesInAGlooTimeoutAreReplacedAndTheRestKept) {
  // c10d's wait timeout as LibTorch 2.6 words it, with the keys under a recovery prefix (HMAC-SHA1, 40 digits).
  const std::string prefix = "3f786850e387550fdab836ed7e6dc881de23001b";
  const std::string error = "Socket Timeout: wait timeout after 30000ms, keys: /" + prefix +
                            "/recovery//g3/gloo/rank_1, /" + prefix + "/recovery//g3/gloo/rank_2";
  EXPECT_EQ(redact_key_material(error),
            "Socket Timeout: wait timeout after 30000ms, keys: /<job-key-derived>/recovery//g3/gloo/rank_1, "
            "/<job-key-derived>/recovery//g3/gloo/rank_2");
}

TEST(RedactKeyMaterial, ASha256InUpperCaseIsReplaced) {
  const std::string digest(64, 'A');
  EXPECT_EQ(redact_key_material("proof " + digest + "."), "proof <job-key-derived>.");
}

TEST(RedactKeyMaterial, ShorterHexRunsAndOrdinaryTextStay) {
  const std::string text =
      "snapshot-e000003-s000000001200-r0.pt at 0x7ffd1c2b3a40, CRC 9e83b2c1, port 29500, step 1234.5, " +
      std::string(kKeyMaterialDigits - 1, 'f');
  EXPECT_EQ(redact_key_material(text), text);
  EXPECT_EQ(redact_key_material(""), "");
}

TEST(RedactKeyMaterial, RunsAtTheEdgesAndSideBySideAreEachReplaced) {
  const std::string run(kKeyMaterialDigits, 'c');
  EXPECT_EQ(redact_key_material(run), kRedacted);
  EXPECT_EQ(redact_key_material(run + "/" + run + "\n"), std::string(kRedacted) + "/" + kRedacted + "\n");
}

}  // namespace
}  // namespace ddp
