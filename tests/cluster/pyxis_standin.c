/* A stand-in for NVIDIA's pyxis and enroot on the test cluster, for the cluster tests only: Debian packages neither.
 * It does to each task what pyxis's slurm_spank_task_init does with an enroot container whose 50-slurm-pytorch.sh
 * hook is enabled (ParallelCluster enables it), in the order it does it, so that ddp.so can be tested before and
 * after it in plugstack.conf. Followed (read, not copied), pyxis 0.24.0 (NVIDIA/pyxis 1075199) and enroot at
 * NVIDIA/enroot 8ea147d:
 *   1. enroot's hook (conf/hooks/extra/50-slurm-pytorch.sh, lines 19-42): for an image whose environment has
 *      PYTORCH_VERSION, and only for names the image's environment lacks, MASTER_ADDR = the first host of
 *      SLURM_STEP_NODELIST, MASTER_PORT = SLURM_JOB_ID % 4536 + 61000, WORLD_SIZE = SLURM_NTASKS (the job's),
 *      OMP_NUM_THREADS=1 when the step has more tasks than nodes. (Its RANK and LOCAL_RANK lines never fire under
 *      pyxis: pyxis keeps SLURM_PROCID and SLURM_LOCALID out of the environment enroot starts with, enroot_deny_env
 *      in pyxis_slurmstepd.c.) The result is the container's environment: enroot starts the container's process
 *      with a cleared environment, so nothing of the task's own reaches it.
 *   2. pyxis_slurmstepd.c, spank_import_container_env (lines 657-713): LANG, LANGUAGE and LC_ALL are unset in the
 *      task, then every variable of the container's environment is set in the task with overwrite.
 *   3. pytorch_setup_needed and pytorch_setup (lines 1441-1482): when the task now has PYTORCH_VERSION, RANK and
 *      LOCAL_RANK are set from SLURM_PROCID and SLURM_LOCALID, with overwrite.
 *   4. slurm_spank_task_init (lines 1562-1683): the task joins the container's user and mount namespaces, so
 *      every plugin after pyxis runs in the container's view. Here each task makes its own: a new user and mount
 *      namespace with a tmpfs on /tmp, as enroot's conf/mounts/10-system.fstab mounts one, an empty /sys (a view
 *      where a topology read in the task would find nothing), and each --container-mounts SRC:DST bound in.
 * Options (pyxis's names): --container-image=pytorch|pytorch-omp|plain (an image that does not exist fails the
 * step, as pyxis's import does), --container-mounts=SRC[:DST][,...]. STANDIN_CONTAINER_IMAGE in the step's
 * environment selects an image as well: a container plugin ddp.so cannot recognise by pyxis's option names. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <slurm/slurm.h>
#include <slurm/spank.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <unistd.h>

SPANK_PLUGIN(pyxis_standin, 1);

#define MAX_VARS 16
#define MAX_MOUNTS 8

struct var {
  const char *name;
  char value[256];
};

struct image {
  const char *name;
  const char *env[4]; /* NAME=VALUE, as a Dockerfile's ENV lines leave them */
};

static const struct image images[] = {
    {"pytorch", {"PYTORCH_VERSION=2.6.0", "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", NULL}},
    {"pytorch-omp",
     {"PYTORCH_VERSION=2.6.0", "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "OMP_NUM_THREADS=3",
      NULL}},
    {"plain", {"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", NULL}},
};

static char image_name[64];
static char mounts_arg[1024];

static int on_image(int val, const char *optarg, int remote) {
  (void)val;
  (void)remote;
  snprintf(image_name, sizeof image_name, "%s", optarg ? optarg : "");
  return 0;
}

static int on_mounts(int val, const char *optarg, int remote) {
  (void)val;
  (void)remote;
  snprintf(mounts_arg, sizeof mounts_arg, "%s", optarg ? optarg : "");
  return 0;
}

static struct spank_option options[] = {
    {"container-image", "NAME", "run the task in a stand-in container (tests only)", 1, 0, on_image},
    {"container-mounts", "SRC[:DST][,...]", "bind node directories into it (tests only)", 1, 0, on_mounts},
    SPANK_OPTIONS_TABLE_END};

int slurm_spank_init(spank_t sp, int ac, char **av) {
  (void)ac;
  (void)av;
  for (struct spank_option *o = options; o->name; o++)
    if (spank_option_register(sp, o) != ESPANK_SUCCESS) return -1;
  return 0;
}

static const struct image *find_image(const char *name) {
  for (size_t i = 0; i < sizeof images / sizeof images[0]; i++)
    if (strcmp(images[i].name, name) == 0) return &images[i];
  return NULL;
}

