#!/usr/bin/env bash
# mpirun on this host with what Open MPI needs in a container: root allowed,
# no single-copy shared memory (no ptrace/CMA in containers), more processes
# than cores allowed, no core binding (the processes share the cores).
#   scripts/mpirun_local.sh -np 2 build/bin/mirrortrain train --config FILE
set -euo pipefail
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMPI_MCA_btl_vader_single_copy_mechanism=none
# No ssh/rsh agent is needed for processes on this host.
export OMPI_MCA_plm_rsh_agent="${OMPI_MCA_plm_rsh_agent:-}"
exec mpirun --oversubscribe --bind-to none "$@"
