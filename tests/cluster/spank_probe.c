/* A SPANK plugin for the cluster tests only: it shows how the Slurm under test treats SPANK plugins, the
 * behaviour ddp.so is built around (spank_plugin/slurm_versions.h), so that a change in a new Slurm shows up as a
 * failing test instead of a surprise on a user's cluster.
 *   --probe-fail=user_init|task_init   that callback returns -1 (on every node)
 *   --probe-fail=task_init_1           task_init returns 1: an error only where Slurm counts any non-zero return
 *   --probe-count                      each task gets SPANK_PROBE_REMOTE_CALLS: how often slurmstepd ran the
 *                                      option's callback before user_init
 * Arguments on its plugstack line, for what happens before any option is known:
 *   fail_init    slurm_spank_init returns -1 in slurmstepd (the probe declares no slurm_spank_init_failure_mode,
 *                so from 25.05 on Slurm's default holds: the node drains)
 *   claim_ddp    in slurmstepd, registers an option named "ddp" first: listed before ddp.so, ddp.so's own
 *                registration is then refused there and its slurm_spank_init fails (srun sees no clash) */
#include <slurm/spank.h>
#include <stdio.h>
#include <string.h>

SPANK_PLUGIN(spank_probe, 1);

static char fail_in[32];
static int remote_calls;

static int on_fail(int val, const char *optarg, int remote) {
  (void)val;
  (void)remote;
  snprintf(fail_in, sizeof fail_in, "%s", optarg ? optarg : "");
  return 0;
}

static int on_claimed_ddp(int val, const char *optarg, int remote) {
  (void)val;
  (void)optarg;
  (void)remote;
  return 0;
}

static int on_count(int val, const char *optarg, int remote) {
  (void)val;
  (void)optarg;
  if (remote) remote_calls++;
  return 0;
}

static struct spank_option options[] = {
    {"probe-fail", "user_init|task_init", "fail that SPANK callback (tests only)", 1, 0, on_fail},
    {"probe-count", NULL, "count remote option callbacks (tests only)", 0, 0, on_count},
    SPANK_OPTIONS_TABLE_END};

static struct spank_option claimed_ddp = {"ddp", NULL, "an option of ddp.so's name (tests only)", 0, 0, on_claimed_ddp};

static int has_arg(int ac, char **av, const char *arg) {
  for (int i = 0; i < ac; i++)
    if (strcmp(av[i], arg) == 0) return 1;
  return 0;
}

int slurm_spank_init(spank_t sp, int ac, char **av) {
  if (spank_remote(sp) && has_arg(ac, av, "fail_init")) {
    slurm_error("spank_probe: failing slurm_spank_init as asked");
    return -1;
  }
  if (spank_remote(sp) && has_arg(ac, av, "claim_ddp") && spank_option_register(sp, &claimed_ddp) != ESPANK_SUCCESS)
    return -1;
  for (struct spank_option *o = options; o->name; o++)
    if (spank_option_register(sp, o) != ESPANK_SUCCESS) return -1;
  return 0;
}

int slurm_spank_user_init(spank_t sp, int ac, char **av) {
  (void)sp;
  (void)ac;
  (void)av;
  if (strcmp(fail_in, "user_init") == 0) {
    slurm_error("spank_probe: failing user_init as asked");
    return -1;
  }
  return 0;
}

int slurm_spank_task_init(spank_t sp, int ac, char **av) {
  char calls[16];
  (void)ac;
  (void)av;
  if (strcmp(fail_in, "task_init") == 0) {
    slurm_error("spank_probe: failing task_init as asked");
    return -1;
  }
  if (strcmp(fail_in, "task_init_1") == 0) {
    slurm_error("spank_probe: task_init returns 1 as asked");
    return 1;
  }
  snprintf(calls, sizeof calls, "%d", remote_calls);
  return spank_setenv(sp, "SPANK_PROBE_REMOTE_CALLS", calls, 1) == ESPANK_SUCCESS ? 0 : -1;
}