static int get(spank_t sp, const char *name, char *buf, int size) {
  return spank_getenv(sp, name, buf, size) == ESPANK_SUCCESS ? 0 : -1;
}

static int image_has(const struct image *img, const char *name) {
  size_t len = strlen(name);
  for (int i = 0; img->env[i]; i++)
    if (strncmp(img->env[i], name, len) == 0 && img->env[i][len] == '=') return 1;
  return 0;
}

static void add(struct var *vars, int *n, const char *name, const char *value) {
  if (*n >= MAX_VARS) return;
  vars[*n].name = name;
  snprintf(vars[*n].value, sizeof vars[*n].value, "%s", value);
  (*n)++;
}

static int first_host(const char *list, char *out, size_t size) {
#if SLURM_VERSION_NUMBER >= SLURM_VERSION_NUM(23, 11, 0)
  hostlist_t *hosts = slurm_hostlist_create(list);
#else
  hostlist_t hosts = slurm_hostlist_create(list);
#endif
  if (!hosts) return -1;
  char *host = slurm_hostlist_shift(hosts);
  if (host) snprintf(out, size, "%s", host);
  free(host);
  slurm_hostlist_destroy(hosts);
  return host ? 0 : -1;
}

/* Step 1: the image's environment, then the hook's lines for names the image lacks. */
static int container_env(spank_t sp, const struct image *img, struct var *vars, int *n, char names[][64]) {
  char buf[4096];
  for (int i = 0; img->env[i]; i++) {
    const char *eq = strchr(img->env[i], '=');
    snprintf(names[*n], 64, "%.*s", (int)(eq - img->env[i]), img->env[i]);
    add(vars, n, names[*n], eq + 1);
  }
  if (!image_has(img, "PYTORCH_VERSION")) return 0;
  if (!image_has(img, "MASTER_ADDR") && get(sp, "SLURM_STEP_NODELIST", buf, sizeof buf) == 0) {
    char host[256];
    if (first_host(buf, host, sizeof host) == 0) add(vars, n, "MASTER_ADDR", host);
  }
  if (!image_has(img, "MASTER_PORT") && get(sp, "SLURM_JOB_ID", buf, sizeof buf) == 0) {
    char port[16];
    snprintf(port, sizeof port, "%ld", strtol(buf, NULL, 10) % 4536 + 61000);
    add(vars, n, "MASTER_PORT", port);
  }
  if (!image_has(img, "WORLD_SIZE") && get(sp, "SLURM_NTASKS", buf, sizeof buf) == 0) add(vars, n, "WORLD_SIZE", buf);
  char tasks[16] = "1", nodes[16] = "1";
  get(sp, "SLURM_STEP_NUM_TASKS", tasks, sizeof tasks);
  get(sp, "SLURM_STEP_NUM_NODES", nodes, sizeof nodes);
  if (atol(tasks) > atol(nodes) && !image_has(img, "OMP_NUM_THREADS")) add(vars, n, "OMP_NUM_THREADS", "1");
  return 0;
}

/* Steps 2 and 3. */
static int import_env(spank_t sp, const struct var *vars, int n) {
  static const char *deny[] = {"LANG", "LANGUAGE", "LC_ALL"};
  char buf[256];
  for (size_t i = 0; i < sizeof deny / sizeof deny[0]; i++) spank_unsetenv(sp, deny[i]);
  for (int i = 0; i < n; i++)
    if (spank_setenv(sp, vars[i].name, vars[i].value, 1) != ESPANK_SUCCESS) return -1;
  if (get(sp, "PYTORCH_VERSION", buf, sizeof buf) != 0) return 0;
  if (get(sp, "SLURM_PROCID", buf, sizeof buf) != 0 || spank_setenv(sp, "RANK", buf, 1) != ESPANK_SUCCESS) return -1;
  if (get(sp, "SLURM_LOCALID", buf, sizeof buf) != 0 || spank_setenv(sp, "LOCAL_RANK", buf, 1) != ESPANK_SUCCESS)
    return -1;
  return 0;
}

static int write_file(const char *path, const char *text) {
  int fd = open(path, O_WRONLY | O_CLOEXEC);
  if (fd < 0) return -1;
  ssize_t n = write(fd, text, strlen(text));
  close(fd);
  return n == (ssize_t)strlen(text) ? 0 : -1;
}

static int mkdirs(const char *path) {
  char part[1024];
  for (const char *p = path + 1;; p++) {
    if (*p != '/' && *p != '\0') continue;
    snprintf(part, sizeof part, "%.*s", (int)(p - path), path);
    if (mkdir(part, 0755) != 0 && errno != EEXIST) return -1;
    if (*p == '\0') return 0;
  }
}

