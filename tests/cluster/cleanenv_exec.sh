#!/usr/bin/env bash
# cleanenv_exec.sh CMD...: runs CMD with the environment `apptainer exec --cleanenv IMAGE CMD...` gives it, for
# the cluster tests: Apptainer is not in Debian, and only what it does to the environment matters here. As
# Apptainer's SetContainerEnv (apptainer/apptainer, internal/pkg/util/env/clean.go) does with --cleanenv: the
# caller's variables are dropped except TERM and the proxy variables, each APPTAINERENV_X becomes X (HOME and PATH
# excepted), LANG=C, HOME and Apptainer's default PATH are set; APPTAINER_CONTAINER names the image, as Apptainer
# sets it inside. No namespaces, no image.
set -euo pipefail
vars=(LANG=C HOME=/ PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
      APPTAINER_CONTAINER=/cluster/images/stand-in.sif)
while IFS= read -r -d '' entry; do
  name=${entry%%=*}
  case $name in
    TERM | http_proxy | HTTP_PROXY | https_proxy | HTTPS_PROXY | no_proxy | NO_PROXY | all_proxy | ALL_PROXY) vars+=("$entry") ;;
    APPTAINERENV_HOME | APPTAINERENV_PATH) ;;
    APPTAINERENV_?*) vars+=("${entry#APPTAINERENV_}") ;;
  esac
done < <(env -0)
exec env -i "${vars[@]}" "$@"
