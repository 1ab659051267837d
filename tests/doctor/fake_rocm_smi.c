/* A stand-in for ROCm SMI's librocm_smi64 with the entry points ddp-doctor loads: two MI250X GCDs, the second
 * with 30 GiB already in use. FAKE_RSMI_INIT_ERROR=N makes rsmi_init fail with code N, the way a node without the
 * amdgpu kernel module answers (8: RSMI_STATUS_INIT_ERROR). */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
  uint32_t major;
  uint32_t minor;
  uint32_t patch;
  const char* build;
} FakeVersion;

static const uint32_t kGpus = 2;
static const uint64_t kGiB = 1ull << 30;

int rsmi_init(uint64_t flags) {
  const char* error = getenv("FAKE_RSMI_INIT_ERROR");
  (void)flags;
  return error ? atoi(error) : 0;
}

int rsmi_shut_down(void) { return 0; }

int rsmi_status_string(int status, const char** text) {
  *text = status == 8 ? "RSMI_STATUS_INIT_ERROR: An error occurred when initializing internal data structures"
                      : "RSMI_STATUS_UNKNOWN_ERROR";
  return 0;
}

int rsmi_version_get(FakeVersion* version) {
  version->major = 7;
  version->minor = 3;
  version->patch = 0;
  version->build = "";
  return 0;
}

int rsmi_version_str_get(int component, char* text, uint32_t length) {
  if (component != 0) return 2; /* RSMI_STATUS_INVALID_ARGS */
  strncpy(text, "6.10.5", length);
  return 0;
}

int rsmi_num_monitor_devices(uint32_t* count) {
  *count = kGpus;
  return 0;
}

int rsmi_dev_name_get(uint32_t index, char* name, size_t length) {
  if (index >= kGpus) return 2;
  strncpy(name, "AMD Instinct MI250X", length);
  return 0;
}

int rsmi_dev_memory_total_get(uint32_t index, int type, uint64_t* total) {
  if (index >= kGpus || type != 0) return 2;
  *total = 64 * kGiB;
  return 0;
}

int rsmi_dev_memory_usage_get(uint32_t index, int type, uint64_t* used) {
  if (index >= kGpus || type != 0) return 2;
  *used = index == 1 ? 30 * kGiB : kGiB / 4;
  return 0;
}