/* Step 4. The sources are bound first into the new /sys (an empty tmpfs), while the node's /tmp is still in
 * view, then moved to their places in the container's own /tmp. */
static int enter_container(void) {
  char src[MAX_MOUNTS][512], dst[MAX_MOUNTS][512], staged[64], map[64], buf[1024], cwd[1024];
  int n = 0;
  uid_t uid = getuid();
  gid_t gid = getgid();
  if (getcwd(cwd, sizeof cwd) == NULL) cwd[0] = '\0';
  snprintf(buf, sizeof buf, "%s", mounts_arg);
  for (char *save = NULL, *item = strtok_r(buf, ",", &save); item && n < MAX_MOUNTS;
       item = strtok_r(NULL, ",", &save), n++) {
    char *colon = strchr(item, ':');
    if (colon) *colon = '\0';
    snprintf(src[n], sizeof src[n], "%s", item);
    snprintf(dst[n], sizeof dst[n], "%s", colon ? colon + 1 : item);
  }
  /* Slurm's setreuid to the user made the task non-dumpable, which leaves /proc/self/uid_map to root. */
  if (prctl(PR_SET_DUMPABLE, 1, 0, 0, 0) != 0 || unshare(CLONE_NEWUSER | CLONE_NEWNS) != 0) {
    slurm_error("pyxis_standin: unshare: %s (unprivileged user namespaces are needed)", strerror(errno));
    return -1;
  }
  snprintf(map, sizeof map, "%u %u 1\n", (unsigned)uid, (unsigned)uid);
  if (write_file("/proc/self/setgroups", "deny") != 0 || write_file("/proc/self/uid_map", map) != 0) {
    slurm_error("pyxis_standin: uid_map: %s", strerror(errno));
    return -1;
  }
  snprintf(map, sizeof map, "%u %u 1\n", (unsigned)gid, (unsigned)gid);
  if (write_file("/proc/self/gid_map", map) != 0) {
    slurm_error("pyxis_standin: gid_map: %s", strerror(errno));
    return -1;
  }
  if (mount(NULL, "/", NULL, MS_REC | MS_SLAVE, NULL) != 0 ||
      mount("tmpfs", "/sys", "tmpfs", MS_NOSUID | MS_NODEV, "mode=0755") != 0) {
    slurm_error("pyxis_standin: container /sys: %s", strerror(errno));
    return -1;
  }
  for (int i = 0; i < n; i++) {
    snprintf(staged, sizeof staged, "/sys/m%d", i);
    if (mkdir(staged, 0755) != 0 || mount(src[i], staged, NULL, MS_BIND | MS_REC, NULL) != 0) {
      slurm_error("pyxis_standin: --container-mounts source %s: %s", src[i], strerror(errno));
      return -1;
    }
  }
  if (mount("tmpfs", "/tmp", "tmpfs", MS_NOSUID | MS_NODEV, "mode=1777") != 0) {
    slurm_error("pyxis_standin: container /tmp: %s", strerror(errno));
    return -1;
  }
  for (int i = 0; i < n; i++) {
    snprintf(staged, sizeof staged, "/sys/m%d", i);
    if (mkdirs(dst[i]) != 0 || mount(staged, dst[i], NULL, MS_MOVE, NULL) != 0 || rmdir(staged) != 0) {
      slurm_error("pyxis_standin: mounting %s at %s: %s", src[i], dst[i], strerror(errno));
      return -1;
    }
  }
  if (mount(NULL, "/sys", NULL, MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NODEV, NULL) != 0) {
    slurm_error("pyxis_standin: container /sys read-only: %s", strerror(errno));
    return -1;
  }
  /* pyxis changes to the image's working directory; here the step's, where the container has it. */
  if (cwd[0] == '\0' || chdir(cwd) != 0) return chdir("/");
  return 0;
}

int slurm_spank_task_init(spank_t sp, int ac, char **av) {
  char from_env[64];
  struct var vars[MAX_VARS];
  char names[MAX_VARS][64];
  int n = 0;
  (void)ac;
  (void)av;
  if (image_name[0] == '\0' && get(sp, "STANDIN_CONTAINER_IMAGE", from_env, sizeof from_env) == 0)
    snprintf(image_name, sizeof image_name, "%s", from_env);
  if (image_name[0] == '\0') return 0;
  const struct image *img = find_image(image_name);
  if (!img) {
    slurm_error("pyxis_standin: image '%s' does not exist (pytorch, pytorch-omp, plain)", image_name);
    return -1;
  }
  if (container_env(sp, img, vars, &n, names) != 0 || import_env(sp, vars, n) != 0) {
    slurm_error("pyxis_standin: cannot import the container's environment");
    return -1;
  }
  return enter_container();
}
